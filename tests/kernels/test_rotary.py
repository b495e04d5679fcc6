"""In-place rotary kernel vs the out-of-place PyTorch reference (NeoX half-split layout)."""

from __future__ import annotations

import pytest
import torch

from editserver.kernels.rotary import rotary, rotary_reference
from tests.kernels.conftest import assert_close


def _tables(B, L, D, device, offset=None):
    pos = torch.arange(L)[None, :].expand(B, L)
    if offset is not None:
        pos = pos + offset[:, None]  # rows at different positions, as canvases after unequal contexts
    inv = 1.0 / (1e6 ** (torch.arange(0, D, 2).float() / D))
    ang = pos.float()[..., None] * inv  # [B, L, D/2]
    return ang.cos().to(device), ang.sin().to(device)


@pytest.mark.parametrize("L", [1, 7, 33, 1000])
@pytest.mark.parametrize("H,Hkv,D", [(4, 2, 16), (6, 2, 64), (8, 8, 128)])
def test_in_place_matches_reference(device, L, H, Hkv, D):
    if L == 1000 and device == "cpu" and D != 16:
        pytest.skip("interpreter: long sequences only at the smallest head dim")
    B = 2
    q = torch.randn(B, L, H, D, device=device)
    k = torch.randn(B, L, Hkv, D, device=device)
    cos, sin = _tables(B, L, D, device, offset=torch.tensor([0, 17]))
    q_ref, k_ref = rotary_reference(q, k, cos, sin)
    q_out, k_out = rotary(q, k, cos, sin)
    assert q_out.data_ptr() == q.data_ptr() and k_out.data_ptr() == k.data_ptr()  # in place
    assert_close(q, q_ref, torch.float32)
    assert_close(k, k_ref, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_projection_views(device, dtype):
    """q/k as the model makes them: views of one linear output [B, L, H*D] split into heads."""
    B, L, H, Hkv, D = 2, 7, 6, 2, 64
    proj = torch.randn(B, L, (H + Hkv) * D).to(dtype=dtype, device=device)
    q = proj[..., : H * D].view(B, L, H, D)  # strided: row stride (H + Hkv) * D
    k = proj[..., H * D :].view(B, L, Hkv, D)
    cos, sin = _tables(B, L, D, device)
    q_ref, k_ref = rotary_reference(q, k, cos, sin)
    rotary(q, k, cos, sin)
    assert_close(q, q_ref, dtype)
    assert_close(k, k_ref, dtype)


def test_queries_only(device):
    q = torch.randn(1, 5, 4, 32, device=device)
    cos, sin = _tables(1, 5, 32, device)
    q_ref, _ = rotary_reference(q, None, cos, sin)
    _, k = rotary(q, None, cos, sin)
    assert k is None
    assert_close(q, q_ref, torch.float32)


def test_bad_tables_are_rejected(device):
    q = torch.randn(1, 5, 4, 32, device=device)
    cos, sin = _tables(1, 4, 32, device)
    with pytest.raises(ValueError, match="cos/sin"):
        rotary(q, None, cos, sin)
