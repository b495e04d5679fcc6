"""Hot-path operations of the transformer, behind one explicit dispatch.

Design decisions:
- Every op has a PyTorch form, ``kernels.reference`` (the model's numerics on CPU, unchanged by the
  kernels), and a Triton form in ``kernels/<op>.py`` (neither knows the model). ``set_backend`` chooses:
  ``"auto"`` (Triton for CUDA tensors, PyTorch otherwise), ``"torch"`` or ``"triton"`` (forced, for
  tests and debugging; forcing Triton on CPU tensors needs ``TRITON_INTERPRET=1`` set before the
  first kernel is imported). Nothing is swapped at import time, and Triton is imported only when a
  Triton path is first taken, so CPU machines without Triton never import it.
- The kernels are forward-only: under ``"auto"``, a call that would record autograd history
  (training) takes the PyTorch path; under ``"triton"`` such a call is an error.
- ``"auto"`` with CUDA tensors but no importable Triton falls back to PyTorch rather than failing.
- Attention's PyTorch form is ``kernels.reference.attention_sdpa`` (``scaled_dot_product_attention``
  with grouped-query heads, which never materialises the L x L score matrix on its fused paths), not
  the explicit-math oracle. The Triton form reads the cached context and the block's keys in place
  (no concatenation) and skips each row's padding (``kv_lens``).
- Masks: both forms take any bool mask broadcastable to [B, 1, Lq, Lk] over all keys, ``past``
  first: key padding, and block diffusion's block-causal mask (model/infer/hf/model.py ``encode``
  over one segment, ``encode_span`` over the cached blocks then the span's own keys). The Triton
  form reads it tile by tile beside the keys (the heads broadcast with stride 0, never copied), so
  nothing is routed to the reference (tests/kernels/test_block_mask.py). Its tiles are read even
  where the mask rules them out (a prefill's later blocks): correct, not skipped.
- ``kernels.reference`` imports torch only, so importing this module never imports Triton; the
  kernel modules (which do) are imported on first use.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import torch

from editserver.kernels import reference

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
        mod = _kernel_modules[op] = importlib.import_module(f"editserver.kernels.{op}")
    return mod


# ---- normalisation -----------------------------------------------------------------------------
def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if use_triton(x, weight):
        return _kernel("rmsnorm").rmsnorm(x, weight, eps)
    return reference.rmsnorm_reference(x, weight, eps)


def add_rmsnorm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(s, rmsnorm(s)) with s = x + residual: the pre-norm block's residual add and the next norm."""
    if use_triton(x, residual, weight):
        y, s = _kernel("rmsnorm").rmsnorm(x, weight, eps, residual=residual)
    else:
        y, s = reference.rmsnorm_reference(x, weight, eps, residual=residual)
    return s, y


# ---- rotary ------------------------------------------------------------------------------------
def rotary(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """q [B, L, H, D], k [B, L, Hkv, D]; cos/sin [B, L, D/2]. Rotates pairs (x_i, x_{i+D/2}) (the
    NeoX/LLaMA-HF layout). The Triton path rotates q and k in place; use the returned tensors."""
    if use_triton(q, k):
        return _kernel("rotary").rotary(q, k, cos, sin)
    return reference.rotary_reference(q, k, cos, sin)


# ---- feed-forward ------------------------------------------------------------------------------
def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    if use_triton(gate, up):
        return _kernel("swiglu").swiglu(gate, up)
    return reference.swiglu_reference(gate, up)


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
    att = _kernel("attention").attention if use_triton(q, k, v) else reference.attention_sdpa
    if past is not None:  # the kernel's contract: the first segment is the cache, the second the block
        return att(q, past[0], past[1], k, v, kv_lens=kv_lens, mask=mask)
    return att(q, k, v, kv_lens=kv_lens, mask=mask)


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
    return reference.token_confidence_reference(
        logits, penalty, temperature=temperature, want_margin=want_margin, generator=generator
    )
