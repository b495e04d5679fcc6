"""The line-length ensemble ends a row once it can no longer win its request (model/infer/engine.py)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from editserver.model.infer.early_stop import outscored, stop_hook
from editserver.model.infer.engine import Engine, FimRequest, SamplingOptions, line_likelihood

EOT, M = 0, 9  # end-of-text and a stand-in for an undecided position's token


def _rows(*rows: list[tuple[int, float] | None]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """canvas, fixed, conf from rows of (token, confidence) or None (undecided)."""
    canvas = torch.tensor([[M if x is None else x[0] for x in r] for r in rows])
    fixed = torch.tensor([[x is not None for x in r] for r in rows])
    conf = torch.tensor([[0.0 if x is None else x[1] for x in r] for r in rows])
    return canvas, fixed, conf


def test_a_row_beaten_by_a_finished_one_ends_and_no_other() -> None:
    e = math.exp
    canvas, fixed, conf = _rows(
        [(5, e(-1)), (EOT, 1.0), (EOT, 1.0)],  # 0: finished, score -1
        [(5, e(-2)), None, (7, 0.99)],  # 1: start -2 < -1: cannot win
        [(5, e(-0.5)), None, None],  # 2: start -0.5: may still win
        [(5, e(-3)), None, None],  # 3: beaten start, but its own group has no finished row
        [(6, e(-1)), (EOT, 1.0), (EOT, 1.0)],  # 4: finished with exactly row 0's score: a tie
        [(6, e(-1)), None, None],  # 5: start equal to the finished score: may still tie, stays
    )
    ended = torch.zeros(6, dtype=torch.bool)
    out = outscored(canvas, fixed, conf, ended, [[0, 1, 2], [3], [4, 5]], EOT)
    assert out.tolist() == [False, True, False, False, False, False]


def test_a_committed_end_of_turn_ends_the_row_once_nothing_before_it_is_open() -> None:
    """An instruct model's end of turn (8 here) ends its row when it and everything before it are
    committed (the text is cut there anyway); one behind an open position does not, nor a row
    without it; no turn ends and no stops: no hook."""
    done = stop_hook([[], [], []], lambda ids: "x" * len(ids), EOT, None, frozenset({8}))
    canvas, fixed, conf = _rows(
        [(5, 0.9), (8, 0.9), None],  # ended: the answer is "5"
        [(5, 0.9), None, (8, 0.9)],  # an open position before it: not yet
        [(5, 0.9), (6, 0.9), None],
    )
    assert done(canvas, fixed, conf).tolist() == [True, False, False]
    assert stop_hook([[], []], lambda ids: "", EOT) is None


def test_a_committed_end_of_text_finishes_the_row_and_scores_with_its_confidence() -> None:
    e = math.exp
    canvas, fixed, conf = _rows(
        [(5, e(-1)), (EOT, e(-0.5)), None],  # finished (tail still open): score -1.5
        [(5, e(-1.2)), None, None],  # -1.2 > -1.5: stays
        [(5, e(-0.1)), (EOT, e(-0.1)), None],  # finished: -0.2
        [(5, e(-0.3)), (6, 0.9), None],  # -0.3 - 0.105 < -0.2: ends
    )
    out = outscored(canvas, fixed, conf, torch.zeros(4, dtype=torch.bool), [[0, 1], [2, 3]], EOT)
    assert out.tolist() == [False, False, False, True]
    # a row ended by its stop sequence this very step counts as finished at its committed start
    canvas, fixed, conf = _rows([(5, e(-0.2)), None], [(5, e(-0.3)), None])
    out = outscored(canvas, fixed, conf, torch.tensor([True, False]), [[0, 1]], EOT)
    assert out.tolist() == [False, True]


def test_the_ensemble_answers_as_each_row_alone_in_fewer_steps(shipped_checkpoint) -> None:
    """Ending outscored rows changes no answer; on the last prompt it saves steps (the shipped model)."""
    engine = Engine.load(shipped_checkpoint)
    plain = dataclasses.replace(engine.inference, line_canvases=())
    with_short = dataclasses.replace(engine.inference, line_canvases=(24,))
    prefixes = [
        "if __name__ == ",
        "def k(a, b):\n    if a > b:\n        return ",
        "def f(n):\n    if n < 2:\n        return ",
        "result = []\nfor i in range(n):\n    result.",  # its 24-token row ends early here
    ]
    saved = 0
    for sequential in (True, False):
        opts = SamplingOptions(stop=["\n"], sequential=sequential)
        for p in prefixes:
            req = FimRequest(p, "\n", max_tokens=32, options=opts)
            engine.inference = plain
            own, short = engine.complete(req), engine.complete(dataclasses.replace(req, max_tokens=24))
            engine.inference = with_short
            got = engine.complete(req)
            want = short if line_likelihood(short) > line_likelihood(own) else own
            # the score only up to float rounding: a batch of two rows sums in another order
            assert (got.text, got.completion_tokens) == (want.text, want.completion_tokens)
            assert got.score == pytest.approx(want.score, abs=1e-5)
            assert got.steps <= max(own.steps, short.steps)
            saved += max(own.steps, short.steps) - got.steps
    assert saved > 0
