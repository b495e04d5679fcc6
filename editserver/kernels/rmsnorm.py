"""RMSNorm, optionally fused with the residual add that precedes it in a pre-norm block.

Design decisions:
- One program per row (the model's rows are a few hundred wide: the whole row fits one tile), so
  the mean of squares is a single in-register reduction and each element is read and written once.
- Fused form: ``s = x + residual`` is written out (the block's new residual stream) and normalised in
  the same pass, saving one full read and write of the activations per fusion.
- Numerics follow the PyTorch form exactly in order: the sum is rounded to the activation dtype
  (as ``x + h`` is in PyTorch) before it is normalised; the norm is computed in float32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from editserver.kernels._common import check_tensors, next_pow2
from editserver.kernels.reference import rmsnorm_reference

__all__ = ["rmsnorm", "rmsnorm_reference"]


@triton.jit
def _rmsnorm_kernel(
    X,
    R,
    W,
    Y,
    S,
    N,
    sx,
    sr,
    sy,
    ss,
    eps,
    HAS_RES: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    ok = cols < N
    x = tl.load(X + row * sx + cols, mask=ok, other=0.0).to(tl.float32)  # [BLOCK]
    if HAS_RES:
        summed = (x + tl.load(R + row * sr + cols, mask=ok, other=0.0).to(tl.float32)).to(S.dtype.element_ty)
        tl.store(S + row * ss + cols, summed, mask=ok)
        x = summed.to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(x * x, 0) / N + eps)
    w = tl.load(W + cols, mask=ok, other=0.0).to(tl.float32)
    tl.store(Y + row * sy + cols, (x * inv * w).to(Y.dtype.element_ty), mask=ok)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """[..., N] -> [R, N] with unit stride along N (a view when possible)."""
    t2 = t.reshape(-1, t.shape[-1])
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


def rmsnorm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """y = x / sqrt(mean(x^2) + eps) * weight over the last dim; x [..., N], weight [N].

    With ``residual`` (same shape as x): s = x + residual, returns (rmsnorm(s), s).
    """
    check_tensors(x, weight, residual)
    N = x.shape[-1]
    if weight.shape != (N,):
        raise ValueError(f"weight must be [{N}], got {tuple(weight.shape)}")
    x2 = _rows(x)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    y2 = y.view(-1, N)
    if residual is not None:
        if residual.shape != x.shape:
            raise ValueError(f"residual {tuple(residual.shape)} must match x {tuple(x.shape)}")
        r2 = _rows(residual)
        s = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        s2 = s.view(-1, N)
    else:
        r2 = s2 = x2
    BLOCK = next_pow2(N)
    if x2.shape[0]:
        _rmsnorm_kernel[(x2.shape[0],)](
            x2,
            r2,
            weight,
            y2,
            s2,
            N,
            x2.stride(0),
            r2.stride(0),
            y2.stride(0),
            s2.stride(0),
            eps,
            HAS_RES=residual is not None,
            BLOCK=BLOCK,
            num_warps=min(8, max(1, BLOCK // 256)),
        )
    return (y, s) if residual is not None else y
