"""Rotary position embedding applied in place to queries and keys, in one launch.

Design decisions:
- NeoX / LLaMA-HF half-split layout: pairs are (x_i, x_{i + D/2}); cos/sin are per token
  [B, L, D/2] (so rows of a batch may sit at different positions).
- In place: the projections' outputs are fresh tensors nobody else reads, so rotating them where
  they lie saves an allocation and a copy per tensor. Queries and keys share one launch (the second
  grid column takes the keys); each program rotates all heads of up to 16 tokens (a tile of about
  2K elements), loading each token's cos/sin row once for all its heads.
- Math in float32, rounded once to the tensor's dtype, as the PyTorch form does.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from editserver.kernels._common import check_tensors, next_pow2
from editserver.kernels.reference import rotary_reference

__all__ = ["rotary", "rotary_reference"]


@triton.jit
def _rotate_heads(X, b, pos, t_ok, sxb, sxl, sxh, sxd, NH, c, s, j, HALF, BLOCK_H: tl.constexpr):
    """Rotate all NH heads of BLOCK_T tokens: tiles [BLOCK_T, BLOCK_H, BLOCK_HALF]."""
    h = tl.arange(0, BLOCK_H)
    ok = t_ok[:, None, None] & (h < NH)[None, :, None] & (j < HALF)[None, None, :]
    p1 = X + (b * sxb + pos * sxl)[:, None, None] + h[None, :, None] * sxh + j[None, None, :] * sxd
    p2 = p1 + HALF * sxd
    x1 = tl.load(p1, mask=ok, other=0.0).to(tl.float32)
    x2 = tl.load(p2, mask=ok, other=0.0).to(tl.float32)
    cc, ss = c[:, None, :], s[:, None, :]
    tl.store(p1, (x1 * cc - x2 * ss).to(X.dtype.element_ty), mask=ok)
    tl.store(p2, (x2 * cc + x1 * ss).to(X.dtype.element_ty), mask=ok)


@triton.jit
def _rotary_kernel(
    Q,
    K,
    COS,
    SIN,
    L,
    T,
    sqb,
    sql,
    sqh,
    sqd,
    skb,
    skl,
    skh,
    skd,
    scb,
    scl,
    scd,
    ssb,
    ssl,
    ssd,
    HQ,
    HK,
    HALF,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    tok = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)  # [BLOCK_T] flat (b, pos)
    t_ok = tok < T
    b = tok // L
    pos = tok % L
    j = tl.arange(0, BLOCK_HALF)
    cs_ok = t_ok[:, None] & (j < HALF)[None, :]
    c = tl.load(COS + (b * scb + pos * scl)[:, None] + j[None, :] * scd, mask=cs_ok, other=0.0).to(tl.float32)
    s = tl.load(SIN + (b * ssb + pos * ssl)[:, None] + j[None, :] * ssd, mask=cs_ok, other=0.0).to(tl.float32)
    if tl.program_id(1) == 0:
        _rotate_heads(Q, b, pos, t_ok, sqb, sql, sqh, sqd, HQ, c, s, j, HALF, BLOCK_H)
    else:
        _rotate_heads(K, b, pos, t_ok, skb, skl, skh, skd, HK, c, s, j, HALF, BLOCK_H)


def rotary(
    q: torch.Tensor, k: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rotate q [B, L, H, D] and k [B, L, Hk, D] in place; cos/sin [B, L, D/2]. Returns (q, k)."""
    check_tensors(q, k, cos, sin)
    B, L, HQ, D = q.shape
    if D % 2:
        raise ValueError(f"head dim must be even, got {D}")
    if cos.shape != (B, L, D // 2) or sin.shape != cos.shape:
        raise ValueError(f"cos/sin must be [{B}, {L}, {D // 2}], got {tuple(cos.shape)}/{tuple(sin.shape)}")
    if k is not None and (k.shape[:2] != q.shape[:2] or k.shape[3] != D):
        raise ValueError(f"k {tuple(k.shape)} does not match q {tuple(q.shape)}")
    HK = k.shape[2] if k is not None else 0
    kk = k if k is not None else q
    T = B * L
    if T:
        BLOCK_H, BLOCK_HALF = next_pow2(max(HQ, HK)), next_pow2(D // 2)
        BLOCK_T = max(1, min(16, 2048 // (BLOCK_H * BLOCK_HALF), next_pow2(T)))  # ~2K elements per tile
        strides = (*q.stride(), *kk.stride(), *cos.stride(), *sin.stride())
        _rotary_kernel[(triton.cdiv(T, BLOCK_T), 2 if k is not None else 1)](
            q,
            kk,
            cos,
            sin,
            L,
            T,
            *strides,
            HQ,
            HK,
            D // 2,
            BLOCK_T=BLOCK_T,
            BLOCK_H=BLOCK_H,
            BLOCK_HALF=BLOCK_HALF,
            num_warps=4,
        )
    return q, k
