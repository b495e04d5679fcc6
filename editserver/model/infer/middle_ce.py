"""The canonical answer's cross-entropy on a FIM canvas: a smooth quality signal for benchmarks.

Design decisions:
- Where a weak model's pass@1 is near zero, the mean cross-entropy (nats/token) of the canonical
  middle and its end-of-text still orders checkpoints; ``editserver bench fim`` reports it.
- Fully masked (the default) scores every answer token from the context alone, the t = 1 term of
  the diffusion loss (model/train/diffusion.py); ``left_to_right`` teacher-forces the answer one
  token at a time, the state a block-of-one decode meets.
- Scored over the tokens the sampler may propose (never the mask or a layout tag), through the
  engine's own layout and, for in-place families, their exact cache policy, so it measures what
  decoding sees.
- A function of a loaded engine's public pieces (its model, tokenizer, layout, settings and FIM
  layout), not a method of ``Engine``: only a benchmark (``editserver bench fim``) and the tests ask
  for it, and the engine never imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from editserver.model.infer.layout import InPlaceLayout

if TYPE_CHECKING:
    from editserver.model.infer.engine import Engine
    from editserver.model.infer.requests import FimRequest


@torch.no_grad()
def middle_ce(engine: Engine, req: FimRequest, middle: str, left_to_right: bool = False) -> float:
    """Mean cross-entropy (nats/token) of ``middle`` and its end-of-text on a FIM canvas: a smooth
    quality signal for benchmarks where a weak model's pass@1 is near zero.

    Fully masked (the default): every answer token scored from the context alone, the t = 1 term
    of the diffusion loss (model/train/diffusion.py). ``left_to_right``: answer token k scored with
    tokens < k written and the rest still masked (teacher forcing), the state a block-of-one
    decode meets at each step, so it tracks what greedy decoding can get right."""
    n = req.max_tokens if req.max_tokens is not None else engine.inference.fim_max_tokens
    if isinstance(engine.layout, InPlaceLayout):
        return _in_place(engine, req, middle, n, left_to_right)
    ctx, _ = engine.fim_context(req, n)
    target = [*engine.tok.encode(middle), engine.tok.eot_id][:n]
    T = len(target)
    mask = engine.tok.mask_id
    if left_to_right:  # row k: the answer's first k tokens, then masks; scored at position k
        rows = [ctx + target[:k] + [mask] * (n - k) for k in range(T)]
        scored_at = [len(ctx) + k for k in range(T)]
    else:  # one fully masked row scored at every answer position
        rows, scored_at = [ctx + [mask] * n], [len(ctx) + k for k in range(T)]
    ids = torch.tensor(rows, device=engine.device)  # [R, Lc + n]
    which = torch.arange(T, device=engine.device) if left_to_right else torch.zeros(T, dtype=torch.long)
    scored = engine.model(
        ids,
        context_lens=torch.full((len(rows),), len(ctx), device=engine.device),
        logits_index=(which.to(engine.device), torch.tensor(scored_at, device=engine.device)),
    ).float()  # [T, V]; only these positions are projected, as training does
    # over the tokens the sampler may propose: never the mask or a layout tag (denoise)
    scored[:, [mask, *engine.suppressed_ids()]] = float("-inf")
    return float(torch.nn.functional.cross_entropy(scored, torch.tensor(target, device=engine.device)))


def _in_place(engine: Engine, req: FimRequest, middle: str, n: int, left_to_right: bool) -> float:
    """``middle_ce`` on an in-place layout, through its exact cache policy (one row per state)."""
    ctx, suf, _ = engine.fim_layout(req, n)
    target = [*engine.tok.encode(middle), engine.tok.eot_id][:n]
    T, mask = len(target), engine.tok.mask_id
    canvases = [target[:k] + [mask] * (n - k) for k in range(T)] if left_to_right else [[mask] * n]
    R = len(canvases)
    policy = engine.layout.exact_cache
    rows = engine.layout.rows([ctx] * R, [suf] * R, [n] * R, engine.inference, engine.device)
    state = policy.prepare(engine.model, rows)
    want = torch.zeros((R, n), dtype=torch.bool, device=engine.device)  # [R, n]
    if left_to_right:
        want[torch.arange(T), torch.arange(T)] = True
    else:
        want[0, :T] = True
    canvas = torch.tensor(canvases, device=engine.device)  # [R, n]
    scored = policy.logits(engine.model, state, canvas, slice(0, n), None, want).float()  # [T, V]
    scored[:, [mask, *engine.suppressed_ids()]] = float("-inf")
    return float(torch.nn.functional.cross_entropy(scored, torch.tensor(target, device=engine.device)))
