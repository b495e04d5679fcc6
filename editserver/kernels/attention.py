"""Attention for denoising steps: a block of queries against cached context keys plus the block's own.

Design decisions:
- Two key/value segments, read where they lie: the cached context (``k, v`` [B, Hkv, La, D], of which
  only the first ``kv_lens[b]`` keys of row b are real; padding is never read) and the active block
  (``k2, v2`` [B, Hkv, Lb, D], all real). A denoising step therefore never concatenates the context
  cache, which ``torch.cat`` would copy for every layer at every step.
- Variable lengths across the batch: ``kv_lens`` lets rows with different context lengths share one
  launch, and each row's loop stops at its own length instead of masking padding tile by tile.
- Bidirectional (no causal mask). An optional dense boolean mask, broadcastable to
  [B, H, Lq, La + Lb], serves generic callers (the model's full forward); denoising needs none.
- Grouped-query packing: one program serves all G = H / Hkv query heads of a key/value head, its
  query tile stacking (head, position) rows, so each K/V tile is loaded once per group, not per head.
- Split-KV (Flash-Decoding): a step has few queries (one block) against a long context, so
  B * Hkv * ceil(G * Lq / BLOCK_M) programs can leave most of the GPU idle. The context's tiles are
  shared out among ``num_splits`` programs; each writes its normalised partial output and its
  log-sum-exp, and ``_attention_combine_kernel`` merges them. With one split the output is written
  directly and there is no second launch. The last split also takes the block segment.
- Online softmax FlashAttention-2 style, in base 2 (log2(e) folded into the scale so the inner loop
  uses exp2); the accumulator is rescaled only by the running max and normalised once at the end.
  Rows with no key to attend to give 0 (SDPA gives NaN there; the model never produces such rows).
- Strides everywhere: q may be a transposed view of a projection; the output is allocated
  [B, Lq, H, D] and returned as a [B, H, Lq, D] view, so transposing it back to tokens is free.
- fp32 inputs use ``tf32x3`` dot products (three TF32 MMAs: about fp32 accuracy on tensor cores; IEEE
  FMA dots spilled kilobytes of registers at these tile sizes) so fp32 models match their reference;
  fp16/bf16 inputs accumulate in fp32. Triton's CPU interpreter computes ``tl.dot`` on bf16 operands
  wrongly (numpy has no bf16), so under the interpreter bf16 tiles are widened to fp32 first.
- Forward only.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from editserver.kernels._common import INTERPRET, check_tensors, next_pow2, sm_count
from editserver.kernels.reference import attention_reference

__all__ = ["attention", "attention_reference"]


@triton.jit
def _attend_tile(
    acc,
    m_i,
    l_i,
    q,
    k_ptrs,
    v_ptrs,
    key_ok,
    d_ok,
    allowed,
    qk_scale,
    F32_DOT: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """One K/V tile of the online softmax. allowed [BLOCK_M, BLOCK_N] says which scores count."""
    k = tl.load(k_ptrs, mask=key_ok[:, None] & d_ok[None, :], other=0.0)  # [BLOCK_N, BLOCK_D]
    if UPCAST:
        k = k.to(tl.float32)
    if F32_DOT:  # fp32 operands: three TF32 products, about fp32 accuracy
        s = tl.dot(q, tl.trans(k), input_precision="tf32x3")
    else:
        s = tl.dot(q, tl.trans(k))
    s = s * qk_scale  # [BLOCK_M, BLOCK_N], log2 units
    s = tl.where(allowed, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    # a row that has seen no key yet keeps max -inf; subtracting 0 instead avoids -inf - -inf = NaN
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.math.exp2(s - m_safe[:, None])
    alpha = tl.math.exp2(m_i - m_safe)
    v = tl.load(v_ptrs, mask=key_ok[:, None] & d_ok[None, :], other=0.0)  # [BLOCK_N, BLOCK_D]
    if UPCAST:
        v = v.to(tl.float32)
    if F32_DOT:
        pv = tl.dot(p.to(v.dtype), v, input_precision="tf32x3")
    else:
        pv = tl.dot(p.to(v.dtype), v)
    acc = acc * alpha[:, None] + pv
    l_i = l_i * alpha + tl.sum(p, 1)
    return acc, m_new, l_i


@triton.jit
def _attention_kernel(
    Q,
    K,
    V,
    K2,
    V2,
    KV_LENS,
    MASK,
    OUT,
    O_PART,
    LSE_PART,
    sqb,
    sqh,
    sqm,
    sqd,
    skb,
    skh,
    skn,
    skd,
    svb,
    svh,
    svn,
    svd,
    s2kb,
    s2kh,
    s2kn,
    s2kd,
    s2vb,
    s2vh,
    s2vn,
    s2vd,
    smb,
    smh,
    smm,
    smn,
    sob,
    soh,
    som,
    sod,
    HKV,
    LQ,
    LA,
    LB,
    qk_scale,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_LENS: tl.constexpr,
    HAS_K2: tl.constexpr,
    HAS_MASK: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    F32_DOT: tl.constexpr,
    UPCAST: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    split = tl.program_id(2)
    b = pid_bh // HKV
    kvh = pid_bh % HKV
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # packed (head in group, query position)
    row_ok = rows < GROUP * LQ
    h = kvh * GROUP + rows // LQ  # [BLOCK_M] query head of each row
    qi = rows % LQ  # [BLOCK_M] query position of each row
    d = tl.arange(0, BLOCK_D)
    d_ok = d < HEAD_DIM
    q_ptrs = Q + b * sqb + h[:, None] * sqh + qi[:, None] * sqm + d[None, :] * sqd
    q = tl.load(q_ptrs, mask=row_ok[:, None] & d_ok[None, :], other=0.0)  # [BLOCK_M, BLOCK_D]
    if UPCAST:
        q = q.to(tl.float32)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    n_base = tl.arange(0, BLOCK_N)
    mask_rows = MASK + b * smb + h[:, None] * smh + qi[:, None] * smm  # only read when HAS_MASK

    # ---- segment A (the context): this split's share of the row's real tiles ----
    len_a = LA
    if HAS_LENS:
        len_a = tl.minimum(tl.load(KV_LENS + b).to(tl.int32), LA)
    tiles_a = tl.cdiv(len_a, BLOCK_N)
    per_split = tl.cdiv(tiles_a, NUM_SPLITS)
    t_lo = split * per_split
    t_hi = tl.minimum(t_lo + per_split, tiles_a)
    for t in range(t_lo, t_hi):
        n = t * BLOCK_N + n_base
        key_ok = n < len_a
        allowed = row_ok[:, None] & key_ok[None, :]
        if HAS_MASK:
            mk = tl.load(mask_rows + n[None, :] * smn, mask=allowed, other=0)
            allowed = allowed & (mk != 0)
        k_ptrs = K + b * skb + kvh * skh + n[:, None] * skn + d[None, :] * skd
        v_ptrs = V + b * svb + kvh * svh + n[:, None] * svn + d[None, :] * svd
        acc, m_i, l_i = _attend_tile(
            acc, m_i, l_i, q, k_ptrs, v_ptrs, key_ok, d_ok, allowed, qk_scale, F32_DOT, UPCAST
        )

    # ---- segment B (the active block): always real, taken by the last split ----
    if HAS_K2:
        if split == NUM_SPLITS - 1:
            for t in range(0, tl.cdiv(LB, BLOCK_N)):
                n = t * BLOCK_N + n_base
                key_ok = n < LB
                allowed = row_ok[:, None] & key_ok[None, :]
                if HAS_MASK:
                    mk = tl.load(mask_rows + (LA + n[None, :]) * smn, mask=allowed, other=0)
                    allowed = allowed & (mk != 0)
                k_ptrs = K2 + b * s2kb + kvh * s2kh + n[:, None] * s2kn + d[None, :] * s2kd
                v_ptrs = V2 + b * s2vb + kvh * s2vh + n[:, None] * s2vn + d[None, :] * s2vd
                acc, m_i, l_i = _attend_tile(
                    acc, m_i, l_i, q, k_ptrs, v_ptrs, key_ok, d_ok, allowed, qk_scale, F32_DOT, UPCAST
                )

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)  # no key at all: output 0 instead of 0/0
    out = acc / l_safe[:, None]
    if NUM_SPLITS == 1:
        o_ptrs = OUT + b * sob + h[:, None] * soh + qi[:, None] * som + d[None, :] * sod
        tl.store(o_ptrs, out.to(OUT.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])
    else:
        # partials: O_PART [S, B, H, LQ, BLOCK_D] fp32, LSE_PART [S, B, H, LQ] fp32 (log2 units)
        nb = tl.num_programs(1) // HKV  # batch size
        base = ((split * nb + b) * (HKV * GROUP) + h) * LQ + qi  # [BLOCK_M] flat (split, b, h, qi)
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.math.log2(l_safe))
        tl.store(LSE_PART + base, lse, mask=row_ok)
        tl.store(O_PART + base[:, None] * BLOCK_D + d[None, :], out, mask=row_ok[:, None])


@triton.jit
def _attention_combine_kernel(
    O_PART,
    LSE_PART,
    OUT,
    B,
    H,
    LQ,
    sob,
    soh,
    som,
    sod,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    """Merge split partials: o = sum_s 2^(lse_s - M) o_s / sum_s 2^(lse_s - M), M = max_s lse_s."""
    row = tl.program_id(0)  # flat (b, h, qi)
    qi = row % LQ
    h = (row // LQ) % H
    b = row // (LQ * H)
    s = tl.arange(0, BLOCK_S)
    s_ok = s < NUM_SPLITS
    stride_split = B * H * LQ
    lse = tl.load(LSE_PART + s * stride_split + row, mask=s_ok, other=float("-inf"))  # [BLOCK_S]
    m = tl.max(lse, 0)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    w = tl.math.exp2(lse - m_safe)  # [BLOCK_S]; empty splits weigh 0
    d = tl.arange(0, BLOCK_D)
    parts = tl.load(
        O_PART + (s[:, None] * stride_split + row) * BLOCK_D + d[None, :], mask=s_ok[:, None], other=0.0
    )
    total = tl.sum(w, 0)
    out = tl.sum(parts * w[:, None], 0) / tl.where(total == 0.0, 1.0, total)  # [BLOCK_D]
    tl.store(OUT + b * sob + h * soh + qi * som + d * sod, out.to(OUT.dtype.element_ty), mask=d < HEAD_DIM)


def launch_config(head_dim: int, packed_rows: int, dtype: torch.dtype) -> tuple[int, int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_D, num_warps, num_stages). Checked offline for sm_90 with
    ``python -m editserver.kernels.compile_check``: no fp16/bf16 or fp32 D=64 variant spills registers; fp32 at
    D=128 spills a few dozen bytes. Not timed on a GPU yet."""
    block_d = max(16, next_pow2(head_dim))
    block_m = 64 if packed_rows > 32 else max(16, next_pow2(packed_rows))
    tile_bytes = block_d * (4 if dtype == torch.float32 else 2)  # one key row
    block_n = 64 if tile_bytes <= 128 else 32 if tile_bytes <= 256 else 16
    if tile_bytes > 256:  # fp32 at D=128: the fp32 accumulator and tf32x3 operands need more room
        block_m = min(block_m, 32)
    return block_m, block_n, block_d, 8 if tile_bytes > 256 else 4, 2


