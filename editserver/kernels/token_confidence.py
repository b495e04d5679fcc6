"""Masked-position confidence: best token, its probability and the top-2 margin in one vocabulary pass.

Design decisions:
- For each row of logits only the running max, the running normaliser sum_j exp(z_j - max) and the
  argmax are kept (online softmax over vocabulary chunks): p_max = 1 / normaliser. The [M, V]
  probability matrix is never written; the logits are read exactly once.
- Optional additive penalty per request row (``penalty`` [B, V] for logits [B, n, V]): the sampler's
  suppressed-token and presence penalties are applied while reading, not as a separate [B, n, V]
  tensor. Penalties may be +inf (token forbidden).
- Logits are read where they lie through (row, position) strides, so the active block's slice of a
  whole-canvas logits tensor needs no copy.
- Top-2 margin p1 - p2 = (1 - exp(z2 - z1)) / normaliser from a running second maximum: merging a
  chunk's (top, second) with the running pair needs only max(min(m1, c1), max(m2, c2)).
- Temperature sampling uses the Gumbel-max trick in the same pass: token = argmax(z + g) with
  z = logits / T and g ~ Gumbel(0, 1) from Triton's counter-based Philox generator (seeded per call,
  offset by row and column, so results do not depend on the launch grid); its probability is
  exp(z_token - max) / normaliser. Top-p (nucleus) sampling needs the sorted distribution and is not
  done here: callers fall back to PyTorch's sort-based form (``model/infer/ops.py`` does).
- Ties choose the lowest index, as ``torch.max`` does.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from editserver.kernels._common import check_tensors, next_pow2
from editserver.kernels.reference import token_confidence_reference

__all__ = ["token_confidence", "token_confidence_reference"]


@triton.jit
def _token_confidence_kernel(
    LOGITS,
    PEN,
    TOK,
    PROB,
    MARGIN,
    V,
    N_INNER,
    s_outer,
    s_inner,
    sp,
    inv_temp,
    seed,
    HAS_PEN: tl.constexpr,
    WANT_MARGIN: tl.constexpr,
    SAMPLE: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # flat (outer, inner) row: logits [OUTER, N_INNER, V]
    outer = row // N_INNER
    row_ptr = LOGITS + outer * s_outer + (row % N_INNER) * s_inner
    lane = tl.arange(0, BLOCK_V)
    neg_inf = float("-inf")
    m1 = tl.full([], neg_inf, tl.float32)  # running max of z
    m2 = tl.full([], neg_inf, tl.float32)  # running second max of z (margin only)
    total = tl.zeros([], tl.float32)  # sum exp(z - m1)
    best = tl.zeros([], tl.int64)  # greedy: argmax z; sampling: argmax z + gumbel
    best_key = tl.full([], neg_inf, tl.float32)  # sampling: z + gumbel of the current pick
    best_z = tl.full([], neg_inf, tl.float32)  # sampling: z of the current pick
    for start in range(0, V, BLOCK_V):
        cols = start + lane
        ok = cols < V
        z = tl.load(row_ptr + cols, mask=ok, other=neg_inf).to(tl.float32)  # [BLOCK_V]
        if HAS_PEN:  # one penalty row per outer index (per request)
            z = z - tl.load(PEN + outer * sp + cols, mask=ok, other=0.0).to(tl.float32)
        if SAMPLE:
            z = z * inv_temp
        c1 = tl.max(z, 0)
        ci = tl.argmax(z, 0, tie_break_left=True)
        new_m = tl.maximum(m1, c1)
        m_safe = tl.where(new_m == neg_inf, 0.0, new_m)  # all -inf so far: avoid -inf - -inf
        total = total * tl.exp(m1 - m_safe) + tl.sum(tl.exp(z - m_safe), 0)
        if WANT_MARGIN:
            c2 = tl.max(tl.where(lane == ci, neg_inf, z), 0)
            m2 = tl.maximum(tl.minimum(m1, c1), tl.maximum(m2, c2))
        if SAMPLE:
            u = tl.rand(seed, (row * V + cols).to(tl.int32))
            key = tl.where(ok, z - tl.log(-tl.log(u)), neg_inf)
            k1 = tl.max(key, 0)
            ki = tl.argmax(key, 0, tie_break_left=True)
            z_at = tl.sum(tl.where(lane == ki, z, 0.0), 0)
            take = k1 > best_key
            best = tl.where(take, start + ki, best)
            best_z = tl.where(take, z_at, best_z)
            best_key = tl.where(take, k1, best_key)
        else:
            best = tl.where(c1 > m1, start + ci, best)  # strict: the first maximum wins
        m1 = new_m
    m_safe = tl.where(m1 == neg_inf, 0.0, m1)
    inv_total = 1.0 / tl.where(total == 0.0, 1.0, total)
    if SAMPLE:
        prob = tl.exp(best_z - m_safe) * inv_total
    else:
        prob = inv_total
    tl.store(TOK + row, best)
    tl.store(PROB + row, prob)
    if WANT_MARGIN:
        tl.store(MARGIN + row, (1.0 - tl.exp(m2 - m_safe)) * inv_total)


def token_confidence(
    logits: torch.Tensor,
    penalty: torch.Tensor | None = None,
    temperature: float = 0.0,
    want_margin: bool = False,
    seed: int | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Per row of ``logits`` [..., V]: (token int64, probability fp32, top-2 margin fp32 or None).

    penalty: [B, V] subtracted from every row of ``logits`` [B, n, V] (or [M, V] for 2-D logits).
    temperature 0: the argmax and its softmax probability. temperature > 0: a token sampled from
    softmax((logits - penalty) / T) (Gumbel-max) and its probability under that distribution; the
    Philox seed is ``seed`` or, if None, drawn from ``generator`` (reproducible per generator).
    The margin is p1 - p2 of the (tempered) distribution.
    """
    check_tensors(logits, penalty)
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if logits.dim() not in (2, 3):
        raise ValueError(f"logits must be [M, V] or [B, n, V], got {tuple(logits.shape)}")
    lead, V = logits.shape[:-1], logits.shape[-1]
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    # read in place, also a [B, n, V] slice of a longer canvas (no copy): rows are (outer, inner)
    l3 = logits if logits.dim() == 3 else logits[:, None, :]  # [OUTER, N_INNER, V]
    M = l3.shape[0] * l3.shape[1]
    if penalty is not None and (penalty.shape != (l3.shape[0], V) or penalty.stride(-1) != 1):
        raise ValueError(f"penalty must be a unit-stride [{l3.shape[0]}, {V}], got {tuple(penalty.shape)}")
    tok = torch.empty(M, dtype=torch.int64, device=logits.device)
    prob = torch.empty(M, dtype=torch.float32, device=logits.device)
    margin = torch.empty(M, dtype=torch.float32, device=logits.device) if want_margin else None
    sample = temperature > 0
    if sample and seed is None:
        dev = generator.device if generator is not None else "cpu"
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator, device=dev).item())
    if M:
        pen = penalty if penalty is not None else logits
        _token_confidence_kernel[(M,)](
            l3,
            pen,
            tok,
            prob,
            margin if want_margin else prob,
            V,
            l3.shape[1],
            l3.stride(0),
            l3.stride(1),
            pen.stride(0),
            1.0 / temperature if sample else 1.0,
            seed or 0,
            HAS_PEN=penalty is not None,
            WANT_MARGIN=want_margin,
            SAMPLE=sample,
            BLOCK_V=min(4096, next_pow2(V)),
            num_warps=8 if V >= 4096 else 4,
        )
    out_margin = margin.view(lead) if margin is not None else None
    return tok.view(lead), prob.view(lead), out_margin
