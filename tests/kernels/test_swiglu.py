"""SwiGLU kernel vs its PyTorch reference."""

from __future__ import annotations

import pytest
import torch

from editserver.kernels.swiglu import swiglu, swiglu_reference
from tests.kernels.conftest import assert_close


@pytest.mark.parametrize("shape", [(1, 1), (7, 128), (2, 33, 100), (1000, 96)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_matches_reference(device, shape, dtype):
    g = (torch.randn(shape) * 4).to(dtype=dtype, device=device)  # wide range: both silu tails
    u = torch.randn(shape).to(dtype=dtype, device=device)
    out = swiglu(g, u)
    assert out.shape == g.shape and out.dtype == dtype
    assert_close(out, swiglu_reference(g, u), dtype)


def test_non_contiguous_inputs(device):
    base = torch.randn(6, 64, device=device)
    g, u = base[:, :32], base[:, 32:]  # halves of one tensor, as a fused gate/up projection gives
    assert_close(swiglu(g, u), swiglu_reference(g, u), torch.float32)


def test_mismatched_inputs_are_rejected(device):
    with pytest.raises(ValueError):
        swiglu(torch.randn(2, 4, device=device), torch.randn(2, 5, device=device))
