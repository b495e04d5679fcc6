"""SwiGLU: silu(gate) * up in one elementwise pass.

Design decisions:
- The activation and the multiply read gate and up once and write once; PyTorch's form writes
  silu(gate) to memory and reads it back.
- Flat 1-D tiling over contiguous operands (the projections' outputs are contiguous); computed in
  float32 and rounded once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from editserver.kernels._common import check_tensors
from editserver.kernels.reference import swiglu_reference

__all__ = ["swiglu", "swiglu_reference"]


@triton.jit
def _swiglu_kernel(G, U, OUT, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    g = tl.load(G + offs, mask=ok, other=0.0).to(tl.float32)
    u = tl.load(U + offs, mask=ok, other=0.0).to(tl.float32)
    tl.store(OUT + offs, (g * tl.sigmoid(g) * u).to(OUT.dtype.element_ty), mask=ok)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up; gate, up of one shape and dtype."""
    check_tensors(gate, up)
    if gate.shape != up.shape or gate.dtype != up.dtype:
        raise ValueError(f"gate {tuple(gate.shape)}/{gate.dtype} and up {tuple(up.shape)}/{up.dtype} differ")
    g, u = gate.contiguous(), up.contiguous()
    out = torch.empty_like(g)
    n = g.numel()
    BLOCK = 1024
    if n:
        _swiglu_kernel[(triton.cdiv(n, BLOCK),)](g, u, out, n, BLOCK=BLOCK, num_warps=4)
    return out
