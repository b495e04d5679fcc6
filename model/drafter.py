"""The drafter: one transformer block that re-predicts a canvas block after guessed commits, so
lookahead's later guesses see the earlier ones (model/lookahead.py).

Lookahead guesses a rule's next steps from one call's predictions, frozen: position j's guess was
made with position j - 1 still masked, so a chain breaks as soon as j's token depends on the one
guessed before it (``self`` then ``.``, ``(`` then its argument). Measured on the shipped weights, a
frozen prediction is the later call's token 85% of the time one commit ahead but 50% three commits
ahead (README, session 43). The drafter closes part of that gap the way EAGLE's draft head does for
autoregressive models (Li et al. 2024), at a fraction of a model call.

Design decisions:
- Input: the last call's final hidden states h [R, n, dim] of the block (before the output norm),
  plus, at each position committed or guessed since that call, a learned projection of its token's
  embedding: x = h + new * W e(token). Everything else the call knew is already in h; only what
  changed since has to be told.
- One bidirectional block over the block's positions (no context: h already read it), the model's
  own output norm and tied vocabulary projection on top (``Transformer.logits``), so the drafter adds
  0.85M parameters to a 256-dim model and its predictions are on the model's own vocabulary scale.
- It starts as the identity: the block's output projections are zero, so an untrained drafter
  guesses exactly what the frozen predictions do, and training can only move it from there.
- Trained apart from the model, which stays frozen, on the model's own decoding (the later call's
  whole distribution is the target; model/drafter_train.py): it learns what the model would say,
  not the data, and with which certainty, since a rule picks its sets by the certainties.
- A guess is still verified by a real model call, so in exact mode the drafter changes how many
  steps a call saves, never what is committed; with ``agree`` it may change the order of commits,
  as any guess may. Measured: at most 3% more tokens per step, and a point of pass@1 lost with
  ``agree`` (README, session 43), so no shipped checkpoint carries one.
"""

from __future__ import annotations

import torch
from torch import nn

from model.config import ModelConfig
from model.transformer import Block, rope_tables


class Drafter(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.block = Block(cfg)
        self.inp = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.head_dim, self.theta = cfg.head_dim, cfg.rope_theta
        std = cfg.dim**-0.5 / 4
        for m in (self.inp, self.block.attn.wq, self.block.attn.wk, self.block.attn.wv):
            nn.init.normal_(m.weight, std=std)
        for m in (self.block.ffn.w_gate, self.block.ffn.w_up):
            nn.init.normal_(m.weight, std=std)
        # zero output projections: the block starts as the identity (module docstring)
        nn.init.zeros_(self.block.attn.wo.weight)
        nn.init.zeros_(self.block.ffn.w_down.weight)

    def forward(
        self,
        hidden: torch.Tensor,  # [R, n, dim] the last call's final hidden states of the block
        emb: torch.Tensor,  # [R, n, dim] token embeddings of the positions ``new`` marks
        new: torch.Tensor,  # [R, n] bool: committed or guessed since that call
    ) -> torch.Tensor:
        """Hidden states [R, n, dim] as the model's next call might give them; project with
        ``Transformer.logits``."""
        R, n, _ = hidden.shape
        x = hidden + new[..., None].to(hidden.dtype) * self.inp(emb)
        pos = torch.arange(n, device=hidden.device).expand(R, n)
        cos, sin = rope_tables(self.head_dim, pos, self.theta)
        return self.block(x, cos, sin, None)[0]
