"""Fixed canvas lengths side by side (model/infer/lengths.py): each row decodes as it would alone,
the likeliest answer wins, and an answer that fills its longest canvas is decoded again longer."""

from __future__ import annotations

import dataclasses

import pytest

from editserver.model.infer.engine import Engine, FimRequest, SamplingOptions, line_likelihood
from editserver.model.infer.lengths import filled, lengths_for, longer
from tests.hf_models import make_published

PROMPT = FimRequest("def area(width, height):\n    return ", "\n\nprint(area(2, 3))\n", max_tokens=16)


def test_lengths_and_regrowth_rule() -> None:
    assert lengths_for((8, 4, 32), 16) == [16, 8, 4]  # capped by max_tokens, longest first
    assert longer(8, 32) == 16 and longer(16, 20) == 20 and longer(20, 20) is None


@pytest.fixture(scope="module", params=["own", "in-place"])
def engine(request, tiny_checkpoint, tmp_path_factory) -> Engine:
    if request.param == "own":
        return Engine.load(tiny_checkpoint)
    return Engine.load(make_published(tmp_path_factory.mktemp("lengths"), "Open-dCoder-0.5B")[0])


def _ask(engine: Engine, canvases: tuple[int, ...], max_tokens: int = 16):
    req = dataclasses.replace(PROMPT, max_tokens=max_tokens, options=SamplingOptions(canvases=canvases))
    return engine.complete(req)


def test_rows_decode_as_alone_and_the_likeliest_wins(engine) -> None:
    """At max_tokens 8 the longest row is the cap, so nothing is decoded again: the answer is one of
    the rows, exactly as that length decodes alone; of rows that all filled, the likeliest."""
    both = _ask(engine, (4, 8), max_tokens=8)
    alone = {n: _ask(engine, (n,), max_tokens=n) for n in (4, 8)}
    assert engine.plan(dataclasses.replace(PROMPT, options=SamplingOptions(canvases=(4, 8)))).fixed_canvas
    assert all(filled(c) for c in alone.values())  # a random tiny model never ends an answer
    row = alone[both.canvas_tokens]
    # same tokens; the padded batch moves float sums in the third decimal
    assert both.text == row.text and line_likelihood(both) == pytest.approx(line_likelihood(row), abs=1e-2)
    assert line_likelihood(both) >= max(line_likelihood(c) for c in alone.values()) - 1e-2


def test_a_filled_answer_is_decoded_again_on_a_longer_fixed_canvas(engine) -> None:
    """A random tiny model never ends an answer, so every longest canvas fills and the answer is
    decoded again, doubling, up to max_tokens; each decode is the fixed canvas as decoded alone."""
    short = [_ask(engine, (n,), max_tokens=n) for n in (2, 4)]
    assert all(filled(s) for s in short)
    c = _ask(engine, (2, 4), max_tokens=16)
    full = _ask(engine, (16,), max_tokens=16)
    assert c.canvas_tokens == 16 and c.text == full.text
    assert _ask(engine, (2, 4), max_tokens=4).canvas_tokens in (2, 4)  # the cap: no second decode
    with pytest.raises(ValueError, match="canvases must be positive"):
        _ask(engine, (0, 4))
