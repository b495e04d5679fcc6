"""Context reuse across requests (model/infer/prefix.py): the store's bookkeeping, what a request may
reuse, re-rotated keys against freshly computed ones, and documents typed at once kept apart, for our
own transformer and the open families (Dream, LLaDA layouts)."""

from __future__ import annotations

import pytest
import torch

from editserver.model.infer.cache import ContextCache, DualCache
from editserver.model.infer.engine import Engine, FimRequest, SamplingOptions
from editserver.model.infer.loader import load_checkpoint
from editserver.model.infer.prefix import PrefixStore, match, rotate
from editserver.model.infer.transformer import rope_tables
from tests.hf_models import make_dream, make_llada


def _kv(n: int, layers: int = 2, fill: float = 0.0) -> list:
    """Per-layer (k, v) [1, 2, n, 8] of ``n`` positions (4 bytes each element)."""
    return [(torch.full((1, 2, n, 8), fill), torch.full((1, 2, n, 8), fill)) for _ in range(layers)]


def ids(*xs) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.long)


def test_store_hits_misses_and_least_recently_used_eviction():
    per = 2 * 2 * (2 * 32 * 8 * 4)  # layers x (k, v) x bytes of a 32-position row
    store = PrefixStore(max_bytes=2 * per, min_reuse=4)
    a, b, c = torch.arange(32), torch.arange(100, 132), torch.arange(200, 232)
    assert store.lookup(a) is None  # empty: a miss
    assert store.put(a, _kv(32)) and store.put(b, _kv(32))
    assert store.lookup(a).tokens == 32  # a hit, and a becomes the most recently used
    assert store.put(c, _kv(32))  # over the bound: b, the least recently used, goes
    assert store.nbytes <= store.max_bytes and len(store) == 2
    assert store.lookup(b) is None and store.lookup(c).tokens == 32 and store.lookup(a).tokens == 32
    s = store.stats()
    assert (s["hits"], s["misses"], s["evictions"]) == (3, 2, 1)
    assert not store.put(torch.arange(300, 400), _kv(100))  # alone beyond the bound: not kept
    assert store.nbytes <= store.max_bytes


def test_the_entry_bound_evicts_the_least_recently_used_too():
    """Entries of a small model are small; their number is bounded as well, since a lookup compares
    the request with each."""
    store = PrefixStore(max_bytes=10**9, min_reuse=4, max_entries=3)
    rows = [torch.arange(100 * i, 100 * i + 32) for i in range(4)]
    for r in rows[:3]:
        store.put(r, _kv(32))
    assert store.lookup(rows[0]) is not None  # the first becomes the most recently used
    store.put(rows[3], _kv(32))  # a fourth: the least recently used (rows[1]) goes
    assert len(store) == 3 and store.evictions == 1
    assert store.lookup(rows[1]) is None and all(
        store.lookup(r) is not None for r in (rows[0], rows[2], rows[3])
    )
    with pytest.raises(ValueError, match="at least 1"):
        PrefixStore(max_bytes=10, max_entries=0)


def test_store_replaces_an_entry_for_the_same_tokens_and_copies_what_it_keeps():
    store = PrefixStore(max_bytes=10**6)
    kv = _kv(8)
    store.put(torch.arange(8), kv)
    kv[0][0].fill_(5.0)  # the caller's batch tensor changes afterwards: the entry must not
    store.put(torch.arange(8), _kv(8, fill=1.0))
    assert len(store) == 1
    r = store.lookup(torch.arange(8))
    assert r is not None and float(r.entry.kv[0][0].max()) == 1.0


def test_too_little_in_common_is_a_miss():
    store = PrefixStore(max_bytes=10**6, min_reuse=16, margin=0)
    store.put(torch.arange(64), _kv(64))
    assert store.lookup(torch.cat([torch.arange(10), torch.arange(500, 554)])) is None
    assert store.lookup(torch.cat([torch.arange(20), torch.arange(500, 544)])).tokens == 20


