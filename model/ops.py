"""Hot-path operations of the transformer, behind one explicit dispatch.

Design decisions:
- Every op has its PyTorch form here (the model's numerics on CPU, unchanged by the kernels) and a
  Triton form in ``kernels/`` (which knows nothing of the model). ``set_backend`` chooses:
  ``"auto"`` (Triton for CUDA tensors, PyTorch otherwise), ``"torch"`` or ``"triton"`` (forced, for
  tests and debugging; forcing Triton on CPU tensors needs ``TRITON_INTERPRET=1`` set before the
  first kernel is imported). Nothing is swapped at import time, and Triton is imported only when a
  Triton path is first taken, so CPU machines without Triton never import it.
- The kernels are forward-only: under ``"auto"``, a call that would record autograd history
  (training) takes the PyTorch path; under ``"triton"`` such a call is an error.
- ``"auto"`` with CUDA tensors but no importable Triton falls back to PyTorch rather than failing.
- Attention's PyTorch form is ``scaled_dot_product_attention`` with grouped-query heads, which never
  materialises the L x L score matrix on its fused paths. The Triton form reads the cached context
  and the block's keys in place (no concatenation) and skips each row's padding (``kv_lens``).
- The PyTorch forms equal ``kernels.<op>_reference`` (tests/kernels check it); they are kept here,
  not imported from ``kernels``, because the kernel modules import Triton.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import torch
import torch.nn.functional as F

_BACKENDS = ("auto", "torch", "triton")
_backend = "auto"
_kernel_modules: dict[str, ModuleType] = {}
_triton_importable: bool | None = None


def set_backend(name: str) -> None:
    global _backend
    if name not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS}, got {name!r}")
    _backend = name


def get_backend() -> str:
    return _backend


def _has_triton() -> bool:
    global _triton_importable
    if _triton_importable is None:
        try:
            importlib.import_module("triton")
            _triton_importable = True
        except ImportError:
            _triton_importable = False
    return _triton_importable


def use_triton(*tensors: torch.Tensor | None) -> bool:
    """Whether a call with these tensors takes the Triton path under the current backend."""
    if _backend == "torch":
        return False
    if _backend == "triton":
        return True
    present = [t for t in tensors if t is not None]
    if not present or not present[0].is_cuda:
        return False
    if torch.is_grad_enabled() and any(t.requires_grad for t in present):
        return False  # training: the kernels record no autograd history
    return _has_triton()


def _kernel(op: str) -> ModuleType:
    mod = _kernel_modules.get(op)
    if mod is None:
        mod = _kernel_modules[op] = importlib.import_module(f"kernels.{op}")
    return mod


# ---- normalisation -----------------------------------------------------------------------------
def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if use_triton(x, weight):
        return _kernel("rmsnorm").rmsnorm(x, weight, eps)
    # y = x / sqrt(mean(x^2) + eps) * w, computed in float32 for stability under bf16 autocast
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * weight.float()).to(x.dtype)


def add_rmsnorm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(s, rmsnorm(s)) with s = x + residual: the pre-norm block's residual add and the next norm."""
    if use_triton(x, residual, weight):
        y, s = _kernel("rmsnorm").rmsnorm(x, weight, eps, residual=residual)
        return s, y
    s = x + residual
    return s, rmsnorm(s, weight, eps)


# ---- rotary ------------------------------------------------------------------------------------
def rotary(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """q [B, L, H, D], k [B, L, Hkv, D]; cos/sin [B, L, D/2]. Rotates pairs (x_i, x_{i+D/2}) (the
    NeoX/LLaMA-HF layout). The Triton path rotates q and k in place; use the returned tensors."""
    if use_triton(q, k):
        return _kernel("rotary").rotary(q, k, cos, sin)
    return _rotate(q, cos, sin), _rotate(k, cos, sin)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    d2 = x.shape[-1] // 2
    x1, x2 = x[..., :d2].float(), x[..., d2:].float()
    c, s = cos[:, :, None, :], sin[:, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)


# ---- feed-forward ------------------------------------------------------------------------------
def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    if use_triton(gate, up):
        return _kernel("swiglu").swiglu(gate, up)
    return F.silu(gate) * up


# ---- attention ---------------------------------------------------------------------------------
def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    past: tuple[torch.Tensor, torch.Tensor] | None = None,
    kv_lens: torch.Tensor | None = None,
) -> torch.Tensor:
    """Bidirectional grouped-query attention.

    q [B, H, Lq, D]; k, v [B, Hkv, L, D] (the current tokens' keys); past: cached (k, v)
    [B, Hkv, Lc, D] placed before them; kv_lens [B]: real tokens per row of the first key segment
    (``past`` if given, else ``k``), the rest being padding; mask: bool broadcastable to
    [B, 1, Lq, Lk] over all keys (True = attend). Returns [B, H, Lq, D].
    """
    if use_triton(q, k, v):
        att = _kernel("attention").attention
        if past is not None:
            return att(q, past[0], past[1], k, v, kv_lens=kv_lens, mask=mask)
        return att(q, k, v, kv_lens=kv_lens, mask=mask)
    first = k.shape[2]
    if past is not None:
        first = past[0].shape[2]
        k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
    if kv_lens is not None:
        valid = torch.arange(first, device=q.device)[None, :] < kv_lens[:, None]  # [B, first]
        keep = torch.cat([valid, valid.new_ones(valid.shape[0], k.shape[2] - first)], dim=1)  # [B, Lk]
        keep = keep[:, None, None, :]
        mask = keep if mask is None else mask & keep
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=q.shape[1] != k.shape[1])


# ---- token choice ------------------------------------------------------------------------------
def token_confidence(
    logits: torch.Tensor,
    penalty: torch.Tensor | None = None,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    want_margin: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """logits [B, n, V] (penalty [B, V] subtracted from each row) or [M, V] (penalty [M, V]) ->
    (token, its probability, top-2 margin p1 - p2 if asked else None), each shaped logits.shape[:-1].

    Greedy (temperature 0): p_max = exp(l_max - logsumexp(l)), so only the max and the normaliser
    are needed, never the probability matrix (the Triton kernel does this in one pass over V).
    Temperature > 0 samples from softmax((l - penalty) / T): Gumbel-max in the kernel; the PyTorch
    path draws with ``torch.multinomial`` from ``generator``.
    """
    if use_triton(logits, penalty):
        return _kernel("token_confidence").token_confidence(
            logits, penalty, temperature=temperature, want_margin=want_margin, generator=generator
        )
    lf = logits.float()
    if penalty is not None:
        lf = lf - (penalty[:, None, :] if logits.dim() > 2 else penalty)
    if temperature > 0:
        lf = lf / temperature
    lse = torch.logsumexp(lf, dim=-1)
    if temperature > 0:
        probs = torch.softmax(lf, dim=-1)
        tok = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, generator=generator)
        tok = tok.view(probs.shape[:-1])
        prob = probs.gather(-1, tok[..., None]).squeeze(-1)
    else:
        top, tok = lf.max(dim=-1)
        prob = torch.exp(top - lse)
    margin = None
    if want_margin:
        two = lf.topk(min(2, lf.shape[-1]), dim=-1).values
        second = two[..., 1] if two.shape[-1] > 1 else torch.full_like(lse, float("-inf"))
        margin = torch.exp(two[..., 0] - lse) - torch.exp(second - lse)
    return tok, prob, margin
