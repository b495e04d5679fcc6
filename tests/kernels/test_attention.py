"""Attention kernel vs its explicit-math reference and vs SDPA: lengths 1/7/33/1000, several head
counts, head dims 16/64/128, per-row context lengths, a second (block) segment, dense masks, split-KV."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from editserver.kernels.attention import attention, attention_reference
from tests.kernels.conftest import assert_close


def _inputs(B, H, Hkv, Lq, La, Lb, D, dtype, device, lens=False, seed=0):
    g = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=g).to(dtype=dtype, device=device)

    q, k, v = r(B, H, Lq, D), r(B, Hkv, La, D), r(B, Hkv, La, D)
    k2 = v2 = None
    if Lb:
        k2, v2 = r(B, Hkv, Lb, D), r(B, Hkv, Lb, D)
    kv_lens = None
    if lens:
        kv_lens = torch.randint(1, La + 1, (B,), generator=g).to(device)
        kv_lens[0] = La  # one full row next to shorter ones
    return q, k, v, k2, v2, kv_lens


# (B, H, Hkv, Lq, La, Lb, D, per-row lengths, splits)
CASES = [
    (1, 4, 2, 1, 1, 0, 16, False, None),
    (2, 4, 2, 7, 7, 0, 16, False, None),
    (3, 6, 2, 33, 33, 7, 64, True, None),
    (2, 4, 4, 7, 33, 1, 64, True, 2),
    (1, 8, 1, 1, 1000, 33, 64, True, 4),
    (2, 4, 2, 33, 1000, 0, 128, True, 3),
]


@pytest.mark.parametrize("B,H,Hkv,Lq,La,Lb,D,lens,splits", CASES)
def test_matches_reference_fp32(device, B, H, Hkv, Lq, La, Lb, D, lens, splits):
    q, k, v, k2, v2, kv_lens = _inputs(B, H, Hkv, Lq, La, Lb, D, torch.float32, device, lens)
    out = attention(q, k, v, k2, v2, kv_lens, num_splits=splits)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert_close(out, attention_reference(q, k, v, k2, v2, kv_lens), torch.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("D", [64, 128])
def test_half_precision(device, dtype, D):
    q, k, v, k2, v2, kv_lens = _inputs(2, 6, 2, 7, 40, 7, D, dtype, device, lens=True)
    out = attention(q, k, v, k2, v2, kv_lens, num_splits=2)
    assert out.dtype == dtype
    assert_close(out, attention_reference(q, k, v, k2, v2, kv_lens), dtype)


def test_split_count_does_not_change_result(device):
    q, k, v, k2, v2, kv_lens = _inputs(2, 4, 2, 7, 300, 9, 64, torch.float32, device, lens=True)
    one = attention(q, k, v, k2, v2, kv_lens, num_splits=1)
    for s in (2, 5):
        assert_close(attention(q, k, v, k2, v2, kv_lens, num_splits=s), one, torch.float32)


def test_dense_mask_over_both_segments(device):
    q, k, v, k2, v2, _ = _inputs(2, 4, 2, 9, 20, 6, 16, torch.float32, device)
    mask = torch.rand(2, 1, 9, 26, generator=torch.Generator().manual_seed(1)) > 0.4
    mask[..., 0] = True  # every query sees at least one key
    mask = mask.to(device)
    out = attention(q, k, v, k2, v2, mask=mask)
    assert_close(out, attention_reference(q, k, v, k2, v2, mask=mask), torch.float32)


def test_matches_sdpa_with_padding_mask(device):
    """The model's PyTorch path: SDPA over [context ; block] with a key-padding mask."""
    q, k, v, k2, v2, kv_lens = _inputs(3, 6, 2, 7, 33, 7, 64, torch.float32, device, lens=True)
    keep = torch.arange(33, device=device)[None, :] < kv_lens[:, None]
    keep = torch.cat([keep, keep.new_ones(3, 7)], dim=1)[:, None, None, :]
    sdpa = F.scaled_dot_product_attention(
        q, torch.cat([k, k2], 2), torch.cat([v, v2], 2), attn_mask=keep, enable_gqa=True
    )
    assert_close(attention(q, k, v, k2, v2, kv_lens), sdpa, torch.float32)


def test_strided_query_and_padding_never_read(device):
    """q as the model makes it (a transposed view); NaN in padded keys must not leak into the output."""
    B, L, H, Hkv, D, La = 2, 7, 4, 2, 16, 12
    q = torch.randn(B, L, H, D, device=device).transpose(1, 2)  # [B, H, L, D], non-contiguous
    k = torch.randn(B, Hkv, La, D, device=device)
    v = torch.randn(B, Hkv, La, D, device=device)
    kv_lens = torch.tensor([12, 5], device=device)
    k[1, :, 5:], v[1, :, 5:] = float("nan"), float("nan")
    out = attention(q, k, v, kv_lens=kv_lens)
    assert torch.isfinite(out).all()
    assert_close(out, attention_reference(q, k.nan_to_num(), v.nan_to_num(), kv_lens=kv_lens), torch.float32)


def test_bad_shapes_are_rejected(device):
    q = torch.randn(1, 3, 4, 16, device=device)
    k = torch.randn(1, 2, 4, 16, device=device)
    with pytest.raises(ValueError, match="multiple"):
        attention(q, k, k)
    with pytest.raises(ValueError, match="together"):
        attention(q[:, :2], k, k, k2=k)


@pytest.mark.gpu
def test_long_context_bf16_gpu(device):
    if device != "cuda":
        pytest.skip("long shapes run compiled only")
    q, k, v, k2, v2, kv_lens = _inputs(4, 8, 2, 32, 8192, 32, 64, torch.bfloat16, device, lens=True)
    assert_close(
        attention(q, k, v, k2, v2, kv_lens), attention_reference(q, k, v, k2, v2, kv_lens), torch.bfloat16
    )
