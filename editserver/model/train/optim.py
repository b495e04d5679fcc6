"""The training optimizer: AdamW, or Muon on the transformer blocks' weight matrices.

Design decisions:
- ``adamw``: decoupled weight decay on matrices (embeddings included), none on gains and biases;
  betas (0.9, 0.95). Fused on CUDA.
- ``muon``: Muon (Jordan et al. 2024; ``torch.optim.Muon``) orthogonalises the momentum of each
  hidden weight matrix (attention and SwiGLU projections of every block) by Newton-Schulz
  iterations before the update; everything else (the tied embedding, norms, the draft gain, the
  copy gate) stays on AdamW, as Muon's authors prescribe for embeddings, heads and vectors. The update
  is scaled to AdamW's RMS (Moonshot's ``match_rms_adamw``, Liu et al. 2025, "Muon is Scalable for
  LLM Training"), so one learning rate and weight decay serve both parts.
- One object with the optimizer interface the loop uses (``param_groups``, ``zero_grad``, ``step``,
  ``state_dict``) so ``model/train/loop.py`` has one loop whatever the choice. Its state names its kind:
  a run resumed with another kind starts that optimizer afresh (``load_state_dict`` returns False),
  and the caller re-warms the learning rate from there.
"""

from __future__ import annotations

import torch
from torch import nn

OPTIMIZERS = ("adamw", "muon")


class Optimizer:
    def __init__(self, model: nn.Module, kind: str, lr: float, weight_decay: float, device: str = "cpu"):
        if kind not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {kind!r}")
        self.kind = kind
        named = list(model.named_parameters())
        hidden = [p for n, p in named if kind == "muon" and n.startswith("layers.") and p.dim() == 2]
        taken = {id(p) for p in hidden}
        rest = [p for _, p in named if id(p) not in taken]
        groups = [
            {"params": [p for p in rest if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in rest if p.dim() < 2], "weight_decay": 0.0},
        ]
        adamw = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), fused=device.startswith("cuda"))
        self.parts: list[torch.optim.Optimizer] = [adamw]
        if hidden:
            muon = torch.optim.Muon(hidden, lr=lr, weight_decay=weight_decay, adjust_lr_fn="match_rms_adamw")
            self.parts.append(muon)

    @property
    def param_groups(self) -> list[dict]:
        return [g for part in self.parts for g in part.param_groups]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for part in self.parts:
            part.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for part in self.parts:
            part.step()

    def state_dict(self) -> dict:
        return {"kind": self.kind, "parts": [part.state_dict() for part in self.parts]}

    def load_state_dict(self, state: dict) -> bool:
        """Restore a saved state of the same kind; False (nothing loaded) for another kind. A state
        saved before this class existed is a bare AdamW state dict."""
        if "parts" not in state:
            state = {"kind": "adamw", "parts": [state]}
        if state["kind"] != self.kind or len(state["parts"]) != len(self.parts):
            return False
        for part, saved in zip(self.parts, state["parts"]):
            part.load_state_dict(saved)
        return True
