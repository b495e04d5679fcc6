"""Transformer: exact context cache, padding invariance, window errors, 32K forward without L x L."""

from __future__ import annotations

import pytest
import torch

from editserver.model.infer.config import PRESETS, ModelConfig
from editserver.model.infer.transformer import ContextTooLongError, Transformer


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelConfig.from_dict({**PRESETS["tiny"].to_dict(), "vocab_size": 300})).eval()


def test_context_cache_is_exact(model: Transformer) -> None:
    ids = torch.randint(0, 300, (2, 50))
    Lc = 37
    cache = model.encode_context(ids[:, :Lc])
    cached = model.forward_canvas(ids[:, Lc:], cache)  # [B, 13, V]
    full = model(ids, context_lens=torch.tensor([Lc, Lc]))[:, Lc:]
    torch.testing.assert_close(cached, full, atol=1e-5, rtol=1e-4)


def test_canvas_positioned_at_a_region_is_exact_through_the_cache(model: Transformer) -> None:
    ids = torch.randint(0, 300, (2, 50))
    Lc, pos = (
        37,
        torch.tensor([5, 12]),
    )  # each row's canvas shares rotary positions with its tokens 5.. / 12..
    cache = model.encode_context(ids[:, :Lc], canvas_pos=pos)
    cached = model.forward_canvas(ids[:, Lc:], cache)  # [B, 13, V]
    full = model(ids, context_lens=torch.tensor([Lc, Lc]), canvas_pos=pos)[:, Lc:]
    torch.testing.assert_close(cached, full, atol=1e-5, rtol=1e-4)
    after = model(ids, context_lens=torch.tensor([Lc, Lc]))[:, Lc:]
    assert not torch.allclose(full, after, atol=1e-3), "the canvas position changes what the model sees"
    same = model(ids, context_lens=torch.tensor([Lc, Lc]), canvas_pos=torch.tensor([Lc, Lc]))[:, Lc:]
    torch.testing.assert_close(same, after)


def test_context_does_not_see_canvas(model: Transformer) -> None:
    ids = torch.randint(0, 300, (1, 30))
    other = ids.clone()
    other[0, 20:] = torch.randint(0, 300, (10,))
    ctx = torch.tensor([20])
    a = model.encode_context(ids[:, :20]).keys[-1]
    b = model.encode_context(other[:, :20]).keys[-1]
    torch.testing.assert_close(a, b)
    # but canvas logits depend on the context
    la = model(ids, context_lens=ctx)[:, 25]
    lb = model(torch.cat([torch.randint(0, 300, (1, 20)), ids[:, 20:]], 1), context_lens=ctx)[:, 25]
    assert not torch.allclose(la, lb)


def test_padded_batch_matches_single_rows(model: Transformer) -> None:
    a, b = torch.randint(0, 300, (1, 12)), torch.randint(0, 300, (1, 7))
    canvas = torch.randint(0, 300, (2, 5))
    ctx = torch.zeros((2, 12), dtype=torch.long)
    ctx[0], ctx[1, :7] = a[0], b[0]
    batch = model.forward_canvas(canvas, model.encode_context(ctx, torch.tensor([12, 7])))
    one = model.forward_canvas(canvas[1:], model.encode_context(b))
    torch.testing.assert_close(batch[1:], one, atol=1e-5, rtol=1e-4)


def test_seq_lens_hide_padding_keys(model: Transformer) -> None:
    ids = torch.randint(0, 300, (1, 20))
    padded = torch.cat([ids, torch.zeros((1, 6), dtype=torch.long)], 1)
    a = model(ids, context_lens=torch.tensor([8]))
    b = model(padded, context_lens=torch.tensor([8]), seq_lens=torch.tensor([20]))[:, :20]
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_too_long_is_an_error_not_truncation() -> None:
    m = Transformer(
        ModelConfig.from_dict({**PRESETS["tiny"].to_dict(), "vocab_size": 300, "max_seq_len": 64})
    )
    with pytest.raises(ContextTooLongError, match="exceeds"):
        m.encode_context(torch.zeros((1, 65), dtype=torch.long))
    cache = m.encode_context(torch.zeros((1, 60), dtype=torch.long))
    with pytest.raises(ContextTooLongError):
        m.forward_canvas(torch.zeros((1, 5), dtype=torch.long), cache)


