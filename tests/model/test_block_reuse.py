"""Context reuse across keystrokes for block-diffusion families: exact by construction.

A block's keys/values depend only on it and the blocks before it (block-causal attention), so a
request that shares its first whole blocks with a recent one takes them from the store and computes
the rest. These tests type a file a few characters at a time through the engine, once with the
store and once without, and compare every answer; and they check the reused keys/values against a
fresh pass. The block families: SDAR (logits not shifted) and Fast-dLLM v2 (shifted, which reads the
hidden state of the last context position, so its last whole block is always computed), and
Stable-DiffCoder, whose FIM prompt opens with the suffix (SPM order): typing changes only the
prefix's end, so the suffix's blocks and the prefix's head are shared.
"""

from __future__ import annotations

import pytest
import torch

from editserver.model.infer.block_cache import BlockCache
from editserver.model.infer.cache import Rows
from editserver.model.infer.engine import Engine, FimRequest, SamplingOptions
from editserver.model.infer.prefix import DEFAULT_MB, PrefixStore
from tests.hf_fast_dllm import make_fast_dllm
from tests.hf_sdar import make_sdar
from tests.hf_stable_diffcoder import make_stable_diffcoder

FILE_ABOVE = "import os\n\n\ndef walk(root):\n    out = []\n    for name in os.listdir(root):\n"
LINE = "        out.append(os.path.join(root, name))"
FILE_BELOW = "\n    return out\n\n\ndef main():\n    print(walk('.'))\n"


@pytest.fixture(scope="module", params=["sdar", "fast-dllm-v2", "stable-diffcoder"])
def directory(request, tmp_path_factory):
    make = {"sdar": make_sdar, "fast-dllm-v2": make_fast_dllm}.get(request.param, make_stable_diffcoder)
    d, _ = make(tmp_path_factory.mktemp(request.param))
    return d


def _typing(engine: Engine, chars: int = 3) -> list[tuple[str, str]]:
    """(answer text, tokens) of a one-line FIM request after every ``chars`` typed characters."""
    out = []
    for n in range(0, len(LINE) + 1, chars):
        opts = SamplingOptions(stop=["\n"])
        req = FimRequest(prefix=FILE_ABOVE + LINE[:n], suffix=FILE_BELOW, max_tokens=8, options=opts)
        c = engine.complete(req)
        out.append((c.text, c.token_confidences))
    return out


def test_typing_with_reuse_answers_as_without(directory):
    """Every answer of the typing replay is identical with reuse on and off, and reuse did happen."""
    on = Engine.load(directory)  # block families reuse by default (exact)
    off = Engine.load(directory, prefix_cache_mb=0)
    assert off.prefix is None and on.prefix is not None
    assert on.prefix.max_bytes == DEFAULT_MB["block"] * 2**20
    with_reuse, without = _typing(on), _typing(off)
    assert [t for t, _ in with_reuse] == [t for t, _ in without]
    for (_, a), (_, b) in zip(with_reuse, without):
        assert a == pytest.approx(b, abs=1e-4)
    stats = on.prefix.stats()
    assert stats["hits"] >= len(with_reuse) - 1  # every request after the first found the file's head
    assert stats["reused_tokens"] > stats["computed_tokens"] / 2


def test_reused_blocks_equal_a_fresh_pass(directory):
    """The keys/values and the last hidden state a request builds from the store equal a fresh pass
    over its context, for a context that shares part of a block (cut back to whole blocks) and one
    that shares everything."""
    e = Engine.load(directory, prefix_cache_mb=0)
    b = e.model.cfg.block_size
    torch.manual_seed(0)
    first = torch.randint(0, 200, (6 * b,))  # [6b] six whole blocks
    second = first.clone()
    second[3 * b + 1] += 1  # differs inside block 3: blocks 0..2 are reusable
    store = PrefixStore(2**30, min_reuse=1)
    for ctx, want_reused in ((first, 0), (second, 3 * b), (second, 5 * b if e.model.cfg.shift else 6 * b)):
        rows = Rows(ctx[None], torch.tensor([len(ctx)]), torch.tensor([4]))
        before = store.reused_tokens
        got = BlockCache(store=store).prepare(e.model, rows)
        ref = BlockCache().prepare(e.model, rows)
        assert store.reused_tokens - before == want_reused
        for (k, v), (rk, rv) in zip(got.kv, ref.kv):
            torch.testing.assert_close(k, rk, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(v, rv, atol=1e-5, rtol=1e-5)
        if e.model.cfg.shift:
            torch.testing.assert_close(got.last, ref.last, atol=1e-5, rtol=1e-5)


def test_a_batch_mixing_hits_and_misses(directory):
    """Rows of one batch, one found in the store and one not, get the keys/values of a fresh pass."""
    e = Engine.load(directory, prefix_cache_mb=0)
    b = e.model.cfg.block_size
    g = torch.Generator().manual_seed(1)
    seen = torch.randint(0, 200, (4 * b,), generator=g)
    other = torch.randint(0, 200, (2 * b,), generator=g)
    store = PrefixStore(2**30, min_reuse=1)
    BlockCache(store=store).prepare(e.model, Rows(seen[None], torch.tensor([4 * b]), torch.tensor([4])))
    ctx = torch.zeros(2, 4 * b, dtype=torch.long)
    ctx[0], ctx[1, : 2 * b] = seen, other
    rows = Rows(ctx, torch.tensor([4 * b, 2 * b]), torch.tensor([4, 4]))
    got, ref = BlockCache(store=store).prepare(e.model, rows), BlockCache().prepare(e.model, rows)
    for (k, v), (rk, rv) in zip(got.kv, ref.kv):
        torch.testing.assert_close(k[0], rk[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(k[1, :, : 2 * b], rk[1, :, : 2 * b], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(v[1, :, : 2 * b], rv[1, :, : 2 * b], atol=1e-5, rtol=1e-5)
    assert torch.equal(got.valid, ref.valid)