def test_a_changed_token_invalidates_everything_after_it():
    old = torch.arange(100)
    new = old.clone()
    new[50] = 999
    assert match(old, new, len(new)) == (50, 0, 0, 0)
    new2 = torch.cat([old[:50], ids(999), old[50:]])  # an inserted token: the rest moved, yet after it
    assert match(old, new2, len(new2))[0] + match(old, new2, len(new2))[2] == 50
    assert match(old, old, 30) == (30, 0, 0, 0)  # the caller's limit (the canvas) is never reused


def test_a_moved_run_is_found_after_dropped_tokens():
    """A window that drops the far end of the prefix moves every later token back by the drop."""
    old = torch.cat([ids(7), torch.arange(100, 160)])  # a lead tag, then the text
    new = torch.cat([ids(7), torch.arange(103, 160), ids(5, 6)])  # 3 tokens dropped, 2 typed
    assert match(old, new, len(new)) == (1, 3, 57, 0)


def test_the_text_after_the_cursor_is_reused_only_when_asked_and_never_before_tail_from():
    """Typed tokens move the text after them: with a tail, only the typed tokens are computed."""
    old = torch.cat([torch.arange(100, 140), torch.arange(500, 540)])  # prefix | suffix
    new = torch.cat([torch.arange(100, 140), ids(7, 8), torch.arange(500, 540)])  # 2 typed at 40
    assert match(old, new, len(new)) == (40, 0, 0, 0)  # the default: all after the change computed
    assert match(old, new, len(new), 0) == (40, 0, 0, 40)
    assert match(old, new, len(new), 60) == (40, 0, 0, 22)  # the canvas ends at 60: not before it
    assert match(old, new, len(new), 80) == (40, 0, 0, 0)  # fewer than PROBE tokens: not worth it
    deleted = torch.cat([torch.arange(100, 139), torch.arange(500, 540)])  # a backspace
    assert match(old, deleted, len(deleted), 0) == (39, 1, 40, 0)  # the moved run already covers it
    store = PrefixStore(10**8, min_reuse=4)
    store.put(old, _kv(80))
    assert store.lookup(new, None, 0).tail == 0  # a store without suffix=True ignores tail_from
    store = PrefixStore(10**8, min_reuse=4, suffix=True, margin=0)
    store.put(old, _kv(80))
    r = store.lookup(new, None, 0)
    assert r.tokens == 80 and r.fresh.tolist() == [40, 41]


def test_a_margin_is_recomputed_at_every_seam():
    """The tokens nearest a change saw the old text most closely, so ``margin`` of them are computed
    again on each side of it; a sequence's own start and end are no seams."""
    old = torch.cat([ids(7), torch.arange(100, 160), torch.arange(500, 540)])  # tag | prefix | suffix
    new = torch.cat([ids(7), torch.arange(103, 160), ids(5, 6), torch.arange(500, 540)])  # 3 dropped, 2 typed
    store = PrefixStore(10**8, min_reuse=4, suffix=True, margin=4)
    pos = torch.arange(101.0)[None, None, :, None].expand(1, 2, 101, 8).contiguous()  # value = old position
    store.put(old, [(pos, pos)])
    r = store.lookup(new, None, 0)
    assert (r.head, r.shift, r.run, r.tail) == (1, 3, 57, 40)
    assert r.spans == [(5, 8, 49), (64, 65, 36)]  # the tag (1 token) is all seam
    assert r.fresh.tolist() == [0, 1, 2, 3, 4, *range(54, 64)]
    assert r.reused.tolist() == [*range(5, 54), *range(64, 100)] and r.tokens == 85
    kv = r.assemble(r.kv(8, 1e4), [(torch.full((1, 2, 15, 8), -1.0),) * 2])
    got = kv[0][1][0, 0, :, 0]  # values: moved, never rotated
    assert got[r.fresh].eq(-1).all() and got[5].item() == 8 and got[64].item() == 65


def test_rotate_composes_positions():
    """R(p + d) k = R(d) R(p) k (rotary, RoFormer Eq. 34): rotating keys made at p by d gives the keys
    made at p + d."""
    torch.manual_seed(0)
    hd, theta = 16, 10000.0
    k = torch.randn(1, 2, 5, hd)  # [1, Hkv, L, D] before rotation

    def at(start: int) -> torch.Tensor:
        cos, sin = rope_tables(hd, torch.arange(start, start + 5)[None, :], theta)  # [1, L, D/2]
        x1, x2 = k[..., : hd // 2], k[..., hd // 2 :]
        c, s = cos[:, None], sin[:, None]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)

    assert torch.allclose(rotate(at(40), -13, hd, theta), at(27), atol=1e-5)
    assert torch.allclose(rotate(at(3), 1000, hd, theta), at(1003), atol=1e-4)