def _choose_splits(programs: int, tiles: int, device: torch.device) -> int:
    """Enough splits to give every SM about two programs, each keeping at least 4 context tiles."""
    want = max(1, (2 * sm_count(device)) // max(1, programs))
    return max(1, min(want, tiles // 4, 64))


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k2: torch.Tensor | None = None,
    v2: torch.Tensor | None = None,
    kv_lens: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    num_splits: int | None = None,
) -> torch.Tensor:
    """Bidirectional grouped-query attention over one or two key/value segments.

    q [B, H, Lq, D]; k, v [B, Hkv, La, D] (first segment; keys at or past ``kv_lens[b]`` are
    padding); k2, v2 [B, Hkv, Lb, D] (second segment, placed after the first, all real);
    mask: bool broadcastable to [B, H, Lq, La + Lb] over the concatenated keys (True = attend).
    scale defaults to 1/sqrt(D); num_splits (split-KV) is chosen from the GPU's size when None.
    Returns [B, H, Lq, D] in q's dtype.
    """
    check_tensors(q, k, v, k2, v2)
    B, H, Lq, D = q.shape
    Hkv, La = k.shape[1], k.shape[2]
    if H % Hkv:
        raise ValueError(f"query heads ({H}) must be a multiple of key/value heads ({Hkv})")
    if k.shape[0] != B or k.shape[3] != D or v.shape != k.shape:
        raise ValueError(f"k/v shapes {tuple(k.shape)}/{tuple(v.shape)} do not match q {tuple(q.shape)}")
    has_k2 = k2 is not None
    if has_k2 != (v2 is not None):
        raise ValueError("k2 and v2 go together")
    Lb = k2.shape[2] if has_k2 else 0
    if has_k2 and (k2.shape[:2] != k.shape[:2] or k2.shape[3] != D or v2.shape != k2.shape):
        raise ValueError(f"k2/v2 shapes {tuple(k2.shape)}/{tuple(v2.shape)} do not match k {tuple(k.shape)}")
    G = H // Hkv
    out = torch.empty((B, Lq, H, D), dtype=q.dtype, device=q.device).transpose(1, 2)  # [B, H, Lq, D] view
    if Lq == 0:
        return out
    BLOCK_M, BLOCK_N, BLOCK_D, warps, stages = launch_config(D, G * Lq, q.dtype)
    m_tiles = triton.cdiv(G * Lq, BLOCK_M)
    if num_splits is None:
        num_splits = _choose_splits(m_tiles * B * Hkv, triton.cdiv(La, BLOCK_N), q.device)
    num_splits = max(1, int(num_splits))
    if kv_lens is not None and (
        kv_lens.device != q.device or kv_lens.dtype not in (torch.int32, torch.int64)
    ):
        kv_lens = kv_lens.to(device=q.device, dtype=torch.int32)
    lens = kv_lens if kv_lens is not None else q  # a dummy pointer when unused
    if mask is not None:
        if mask.dtype != torch.bool:
            raise ValueError("mask must be boolean (True = attend)")
        while mask.dim() < 4:
            mask = mask[None]
        m4 = mask.expand(B, H, Lq, La + Lb)
        mstrides = m4.stride()
        m4 = m4.view(torch.uint8)
    else:
        m4, mstrides = q, (0, 0, 0, 0)
    k2_, v2_ = (k2, v2) if has_k2 else (k, v)
    if num_splits > 1:
        o_part = torch.empty((num_splits, B, H, Lq, BLOCK_D), dtype=torch.float32, device=q.device)
        lse_part = torch.empty((num_splits, B, H, Lq), dtype=torch.float32, device=q.device)
    else:
        o_part = lse_part = out
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    _attention_kernel[(m_tiles, B * Hkv, num_splits)](
        q,
        k,
        v,
        k2_,
        v2_,
        lens,
        m4,
        out,
        o_part,
        lse_part,
        *q.stride(),
        *k.stride(),
        *v.stride(),
        *k2_.stride(),
        *v2_.stride(),
        *mstrides,
        *out.stride(),
        Hkv,
        Lq,
        La,
        Lb,
        scale * math.log2(math.e),
        GROUP=G,
        HEAD_DIM=D,
        BLOCK_M=BLOCK_M,
        BLOCK_N=BLOCK_N,
        BLOCK_D=BLOCK_D,
        HAS_LENS=kv_lens is not None,
        HAS_K2=has_k2,
        HAS_MASK=mask is not None,
        NUM_SPLITS=num_splits,
        F32_DOT=q.dtype == torch.float32,
        UPCAST=INTERPRET and q.dtype == torch.bfloat16,
        num_warps=warps,
        num_stages=stages,
    )
    if num_splits > 1:
        _attention_combine_kernel[(B * H * Lq,)](
            o_part,
            lse_part,
            out,
            B,
            H,
            Lq,
            *out.stride(),
            HEAD_DIM=D,
            BLOCK_D=BLOCK_D,
            NUM_SPLITS=num_splits,
            BLOCK_S=max(2, next_pow2(num_splits)),
        )
    return out