def test_32k_context_forward_fits(model: Transformer) -> None:
    """A 32,768-token context runs (fused attention: memory grows with L, not L^2)."""
    ids = torch.randint(0, 300, (1, 32768 - 8))
    cache = model.encode_context(ids)
    logits = model.forward_canvas(torch.randint(0, 300, (1, 8)), cache)
    assert logits.shape == (1, 8, 300) and torch.isfinite(logits).all()


def _drafted(gain: float) -> Transformer:
    torch.manual_seed(0)
    cfg = {**PRESETS["tiny"].to_dict(), "vocab_size": 300, "canvas_draft": True}
    m = Transformer(ModelConfig.from_dict(cfg)).eval()
    with torch.no_grad():
        m.draft_gain.fill_(gain)
    return m


def test_draft_is_exact_through_the_cache_and_only_touches_the_canvas() -> None:
    m = _drafted(1.0)
    ids = torch.randint(0, 300, (2, 50))
    Lc, N = 37, 13
    draft = torch.randint(0, 300, (2, N))
    draft[1] = -1  # a row without a draft (FIM)
    full_draft = torch.cat([torch.full((2, Lc), -1), draft], dim=1)  # [B, L]
    ctx = torch.tensor([Lc, Lc])
    cached = m.forward_canvas(ids[:, Lc:], m.encode_context(ids[:, :Lc]), draft=draft)
    full = m(ids, context_lens=ctx, draft=full_draft)[:, Lc:]
    torch.testing.assert_close(cached, full, atol=1e-5, rtol=1e-4)
    plain = m(ids, context_lens=ctx)[:, Lc:]
    assert not torch.allclose(full[0], plain[0], atol=1e-3), "a draft changes what its canvas sees"
    torch.testing.assert_close(full[1], plain[1]), "no draft (-1): nothing added"


def test_draft_gain_starts_at_one_leaning_the_canvas_toward_its_draft() -> None:
    torch.manual_seed(0)
    m = Transformer(
        ModelConfig.from_dict({**PRESETS["tiny"].to_dict(), "vocab_size": 300, "canvas_draft": True})
    )
    assert torch.equal(m.draft_gain.detach(), torch.ones(m.cfg.dim))
    ids = torch.randint(0, 300, (1, 30))
    draft = torch.cat([torch.full((1, 20), -1), torch.randint(0, 300, (1, 10))], dim=1)
    ctx = torch.tensor([20])
    with_draft = m(ids, context_lens=ctx, draft=draft)
    torch.testing.assert_close(with_draft[:, :20], m(ids, context_lens=ctx)[:, :20]), "context untouched"
    assert not torch.allclose(with_draft[:, 20:], m(ids, context_lens=ctx)[:, 20:])


@pytest.mark.parametrize("draft_bias", [0.0, 1.5])
def test_copy_gate_adds_its_bonus_to_the_draft_token_only(draft_bias: float) -> None:
    m = _drafted(0.0)  # no draft embedding: only the copy logit differs
    m.draft_bias = draft_bias  # the inference-time prior rides on the learned bonus (+4 at first)
    ids = torch.randint(0, 300, (1, 30))
    draft = torch.cat([torch.full((1, 20), -1), torch.randint(0, 300, (1, 10))], dim=1)  # [1, 30]
    ctx = torch.tensor([20])
    diff = m(ids, context_lens=ctx, draft=draft) - m(ids, context_lens=ctx)  # [1, 30, V]
    want = torch.zeros_like(diff)
    want[0, torch.arange(20, 30), draft[0, 20:]] = 4.0 + draft_bias
    torch.testing.assert_close(diff, want, atol=1e-4, rtol=0)
    picked = m(ids, context_lens=ctx, draft=draft, logits_index=(torch.tensor([0, 0]), torch.tensor([3, 25])))
    torch.testing.assert_close(
        picked - m(ids, context_lens=ctx)[0, [3, 25]], want[0, [3, 25]], atol=1e-4, rtol=0
    )


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_ships_under_the_checkpoint_cap(name: str) -> None:
    """A shipped checkpoint is at most 48 MB with bf16 weights (2 bytes each), draft input included."""
    cfg = ModelConfig.from_dict({**PRESETS[name].to_dict(), "canvas_draft": True})
    assert Transformer(cfg).num_parameters() * 2 <= 48e6
