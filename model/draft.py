"""The draft of a next-edit rewrite: which region token each canvas position would copy.

A rewrite mostly copies its region, so each canvas position gets the region token it would copy as an
extra input and a copy logit (model/transformer.py). Where the rewrite changes the token count (a
rename to a longer name, an inserted line) a fixed index-to-index draft is off by the difference for
every later token, so the draft is *aligned*: the tokens written so far are matched against the
region (difflib opcodes), and the positions after them continue the region from where the match
ends, as a speculative-edit draft does after a divergence.

Design decisions:
- One pure function, ``align_draft(region, written, length)``, serves training and inference alike:
  training rows align the whole answer (every opcode known); the sampler aligns the committed prefix
  of each row before every denoising step (model/sampler.py ``draft`` hook), so a position sees the
  draft training showed it once the tokens before it are written.
- Inside an ``equal`` block a position's draft is the very token it matches. Inside a ``replace`` or
  ``insert`` block (the new name, an added line) it is the region's continuation from the block's
  start, the same rule the positions after a partial prefix follow, so a half-written change gets
  the draft training gave its positions. Region tokens a ``delete`` drops are skipped.
- Past the region's end the draft is end-of-text: the answer ends where the region does, unless the
  model overrides the copy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from difflib import SequenceMatcher

import torch
from torch import Tensor


def align_draft(region: Sequence[int], written: Sequence[int], length: int, eot_id: int) -> list[int]:
    """``length`` draft tokens for a canvas whose first ``len(written)`` tokens are ``written``."""
    region, written = list(region), list(written)[:length]
    out: list[int] = []
    nxt = 0  # region index the next unwritten position continues from
    ops = SequenceMatcher(None, region, written, autojunk=False).get_opcodes() if written else []
    for tag, i1, i2, j1, j2 in ops:
        if tag == "delete":
            continue
        out += [region[i] if i < len(region) else eot_id for i in range(i1, i1 + j2 - j1)]
        nxt = i2 if tag == "equal" else i1 + (j2 - j1)
    tail = length - len(out)
    out += [region[i] if i < len(region) else eot_id for i in range(nxt, nxt + tail)]
    return out


def step_drafts(regions: Sequence[Sequence[int] | None], eot_id: int) -> Callable[[Tensor, Tensor], Tensor]:
    """The sampler's ``draft`` hook for rows with these regions (None: a row without a draft, -1).

    Before each step a row's draft is aligned on its committed prefix (the positions before its first
    undecided one). Committed tokens never change, so a row's draft is computed once per prefix length.
    """
    memo: dict[tuple[int, int], list[int]] = {}

    def draft(canvas: Tensor, fixed: Tensor) -> Tensor:  # [B, N] x2 -> [B, N]
        B, N = canvas.shape
        out = torch.full((B, N), -1, dtype=torch.long)
        undecided = ~fixed
        first = torch.where(undecided.any(dim=1), undecided.int().argmax(dim=1), N).tolist()  # [B]
        for b, region in enumerate(regions):
            if region is None:
                continue
            key = (b, first[b])
            if key not in memo:
                memo[key] = align_draft(region, canvas[b, : first[b]].tolist(), N, eot_id)
            out[b] = torch.tensor(memo[key])
        return out.to(canvas.device)

    return draft