@pytest.fixture(scope="module")
def own(tiny_checkpoint):
    return load_checkpoint(tiny_checkpoint)


@pytest.fixture(scope="module", params=["dream", "llada"])
def open_ck(request, tmp_path_factory):
    make = make_dream if request.param == "dream" else make_llada
    d, _ = make(tmp_path_factory.mktemp(request.param) / "m")
    return load_checkpoint(d)


def test_rerotated_keys_equal_fresh_ones_own_model(own):
    """Layer 0's keys depend on a token and its position only, so after the layout drops 4 tokens the
    moved run's re-rotated keys must equal those a fresh pass computes; deeper layers saw other text."""
    model = own.model
    old = torch.cat([ids(1), torch.arange(10, 60)])[None]  # [1, 51]
    new = torch.cat([ids(1), torch.arange(14, 60)])[None]  # 4 dropped
    store = PrefixStore(10**8, min_reuse=4)
    cached = model.encode_context(old)
    store.put(old[0], list(zip(cached.keys, cached.values)))
    r = store.lookup(new[0])
    assert (r.head, r.shift, r.run, r.tail) == (1, 4, 46, 0)
    reused = r.kv(model.cfg.head_dim, model.cfg.rope_theta)
    fresh = model.encode_context(new)
    assert torch.allclose(reused[0][0], fresh.keys[0][:, :, r.reused], atol=1e-5)
    assert torch.allclose(reused[0][1], fresh.values[0][:, :, r.reused], atol=1e-5)


def test_rerotated_keys_equal_fresh_ones_open_families(open_ck):
    model = open_ck.model
    old = torch.arange(5, 45)[None]
    new = torch.arange(8, 45)[None]
    _, kv_old = model.encode(old)
    store = PrefixStore(10**8, min_reuse=4)
    store.put(old[0], [(k, v) for k, v in kv_old])
    r = store.lookup(new[0])
    assert (r.head, r.shift, r.run, r.tail) == (0, 3, 37, 0)
    reused = r.kv(model.cfg.head_dim, model.cfg.rope_theta)
    _, kv_new = model.encode(new)
    assert torch.allclose(reused[0][0], kv_new[0][0][:, :, r.reused], atol=1e-4)


def test_the_reused_tail_keys_equal_fresh_ones(own, open_ck):
    """Tokens typed mid-context move the text after them on; layer 0's re-rotated tail keys must
    equal those a fresh pass computes at the new positions."""
    old = torch.cat([ids(1), torch.arange(10, 40), torch.arange(60, 90)])[None]  # [1, 61]
    new = torch.cat([ids(1), torch.arange(10, 40), ids(5, 6, 7), torch.arange(60, 90)])[None]
    for model, enc in [(own.model, "own"), (open_ck.model, "open")]:
        if enc == "own":
            ko = model.encode_context(old)
            kv_old, fresh = list(zip(ko.keys, ko.values)), model.encode_context(new).keys[0]
        else:
            kv_old, fresh = model.encode(old)[1], model.encode(new)[1][0][0]
        store = PrefixStore(10**8, min_reuse=4, suffix=True, margin=8)
        store.put(old[0], kv_old)
        r = store.lookup(new[0], None, 0)
        assert (r.head, r.run, r.tail) == (31, 0, 30)
        assert r.fresh.tolist() == list(range(23, 42))  # 3 typed, and 8 on either side
        reused = r.kv(model.cfg.head_dim, model.cfg.rope_theta)
        assert torch.allclose(reused[0][0], fresh[:, :, r.reused], atol=1e-4)


