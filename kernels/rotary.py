"""Rotary position embedding applied in place to queries and keys, in one launch.

Design decisions:
- NeoX / LLaMA-HF half-split layout: pairs are (x_i, x_{i + D/2}); cos/sin are per token
  [B, L, D/2] (so rows of a batch may sit at different positions).
- In place: the projections' outputs are fresh tensors nobody else reads, so rotating them where
  they lie saves an allocation and a copy per tensor. Queries and keys share one launch (the second
  grid column takes the keys) and each program loads its token's cos/sin row once for all heads.
- Math in float32, rounded once to the tensor's dtype, as the PyTorch form does.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._common import check_tensors, next_pow2


@triton.jit
def _rotate_token(X, b, pos, sxb, sxl, sxh, sxd, NH, c, s, j, HALF, BLOCK_H: tl.constexpr):
    h = tl.arange(0, BLOCK_H)
    ok = (h < NH)[:, None] & (j < HALF)[None, :]
    p1 = X + b * sxb + pos * sxl + h[:, None] * sxh + j[None, :] * sxd  # [BLOCK_H, BLOCK_HALF]
    p2 = p1 + HALF * sxd
    x1 = tl.load(p1, mask=ok, other=0.0).to(tl.float32)
    x2 = tl.load(p2, mask=ok, other=0.0).to(tl.float32)
    tl.store(p1, (x1 * c[None, :] - x2 * s[None, :]).to(X.dtype.element_ty), mask=ok)
    tl.store(p2, (x2 * c[None, :] + x1 * s[None, :]).to(X.dtype.element_ty), mask=ok)


@triton.jit
def _rotary_kernel(
    Q,
    K,
    COS,
    SIN,
    L,
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
    BLOCK_H: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    tok = tl.program_id(0)  # flat (b, pos)
    b = tok // L
    pos = tok % L
    j = tl.arange(0, BLOCK_HALF)
    c = tl.load(COS + b * scb + pos * scl + j * scd, mask=j < HALF, other=0.0).to(tl.float32)  # [BLOCK_HALF]
    s = tl.load(SIN + b * ssb + pos * ssl + j * ssd, mask=j < HALF, other=0.0).to(tl.float32)
    if tl.program_id(1) == 0:
        _rotate_token(Q, b, pos, sqb, sql, sqh, sqd, HQ, c, s, j, HALF, BLOCK_H)
    else:
        _rotate_token(K, b, pos, skb, skl, skh, skd, HK, c, s, j, HALF, BLOCK_H)


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
    if B * L:
        _rotary_kernel[(B * L, 2 if k is not None else 1)](
            q,
            kk,
            cos,
            sin,
            L,
            *q.stride(),
            *kk.stride(),
            *cos.stride(),
            *sin.stride(),
            HQ,
            HK,
            D // 2,
            BLOCK_H=next_pow2(max(HQ, HK)),
            BLOCK_HALF=next_pow2(D // 2),
            num_warps=1,
        )
    return q, k


def rotary_reference(
    q: torch.Tensor, k: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Out-of-place PyTorch form: returns rotated copies of q and k."""

    def rot(x: torch.Tensor) -> torch.Tensor:
        d2 = x.shape[-1] // 2
        x1, x2 = x[..., :d2].float(), x[..., d2:].float()
        c, s = cos[:, :, None, :], sin[:, :, None, :]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)

    return rot(q), (rot(k) if k is not None else None)
