"""The in-place layout through the one loop: Fast-dLLM's dual cache against the exact no-cache policy.

The dual cache reuses the prefix's and suffix's keys/values within a block (model/infer/cache.py), so
it equals the exact policy whenever every block is decided in its first step; these tests hold it to
that, and check that within a block it really runs only the block.
"""

from __future__ import annotations

import pytest
import torch

from editserver.model.infer.cache import DualCache, InPlaceNoCache
from editserver.model.infer.engine import EditRequest, Engine, FimRequest, SamplingOptions
from editserver.model.infer.loader import load_checkpoint
from editserver.model.infer.middle_ce import middle_ce
from tests.hf_models import make_dream, make_llada

PREFIX, SUFFIX = "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"
PROMPT = (
    "<|recently_viewed_code_snippets|>\n<|/recently_viewed_code_snippets|>\n\n"
    "<|current_file_content|>\ncurrent_file_path: a.py\n"
    "<|code_to_edit|>\ndef area(w, h):\n    return w<|cursor|> * h\n<|/code_to_edit|>\n"
    "<|/current_file_content|>\n\n<|edit_diff_history|>\n<|/edit_diff_history|>"
)


@pytest.fixture(scope="module", params=["dream", "llada"])
def ck(request, tmp_path_factory):
    make = make_dream if request.param == "dream" else make_llada
    d, _ = make(tmp_path_factory.mktemp(request.param) / "m")
    return load_checkpoint(d)


def engines(ck):
    return Engine(ck), Engine(ck, cache="exact")


@pytest.mark.parametrize(
    "options",
    [
        SamplingOptions(sequential=True, block_size=1),  # one position a block, one token a step
        SamplingOptions(threshold=0.0, block_size=8),  # every block committed in its first step
    ],
    ids=["block-of-one", "threshold-0"],
)
def test_dual_cache_equals_exact_when_blocks_finish_in_one_step(ck, options):
    dual, exact = engines(ck)
    assert isinstance(dual.cache, DualCache) and isinstance(exact.cache, InPlaceNoCache)
    assert not dual.cache.exact and exact.cache.exact
    reqs = [
        FimRequest(PREFIX, SUFFIX, max_tokens=12, options=options),
        FimRequest("x = 1\n", "", max_tokens=12, options=options),
    ]
    a, b = dual.complete_batch(reqs), exact.complete_batch(reqs)
    for x, y in zip(a, b):
        assert x.text == y.text
        assert x.token_confidences == pytest.approx(y.token_confidences, abs=1e-5)
    e1, e2 = (
        dual.complete(EditRequest(PROMPT, options=options)),
        exact.complete(EditRequest(PROMPT, options=options)),
    )
    assert e1.text == e2.text


def test_dual_cache_runs_only_the_block_within_a_block(ck):
    """A block of 4 decoded one token a step: one whole-sequence pass at the block's first step, then
    only the block's span (plus the position before it when logits are shifted)."""
    dual, _ = engines(ck)
    calls = {"encode": 0, "span": 0, "span_len": set()}
    model = ck.model
    encode, span = model.encode, model.encode_span

    def counted_encode(*a, **k):
        calls["encode"] += 1
        return encode(*a, **k)

    def counted_span(ids, *a, **k):
        calls["span"] += 1
        calls["span_len"].add(ids.shape[1])
        return span(ids, *a, **k)

    model.encode, model.encode_span = counted_encode, counted_span
    try:
        opts = SamplingOptions(sequential=True, block_size=4)
        c = dual.complete(FimRequest(PREFIX, SUFFIX, max_tokens=8, options=opts))
    finally:
        del model.encode, model.encode_span
    blocks = -(-c.canvas_tokens // 4) if c.finish_reason == "length" else None
    assert calls["encode"] >= 1 and calls["span"] >= 1
    if blocks is not None:
        assert calls["encode"] == blocks and calls["span"] == c.steps - blocks
    assert calls["span_len"] == {4 + int(model.cfg.shift)}


def test_canvas_growth_moves_the_suffix(ck):
    """A canvas that grows past the first width is prepared again with the suffix after it."""
    dual, exact = engines(ck)
    opts = SamplingOptions(threshold=0.0, block_size=8)
    req = FimRequest(PREFIX, SUFFIX, max_tokens=40, options=opts)
    dual.inference.fim_max_tokens = 8
    try:
        a, b = dual.complete(req), exact.complete(req)
    finally:
        dual.inference.fim_max_tokens = 64
    assert a.text == b.text and a.canvas_tokens == 40


def test_middle_ce_in_place_is_finite_and_ordered(ck):
    dual, _ = engines(ck)
    req = FimRequest(PREFIX, SUFFIX, max_tokens=8)
    full = middle_ce(dual, req, "a + b")
    l2r = middle_ce(dual, req, "a + b", left_to_right=True)
    assert torch.isfinite(torch.tensor([full, l2r])).all()