@pytest.mark.parametrize("family", ["own", "open"])
def test_typing_mid_file_with_the_suffix_reused_computes_only_what_was_typed(family, own, open_ck):
    """A cursor with a long suffix after it: each keystroke computes the typed tokens (and the
    canvas), not the suffix, and a repeated request answers as without a store."""
    ck = own if family == "own" else open_ck
    suffix = "\n" + SRC[200:] + SRC
    reqs = typing(SRC[:200], "    value = compute(", suffix)
    head_only, both = Engine(ck, prefix_cache_mb=64), Engine(ck, prefix_cache_mb=64, prefix_cache_suffix=True)
    for r in reqs:
        assert isinstance(both.complete(r).text, str)
        head_only.complete(r)
    h, b = head_only.prefix.stats(), both.prefix.stats()
    assert b["hits"] == h["hits"] == len(reqs) - 1
    assert b["computed_tokens"] * 2 < h["computed_tokens"]  # the suffix is most of each context
    again = Engine(ck, prefix_cache_mb=0).complete(reqs[-1])
    assert both.complete(reqs[-1]).text == again.text


SRC = "".join(f"def f{i}(a, b):\n    return a + b * {i}\n\n" for i in range(12))


def typing(prefix: str, line: str, suffix: str, every: int = 3) -> list[FimRequest]:
    opts = SamplingOptions(stop=["\n"])
    return [
        FimRequest(prefix + line[:i], suffix, max_tokens=8, options=opts) for i in range(1, len(line), every)
    ]


@pytest.mark.parametrize("family", ["own", "open"])
def test_a_repeated_request_reuses_everything_and_answers_the_same(family, own, open_ck):
    ck = own if family == "own" else open_ck
    plain, reusing = Engine(ck, prefix_cache_mb=0), Engine(ck, prefix_cache_mb=64)
    assert plain.prefix is None and isinstance(reusing.cache, (ContextCache, DualCache))
    assert reusing.cache.store is reusing.prefix and not reusing.cache.exact
    req = FimRequest(SRC, "\nprint(f1(1, 2))\n", max_tokens=8, options=SamplingOptions(stop=["\n"]))
    first, again, alone = reusing.complete(req), reusing.complete(req), plain.complete(req)
    assert first.text == again.text == alone.text
    assert again.token_confidences == pytest.approx(alone.token_confidences, abs=1e-4)
    assert reusing.prefix.hits >= 1


@pytest.mark.parametrize("family", ["own", "open"])
def test_documents_typed_at_once_do_not_see_each_other(family, own, open_ck):
    """Two documents typed alternately through one store answer as each does through a store of its
    own, and every lookup takes its own document's entry."""
    ck = own if family == "own" else open_ck
    doc_a = typing(SRC[:200], "    value = compute(", "\n" + SRC[200:260])
    doc_b = typing("import os\nimport sys\n\n" * 6, "for name in os.list", "\n    print(name)\n")
    shared = Engine(ck, prefix_cache_mb=64)
    only_a, only_b = Engine(ck, prefix_cache_mb=64), Engine(ck, prefix_cache_mb=64)
    seen = []
    lookup = shared.prefix.lookup

    def spy(x, limit=None, tail_from=None):
        r = lookup(x, limit, tail_from)
        seen.append((x.tolist(), None if r is None else r.entry.ids.tolist()))
        return r

    shared.prefix.lookup = spy
    for ra, rb in zip(doc_a, doc_b):
        assert shared.complete(ra).text == only_a.complete(ra).text
        assert shared.complete(rb).text == only_b.complete(rb).text
    assert shared.prefix.hits > 0
    for x, entry in seen:  # a hit's entry starts as the request does (lead tag + first text tokens)
        if entry is not None:
            assert entry[:4] == x[:4]


def test_the_memory_bound_holds_through_an_engine(own):
    reqs = typing(SRC, "    return something_long_enough(", "")
    probe = Engine(own, prefix_cache_mb=64)
    probe.complete(reqs[-1])
    eng = Engine(own, prefix_cache_mb=2.5 * probe.prefix.nbytes / 2**20)  # room for two entries
    for r in reqs:
        eng.complete(r)
    s = eng.prefix.stats()
    assert 0 < s["bytes"] <= eng.prefix.max_bytes and s["evictions"] > 0


def test_negative_size_is_refused(own):
    with pytest.raises(ValueError, match="at least 0"):
        Engine(own, prefix_cache_mb=-1)
