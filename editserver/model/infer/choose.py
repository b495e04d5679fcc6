"""How one denoising step turns logits into tokens: the choice per position and what each row's
logits lose first (model/infer/sampler.py runs the step).

Design decisions:
- Greedy (argmax and its softmax probability) or tempered top-p sampling, drawing only from the
  explicit ``torch.Generator``; the top-2 margin when the rule reads it (model/infer/unmasking.py).
- The penalty is what a row's logits lose before the choice: the ids never proposed (the mask, the
  layout tags, a canvas edit's own ids) and the presence penalty over committed tokens.
- Kept apart from the loop so each module reads whole (the house limit of 500 lines a file).
"""

from __future__ import annotations

import torch

from editserver.model.infer import ops
from editserver.model.infer.loop_types import Canvas
from editserver.model.infer.plan import DecodePlan, Sampling


def choose_tokens(
    logits: torch.Tensor,  # [B, n, V]
    s: Sampling,
    generator: torch.Generator | None,
    penalty: torch.Tensor | None = None,  # [B, V] subtracted from logits
    want_margin: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Token, its probability and (if asked) the top-2 margin p1 - p2 per position [B, n]: greedy
    (argmax, softmax max) or tempered top-p sampling (the margin of the tempered distribution)."""
    B, n, V = logits.shape
    if s.temperature <= 0 or s.top_p >= 1.0:
        # argmax or tempered sampling without a top-p cut: one pass over V, penalty applied on read
        return ops.token_confidence(logits, penalty, s.temperature, generator, want_margin)
    logits = logits.float()
    if penalty is not None:
        logits = logits - penalty[:, None, :]
    probs = torch.softmax(logits / s.temperature, dim=-1)  # [B, n, V]
    margin = None
    if want_margin:
        two = probs.topk(min(2, V), dim=-1).values  # [B, n, 2]
        margin = two[..., 0] - (two[..., 1] if V > 1 else 0.0)
    sorted_p, order = probs.sort(dim=-1, descending=True)
    keep = sorted_p.cumsum(-1) - sorted_p < s.top_p
    keep[..., 0] = True  # the top token always stays, however small top_p is
    probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p * keep)
    probs = probs / probs.sum(-1, keepdim=True)
    tok = torch.multinomial(probs.view(B * n, V), 1, generator=generator).view(B, n)
    return tok, probs.gather(-1, tok[..., None]).squeeze(-1), margin


def penalty(plan: DecodePlan, bias: torch.Tensor, c: Canvas, idx: torch.Tensor, eot_id: int) -> torch.Tensor:
    """[b, V] what each computed row's logits lose: the suppressed ids (bias [V], or [B, V] per row),
    and the presence penalty."""
    V = bias.shape[-1]
    lose = -bias[idx] if bias.dim() == 2 else -bias.expand(len(idx), V)
    if plan.sampling.presence_penalty:
        seen = torch.zeros((len(idx), V), device=bias.device)
        seen.scatter_(1, torch.where(c.fixed[idx], c.tokens[idx], eot_id), 1.0)  # committed tokens
        seen[:, eot_id] = 0.0
        lose = lose + seen * plan.sampling.presence_penalty
    return lose
