"""Plain-PyTorch forms of every kernel op: the tests' oracles and the model's numerics on CPU.

Design decisions:
- This module imports torch only, never Triton, so ``model/infer/ops.py`` calls these functions for
  its PyTorch paths and a machine without Triton (or without a GPU) runs the model through them.
  The kernel modules (``kernels/<op>.py``) import their reference from here.
- Each ``<op>_reference`` has its kernel's signature and semantics (shapes are documented with the
  kernel). Changing one changes the model's CPU numerics: the model's tests compare against the
  previous logits bit for bit, so any edit here must keep the order of operations and the dtypes.
- Attention has two forms. ``attention_reference`` is explicit fp32 math (scores, softmax, weighted
  sum), the kernel tests' oracle. ``attention_sdpa`` is what the model runs without Triton:
  concatenate the two key segments, mask each row's padding, then ``scaled_dot_product_attention``
  (whose fused CPU/GPU paths never materialise the score matrix).
- Norms, rotary and confidences compute in float32 and round once to the input dtype, as the
  kernels do.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = [
    "attention_reference",
    "attention_sdpa",
    "rmsnorm_reference",
    "rotary_reference",
    "swiglu_reference",
    "token_confidence_reference",
]


# ---- attention ---------------------------------------------------------------------------------
def attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k2: torch.Tensor | None = None,
    v2: torch.Tensor | None = None,
    kv_lens: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Bidirectional grouped-query attention in explicit fp32 math (the kernel's contract).

    q [B, H, Lq, D]; k, v [B, Hkv, La, D] (keys at or past ``kv_lens[b]`` are padding); k2, v2
    [B, Hkv, Lb, D] placed after them, all real; mask bool broadcastable to [B, H, Lq, La + Lb].
    Rows with no key to attend to give 0. Returns [B, H, Lq, D] in q's dtype.
    """
    B, H, Lq, D = q.shape
    La = k.shape[2]
    if k2 is not None:
        k, v = torch.cat([k, k2], dim=2), torch.cat([v, v2], dim=2)  # [B, Hkv, Lk, D]
    Lk, G = k.shape[2], H // k.shape[1]
    kf = k.float().repeat_interleave(G, dim=1)  # [B, H, Lk, D]
    vf = v.float().repeat_interleave(G, dim=1)
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    scores = (q.float() @ kf.transpose(-1, -2)) * scale  # [B, H, Lq, Lk]
    keep = torch.ones((B, 1, 1, Lk), dtype=torch.bool, device=q.device)
    if kv_lens is not None:
        j = torch.arange(Lk, device=q.device)
        keep = ((j[None, :] < kv_lens.to(q.device)[:, None]) | (j[None, :] >= La))[:, None, None, :]
    if mask is not None:
        keep = keep & mask
    scores = scores.masked_fill(~keep, float("-inf"))
    any_key = keep.expand_as(scores).any(-1, keepdim=True)  # rows with no key give 0, not NaN
    p = torch.softmax(scores.masked_fill(~any_key, 0.0), dim=-1) * any_key
    return (p @ vf).to(q.dtype)


def attention_sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k2: torch.Tensor | None = None,
    v2: torch.Tensor | None = None,
    kv_lens: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The kernel's contract through ``scaled_dot_product_attention`` (the model's PyTorch path).

    Unlike the kernel, this copies the first segment when a second is given, and a row whose keys are
    all masked gives NaN (the model never builds one). kv_lens must be on q's device.
    """
    first = k.shape[2]
    if k2 is not None:
        k, v = torch.cat([k, k2], dim=2), torch.cat([v, v2], dim=2)  # [B, Hkv, Lk, D]
    if kv_lens is not None:
        valid = torch.arange(first, device=q.device)[None, :] < kv_lens[:, None]  # [B, first]
        keep = torch.cat([valid, valid.new_ones(valid.shape[0], k.shape[2] - first)], dim=1)  # [B, Lk]
        keep = keep[:, None, None, :]
        mask = keep if mask is None else mask & keep
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=q.shape[1] != k.shape[1])


# ---- normalisation -----------------------------------------------------------------------------
def rmsnorm_reference(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """y = x / sqrt(mean(x^2) + eps) * weight over the last dim, in float32 (stable under bf16).

    With ``residual``: s = x + residual (rounded to x's dtype first), returns (rmsnorm(s), s).
    """
    if residual is not None:
        s = x + residual
        return rmsnorm_reference(s, weight, eps), s
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * weight.float()).to(x.dtype)


# ---- rotary ------------------------------------------------------------------------------------
def rotary_reference(
    q: torch.Tensor, k: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Out of place: rotated copies of q [B, L, H, D] and k [B, L, Hk, D]; cos/sin [B, L, D/2].
    Pairs are (x_i, x_{i + D/2}) (the NeoX / LLaMA-HF layout)."""

    def rot(x: torch.Tensor) -> torch.Tensor:
        d2 = x.shape[-1] // 2
        x1, x2 = x[..., :d2].float(), x[..., d2:].float()
        c, s = cos[:, :, None, :], sin[:, :, None, :]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)

    return rot(q), (rot(k) if k is not None else None)


# ---- feed-forward ------------------------------------------------------------------------------
def swiglu_reference(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up in the inputs' dtype (PyTorch's own rounding, kept for the model's numerics)."""
    return F.silu(gate) * up


# ---- token choice ------------------------------------------------------------------------------
def token_confidence_reference(
    logits: torch.Tensor,
    penalty: torch.Tensor | None = None,
    temperature: float = 0.0,
    want_margin: bool = False,
    seed: int | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Per row of logits [B, n, V] (penalty [B, V]) or [M, V] (penalty [M, V]): (token, its
    probability, top-2 margin p1 - p2 or None), each shaped logits.shape[:-1].

    Greedy: p_max = exp(l_max - logsumexp(l)). Temperature > 0 draws from softmax((l - penalty) / T)
    with ``torch.multinomial`` (the kernel's Gumbel-max uses another random stream, so sampled tokens
    agree in law, not draw by draw); ``seed`` seeds a fresh generator when none is given.
    """
    lf = logits.float()
    if penalty is not None:
        lf = lf - (penalty[:, None, :] if logits.dim() > 2 else penalty)
    if temperature > 0:
        lf = lf / temperature
    lse = torch.logsumexp(lf, dim=-1)
    if temperature > 0:
        if generator is None and seed is not None:
            generator = torch.Generator(device=logits.device).manual_seed(seed)
        probs = torch.softmax(lf, dim=-1)
        flat = probs.reshape(-1, probs.shape[-1])
        tok = torch.multinomial(flat, 1, generator=generator).view(probs.shape[:-1])
        prob = probs.gather(-1, tok[..., None]).squeeze(-1)
    else:
        top, tok = lf.max(dim=-1)
        prob = torch.exp(top - lse)
    margin = None
    if want_margin:
        two = (
            lf.topk(2, dim=-1).values
            if lf.shape[-1] > 1
            else torch.cat([lf, torch.full_like(lf, -torch.inf)], -1)
        )
        margin = torch.exp(two[..., 0] - lse) - torch.exp(two[..., 1] - lse)
    return tok, prob, margin
