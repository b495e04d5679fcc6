"""Hot-path operations of the transformer, behind one explicit dispatch.

Design decisions:
- Every op has a plain-PyTorch form here; the Triton forms live in ``kernels/`` (which knows nothing
  of the model). ``set_backend`` chooses: ``"auto"`` (Triton on CUDA tensors, PyTorch otherwise),
  ``"torch"`` or ``"triton"`` (forced, for tests and debugging). Nothing is swapped at import time.
- Attention uses ``scaled_dot_product_attention`` with grouped-query heads, which never materialises
  the L x L score matrix on its fused paths.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_BACKENDS = ("auto", "torch", "triton")
_backend = "auto"


def set_backend(name: str) -> None:
    global _backend
    if name not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS}, got {name!r}")
    _backend = name


def get_backend() -> str:
    return _backend


def use_triton(x: torch.Tensor) -> bool:
    return _backend == "triton" or (_backend == "auto" and x.is_cuda)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # y = x / sqrt(mean(x^2) + eps) * w, computed in float32 for stability under bf16 autocast
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * weight.float()).to(x.dtype)


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, L, H, D]; cos/sin [B, L, D/2]. Rotates pairs (x_i, x_{i+D/2}) (the NeoX/LLaMA-HF layout)."""
    d2 = x.shape[-1] // 2
    x1, x2 = x[..., :d2].float(), x[..., d2:].float()
    c, s = cos[:, :, None, :], sin[:, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """q [B, H, Lq, D]; k, v [B, Hkv, Lk, D]; mask broadcastable to [B, 1, Lq, Lk] (True = attend)."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=q.shape[1] != k.shape[1])


def token_confidence(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [M, V] -> (argmax token [M], its softmax probability [M]).

    p_max = exp(l_max - logsumexp(l)) = 1 / sum_j exp(l_j - l_max): only the max and the normaliser are
    needed, never the probability matrix (the Triton kernel does this in one pass over V).
    """
    lf = logits.float()
    top, tok = lf.max(dim=-1)
    return tok, torch.exp(top - torch.logsumexp(lf, dim=-1))
