"""LoRA adapters (Hu et al. 2021) on the projections of an open-weight model (model/infer/hf/model.py).

Each adapted ``nn.Linear`` computes ``W x + b + (alpha / r) * B A x`` with A [r, in] drawn small and
B [out, r] zero, so the adapted model starts equal to the base; only A and B train.

Design decisions:
- Adapters attach with forward hooks and live in their own ``LoRA`` module, not inside the model:
  the model's parameter names (and so the loader's and the export's name mapping) stay untouched,
  and ``LoRA.parameters()`` is exactly what the optimizer trains.
- The frozen reference of KTO is the same module with the adapters switched off (``disabled()``):
  one copy of the base weights in memory, however large the model.
- The adapter path runs in fp32 (A, B are fp32 masters) on an input cast to fp32, and its result is
  cast to the base output's dtype: a bf16 base keeps its memory, the update keeps its precision.
- ``delta(name)`` gives the fp32 weight update (alpha / r) * B A of one projection; ``merge_`` folds
  every update into the base weights (after which the adapters are zeroed, so the module computes
  the same), and an export adds ``delta`` to the input directory's own tensors (model/train/kto_open.py).
- Targets: the attention's q/k/v/o and the MLP's gate/up/down projections of every layer.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
from torch import nn

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoRA(nn.Module):
    """Rank-``r`` adapters on every target projection of ``model``; the base is frozen."""

    def __init__(self, model: nn.Module, r: int, alpha: float | None = None, seed: int = 0):
        super().__init__()
        if r < 1:
            raise ValueError(f"the LoRA rank must be at least 1, got {r}")
        self.r = r
        self.alpha = float(alpha if alpha is not None else 2 * r)
        self.scale = self.alpha / r
        self.enabled = True
        for p in model.parameters():
            p.requires_grad_(False)
        g = torch.Generator().manual_seed(seed)
        self.names: list[str] = []
        self.a = nn.ParameterDict()
        self.b = nn.ParameterDict()
        self._hooks = []
        for name, mod in model.named_modules():
            if not (isinstance(mod, nn.Linear) and name.rsplit(".", 1)[-1] in TARGETS):
                continue
            key = name.replace(".", "__")  # ParameterDict keys may not hold dots
            dev = mod.weight.device
            # A as nn.Linear's own default (Kaiming-uniform, a = sqrt(5)), B zero: starts at the base
            bound = 1.0 / math.sqrt(mod.in_features)
            a = (torch.rand(r, mod.in_features, generator=g) * 2 - 1) * bound
            self.a[key] = nn.Parameter(a.to(dev))  # [r, in]
            self.b[key] = nn.Parameter(torch.zeros(mod.out_features, r, device=dev))  # [out, r]
            self.names.append(name)
            self._hooks.append(mod.register_forward_hook(self._hook(key)))
        if not self.names:
            raise ValueError("the model has no projection LoRA can adapt")

    def _hook(self, key: str):
        def hook(mod: nn.Module, args: tuple, out: torch.Tensor) -> torch.Tensor:
            if not self.enabled:
                return out
            x = args[0].float()  # [..., in]
            upd = (x @ self.a[key].t()) @ self.b[key].t()  # [..., out]
            return out + (self.scale * upd).to(out.dtype)

        return hook

    @contextlib.contextmanager
    def disabled(self) -> Iterator[None]:
        """The base model (the KTO reference) inside the block."""
        was, self.enabled = self.enabled, False
        try:
            yield
        finally:
            self.enabled = was

    def delta(self, name: str) -> torch.Tensor:
        """The fp32 weight update [out, in] of the projection ``name`` (a model module name)."""
        key = name.replace(".", "__")
        return self.scale * (self.b[key].detach().float() @ self.a[key].detach().float())

    @torch.no_grad()
    def merge_(self, model: nn.Module) -> None:
        """Fold every update into ``model``'s weights and zero the adapters: the same function after."""
        for name in self.names:
            w = model.get_submodule(name).weight
            w.copy_((w.float() + self.delta(name).to(w.device)).to(w.dtype))
            self.b[name.replace(".", "__")].zero_()

    def remove(self) -> None:
        """Detach the hooks (the model is the base again, or the merged model after ``merge_``)."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
