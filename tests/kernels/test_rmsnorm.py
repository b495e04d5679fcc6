"""RMSNorm kernel (plain and fused with the residual add) vs its PyTorch reference."""

from __future__ import annotations

import pytest
import torch

from editserver.kernels.rmsnorm import rmsnorm, rmsnorm_reference
from tests.kernels.conftest import assert_close

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("rows,dim", [(1, 64), (7, 384), (33, 100), (1000, 64)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_plain(device, rows, dim, dtype):
    x = torch.randn(rows, dim).to(dtype=dtype, device=device) * 3
    w = torch.randn(dim).to(dtype=dtype, device=device)
    assert_close(rmsnorm(x, w, 1e-6), rmsnorm_reference(x, w, 1e-6), dtype)


@pytest.mark.parametrize("shape", [(1, 1, 64), (2, 7, 384), (3, 33, 96)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_residual(device, shape, dtype):
    x = torch.randn(shape).to(dtype=dtype, device=device)
    h = torch.randn(shape).to(dtype=dtype, device=device)
    w = torch.rand(shape[-1]).to(dtype=dtype, device=device) + 0.5
    y, s = rmsnorm(x, w, 1e-5, residual=h)
    y_ref, s_ref = rmsnorm_reference(x, w, 1e-5, residual=h)
    assert s.shape == y.shape == x.shape
    assert_close(s, s_ref, dtype)
    assert_close(y, y_ref, dtype)


def test_strided_rows(device):
    """A row-sliced view (unit stride inside a row, gaps between rows) is read where it lies."""
    base = torch.randn(10, 128, device=device)
    x = base[::2, :64]  # [5, 64], row stride 256
    w = torch.randn(64, device=device)
    assert_close(rmsnorm(x, w, 1e-6), rmsnorm_reference(x, w, 1e-6), torch.float32)


def test_bad_weight_is_rejected(device):
    with pytest.raises(ValueError, match="weight"):
        rmsnorm(torch.randn(2, 8, device=device), torch.ones(4, device=device), 1e-6)
