"""Canvas edits: a family whose model chooses its answer's length reshapes the canvas between steps.

DreamOn (Wu et al. 2026, arXiv 2602.01326; DreamLM/DreamOn) is Dream-Coder fine-tuned so that two
tokens edit the infilling gap: ``<|expand|>`` committed at a masked slot becomes two masks (the gap
grows by one), and end-of-text committed at a masked slot removes the slot (the gap shrinks by one).
The answer is whatever the gap holds once no mask is left. Sources: docs/open-weights.md, DreamOn.

Design decisions:
- ``ExpandDelete`` is a piece of the decode plan (model/infer/plan.py ``DecodePlan.edit``), like the
  unmasking rule and the cache policy: the one loop (model/infer/sampler.py) calls it after each
  step's commits and re-prepares its cache state when a width changed. The loop never asks which
  family it serves.
- A row's canvas [N] is ``window (its width w) | filler``: the gap is the first ``w`` positions, laid
  out between prefix and suffix (model/infer/cache.py ``in_place``, ``canvas_lens`` = w); the rest
  is committed end-of-text, so the row is done when its window holds no mask and its answer ends at
  ``w``. ``N`` is the bound on the gap (the request's ``max_tokens``): the publisher's sampler caps the
  whole sequence at prompt + ``max_new_tokens`` - masks, i.e. the gap at ``max_new_tokens``.
- Expand is barred for a row whose width reached its bound or whose expand budget is spent (``bias``:
  the publisher subtracts 1e9 from the logit; -inf here, the same after the softmax). The budget is
  the publisher's default, twice the sampler's ``max_length - prefix_len`` = 2 (bound + suffix); with
  one token a step it never binds before the bound does, but it is kept so a row's edits stay finite.
- Several edits in one step (our parallel rules; the publisher commits one token a step): deletes
  first, then the leftmost expands that still fit under the bound and the budget; an expand that does
  not fit becomes a single mask again (the slot is undecided, as the expand said).
- ``delete_right``: the repository's eval sampler (``eval/generator.py``, ``pad_eos_to_right``) also
  deletes every slot right of a deleted one that was undecided at the step's start; the HF sampler's
  default (``pad_delete_to_right=False``) does not. Off by default, as the model card's loop runs.
- Pure tensor code over explicit arguments: the loop's ``Canvas`` is changed in place and the new
  widths and budgets come back; nothing random.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from editserver.model.infer.loop_types import Canvas

START_MASKS = 4  # the model card's demo and eval/configs/eval_infill.yaml's min_gen_len


@dataclass(frozen=True)
class ExpandDelete:
    """DreamOn's canvas edit (module docstring)."""

    expand_id: int
    delete_id: int  # DreamOn deletes with its end-of-text id (the sampler's ``delete_token_id``)
    start: int = START_MASKS  # masks the gap starts with
    delete_right: bool = False  # also delete the undecided slots right of a delete (eval sampler)

    @property
    def proposes(self) -> tuple[int, int]:
        """Ids the loop must leave proposable although they are special tokens."""
        return self.expand_id, self.delete_id

    def budget(self, bound: torch.Tensor, suffix_lens: torch.Tensor | None) -> torch.Tensor:
        """[B] expands each row may make: 2 * (max_length - prefix_len), the HF sampler's default."""
        suffix = torch.zeros_like(bound) if suffix_lens is None else suffix_lens.to(bound.device)
        return 2 * (bound + suffix)

    def open(self, c: Canvas, width: torch.Tensor, filler: int) -> None:
        """In place: each row's positions from ``width`` [B] on become committed filler."""
        past = torch.arange(c.tokens.shape[1], device=c.tokens.device)[None, :] >= width[:, None]  # [B, N]
        c.tokens[past], c.fixed[past], c.conf[past], c.prev[past] = filler, True, 1.0, -1

    def bias(
        self, base: torch.Tensor, width: torch.Tensor, bound: torch.Tensor, budget: torch.Tensor
    ) -> torch.Tensor:
        """[B, V] the ids never proposed per row: ``base`` [V] plus expand where it cannot fit."""
        out = base.expand(len(width), -1).clone()  # [B, V]
        out[(width >= bound) | (budget <= 0), self.expand_id] = float("-inf")
        return out

    def apply(
        self,
        c: Canvas,
        committed: torch.Tensor,  # [B, N] bool: positions committed by this step
        width: torch.Tensor,  # [B]
        bound: torch.Tensor,  # [B]
        budget: torch.Tensor,  # [B]
        mask_id: int,
        filler: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """In place on ``c``: expands and deletes of this step's commits; (widths, budgets) [B] after."""
        width, budget = width.clone(), budget.clone()
        for b in range(c.tokens.shape[0]):
            w = int(width[b])
            won = committed[b, :w]  # [w]
            expand = won & (c.tokens[b, :w] == self.expand_id)
            delete = won & (c.tokens[b, :w] == self.delete_id)
            if not bool(expand.any() | delete.any()):
                continue
            if self.delete_right and bool(delete.any()):  # undecided at the step's start, right of it
                first = int(delete.nonzero()[0, 0])
                undecided = won | ~c.fixed[b, :w]
                delete |= undecided & (torch.arange(w, device=won.device) >= first)
                expand &= ~delete
            room = min(int(bound[b]) - (w - int(delete.sum())), int(budget[b]))
            grow = expand & (expand.cumsum(0) <= max(room, 0))  # [w] the leftmost expands that fit
            width[b] = _reshape(c, b, w, delete, expand, grow, mask_id, filler)
            budget[b] -= int(grow.sum())
        return width, budget


def _reshape(
    c: Canvas,
    b: int,
    w: int,
    delete: torch.Tensor,  # [w] slots removed
    expand: torch.Tensor,  # [w] slots that committed expand
    grow: torch.Tensor,  # [w] of those, the ones that become two masks (the others one)
    mask_id: int,
    filler: int,
) -> int:
    """Row ``b``'s window rebuilt in place: deleted slots gone, expanded ones masks; returns its width."""
    dev, N = c.tokens.device, c.tokens.shape[1]
    count = torch.ones(w, dtype=torch.long, device=dev) - delete.long() + grow.long()  # [w] 0, 1 or 2
    src = torch.repeat_interleave(torch.arange(w, device=dev), count)  # [w'] old slot of each new one
    undecided = expand[src]  # [w'] the masks an expand left
    new_w = len(src)
    for field, fill, undo in (
        (c.tokens, filler, mask_id),
        (c.fixed, True, False),
        (c.conf, 1.0, 0.0),
        (c.prev, -1, -1),
    ):
        row = field[b, src].clone()
        row[undecided] = undo
        field[b, :new_w] = row
        field[b, new_w:] = fill
    assert new_w <= N, "an expand past the bound"
    return new_w
