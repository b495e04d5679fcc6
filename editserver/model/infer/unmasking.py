"""Unmasking rules: which still-masked canvas positions a denoising step commits.

Design decisions:
- A rule is a small frozen dataclass with ``select(conf, active, repeated, step, tok)``: pure tensor
  code, hashable, so a decode plan (model/infer/plan.py) that holds one can key a batch.
- ``ThresholdRule`` is Fast-dLLM's confidence-aware parallel decoding (Wu et al. 2025, Eq. 4): every
  masked token of the active block with p(x_i) >= tau is committed in the same step, and at least the
  single most confident one, so every step makes progress. ``TopKRule(1)`` is the one-token-per-step
  baseline; ``LeftmostRule`` writes left to right.
- ``JointRule`` bounds the error of committing several tokens together instead of each token's own
  confidence (EB-sampler, Ben-Hamu et al. 2025, its entropy bound): commit the largest
  confidence-ordered set S with sum_{i in S} e_i - max_{i in S} e_i <= gamma, e_i = -log p(x_i). A
  near-certain token (an indentation run, a closing bracket) lets the next one ride along, so steps
  are spent where the model is unsure. It also commits what a threshold would (the union), for long
  draft-copied rewrites.
- What a rule reads as a token's certainty (``uses_margin``): p1, or the gap p1 - p2 to the runner-up
  (Dream's top-k margin, Ye et al. 2025). With e_i = -log(p1 - p2) the bound spends its budget where
  two answers compete (``)`` or ``,``), which committed beside their neighbours make inconsistent
  lines (docs/experiments.md, decoding rules). Scores stay p1 either way: thresholds were tuned on them.
- Temporal stability (``JointRule.stable``): a masked position predicted the same token as at the
  previous step, from a canvas that has since changed, is committed when its certainty clears
  ``stable``. Two agreeing predictions from different contexts are evidence a single marginal is not
  (after Wang et al. 2025, "Time is a feature", which votes over whole answers across steps).
- One copy at a time (``JointRule.one_copy``): of two adjacent undecided positions predicting the same
  token, a step commits the more certain; each may be placing the one token the line needs.
- Step budget (``StepBudget``): any rule, but a block takes at most ``steps`` steps and the last one
  commits whatever is still masked (LLaDA decodes a block in a fixed number of steps, Nie et al. 2025,
  Alg. 2; here the inner rule decides while the budget lasts, so a confident answer ends sooner).
- Published loops (``PublishedRule``): each open family's own generation loop as an unmasking rule,
  so ``--decode published`` reproduces a publisher's figure: Dream's ``alg="entropy"`` commits, per
  step, the one masked position of lowest entropy (certainty -H(p), Dream's generation_utils.py);
  LLaDA's ``low_confidence`` remasking the one of highest p1 inside 32-token blocks (LLaDA's
  generate.py, Nie et al. 2025, Alg. 2 with one token per step).
- Block diffusion's rule (``BlockSchedule``): SDAR's ``low_confidence_dynamic`` remasking
  (JetAstra/SDAR @c2041a8 ``generate.py``): a block of width n gets ``steps`` steps, step s owing
  k_s tokens (n split evenly, the first n mod steps steps one more); a step commits every masked
  position with p > threshold when there are at least k_s of them, else the k_s most confident.
  At least one per step while k_s >= 1; past the last step, everything left (the publisher's
  schedule always ends its block by then).
- Fast-dLLM v2's rule (``SubBlockThreshold``, NVlabs/Fast-dLLM ``v2`` ``generate``): the loop's block
  is the model's (32) and is decoded in sub-blocks of ``sub`` (8) columns left to right; a step commits,
  inside the leftmost sub-block with a masked position, every masked position with p > threshold and
  the single most confident one. A block whose first column is still masked commits that column
  alone first: the publisher writes it before the block's first step, as the argmax of the previous
  block's last position (its logits here too: shifted, model/infer/block_cache.py).
- Implied end-of-text (``informative``): a predicted end-of-text right after another undecided
  predicted end-of-text follows from it (training pads every answer with end-of-text), so it enters
  the rule with certainty 0 and never spends a step of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

import torch


class UnmaskRule(Protocol):
    uses_margin: bool  # select reads p1 - p2 (top-2 margin) instead of p1 as each token's certainty

    def select(
        self,
        conf: torch.Tensor,
        active: torch.Tensor,
        repeated: torch.Tensor | None = None,
        step: int = 0,
        tok: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """conf, active [B, n] (active = still masked) -> bool [B, n] of positions to commit.
        ``repeated`` [B, n]: the position's token is the one it was predicted at the previous step;
        ``step``: how many steps the current block has taken before this one; ``tok`` [B, n]: each
        position's predicted token."""
        ...


def _top_k_mask(conf: torch.Tensor, active: torch.Tensor, k: int) -> torch.Tensor:
    scores = conf.masked_fill(~active, -1.0)  # [B, n]
    k = min(k, scores.shape[1])
    top = scores.topk(k, dim=1).indices  # [B, k]
    chosen = torch.zeros_like(active).scatter_(1, top, True)
    return chosen & active


@dataclass(frozen=True)
class ThresholdRule:
    threshold: float
    uses_margin: ClassVar[bool] = False

    def select(
        self,
        conf: torch.Tensor,
        active: torch.Tensor,
        repeated: torch.Tensor | None = None,
        step: int = 0,
        tok: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return ((conf >= self.threshold) & active) | _top_k_mask(conf, active, 1)


@dataclass(frozen=True)
class JointRule:
    gamma: float  # nats: the summed -log p of a step's commits other than its least confident one
    # Also commit every token this confident (``ThresholdRule``): a rewrite copied from its draft has
    # dozens of tokens at p ~ 0.99 whose small errors add up past any gamma worth using on FIM.
    threshold: float = float("inf")
    uses_margin: bool = False  # e_i = -log(p1 - p2) instead of -log p1 (module docstring)
    # Also commit a token predicted the same at the previous step with at least this certainty
    # (module docstring, temporal stability; inf: never). At 0 any repeat commits, implied
    # end-of-text included (its certainty reads 0): that ends the canvas there, as predicted twice,
    # without spending the step the bound's top-1 always takes.
    stable: float = float("inf")
    one_copy: bool = False  # of two adjacent same-token predictions, the surer (docstring; needs tok)

    def select(
        self,
        conf: torch.Tensor,
        active: torch.Tensor,
        repeated: torch.Tensor | None = None,
        step: int = 0,
        tok: torch.Tensor | None = None,
    ) -> torch.Tensor:
        # sorted by confidence, position k joins when the -log p of positions 0..k-1 sums to <= gamma
        # (the least confident member of the set is its max error term, which the bound leaves out)
        s, order = conf.masked_fill(~active, -1.0).sort(dim=1, descending=True)  # [B, n]
        err = torch.where(s >= 0, -torch.log(s.clamp_min(1e-12)), torch.inf)  # [B, n]
        keep = (err.cumsum(dim=1) - err) <= self.gamma  # [B, n] sum over earlier entries
        keep[:, 0] = True  # at least one token per step
        keep |= s >= self.threshold
        chosen = torch.zeros_like(active).scatter_(1, order, keep) & active
        if repeated is not None:
            chosen |= repeated & active & (conf >= self.stable)
        if self.one_copy and tok is not None:
            chosen &= ~weaker_twin(chosen, tok, conf)
        return chosen


def weaker_twin(chosen: torch.Tensor, tok: torch.Tensor, conf: torch.Tensor) -> torch.Tensor:
    """[B, n] the less certain member (the right one on a tie) of every two adjacent ``chosen``
    positions with the same ``tok``. Every pair keeps a member, so a step still commits."""
    both = chosen[:, 1:] & chosen[:, :-1] & (tok[:, 1:] == tok[:, :-1])  # [B, n-1] pair (i, i+1)
    left_weaker = conf[:, :-1] < conf[:, 1:]  # [B, n-1]
    out = torch.zeros_like(chosen)
    out[:, :-1] |= both & left_weaker
    out[:, 1:] |= both & ~left_weaker
    return out


@dataclass(frozen=True)
class TopKRule:
    k: int = 1
    uses_margin: ClassVar[bool] = False

    def select(
        self,
        conf: torch.Tensor,
        active: torch.Tensor,
        repeated: torch.Tensor | None = None,
        step: int = 0,
        tok: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return _top_k_mask(conf, active, self.k)


@dataclass(frozen=True)
class PublishedRule:
    """A published loop's choice: the ``k`` masked positions of highest certainty, read as -H(p) when
    ``entropy`` (Dream) and as p1 otherwise (LLaDA); module docstring."""

    entropy: bool
    k: int = 1
    uses_margin: ClassVar[bool] = False

    @property
    def uses_entropy(self) -> bool:
        return self.entropy

    def select(
        self,
        conf: torch.Tensor,
        active: torch.Tensor,
        repeated: torch.Tensor | None = None,
        step: int = 0,
        tok: torch.Tensor | None = None,
    ) -> torch.Tensor:
        # -H(p) lies below the -1 that _top_k_mask gives decided positions: rank against -inf here
        scores = conf.masked_fill(~active, float("-inf"))  # [B, n]
        top = scores.topk(min(self.k, scores.shape[1]), dim=1).indices  # [B, k]
        return torch.zeros_like(active).scatter_(1, top, True) & active


@dataclass(frozen=True)
class LeftmostRule:
    """One token per step, left to right: the first still-masked position of each row."""

    uses_margin: ClassVar[bool] = False

    def select(
        self,
        conf: torch.Tensor,
        active: torch.Tensor,
        repeated: torch.Tensor | None = None,
        step: int = 0,
        tok: torch.Tensor | None = None,
    ) -> torch.Tensor:
        first = first_true(active)  # [B]
        return torch.arange(active.shape[1], device=active.device)[None, :] == first[:, None]


@dataclass(frozen=True)
class StepBudget:
    """``inner``'s commits, and at a block's last budgeted step every position still masked there: a
    block takes at most ``steps`` steps (module docstring)."""

    inner: UnmaskRule
    steps: int

    @property
    def uses_margin(self) -> bool:
        return self.inner.uses_margin

    def select(
        self,
        conf: torch.Tensor,
        active: torch.Tensor,
        repeated: torch.Tensor | None = None,
        step: int = 0,
        tok: torch.Tensor | None = None,
    ) -> torch.Tensor:
        chosen = self.inner.select(conf, active, repeated, step, tok)
        return chosen | active if step + 1 >= self.steps else chosen


@dataclass(frozen=True)
class BlockSchedule:
    """Block diffusion's per-block rule: threshold with a per-step floor of k_s tokens (module docstring)."""

    threshold: float
    steps: int
    uses_margin: ClassVar[bool] = False

    def owed(self, n: int, step: int) -> int:
        """k_s: the tokens step ``step`` of a block of ``n`` positions owes (SDAR's schedule)."""
        base, extra = divmod(n, self.steps)
        return base + int(step < extra) if step < self.steps else n

    def select(
        self,
        conf: torch.Tensor,
        active: torch.Tensor,
        repeated: torch.Tensor | None = None,
        step: int = 0,
        tok: torch.Tensor | None = None,
    ) -> torch.Tensor:
        k = self.owed(active.shape[1], step)
        high = (conf > self.threshold) & active  # [B, n]
        enough = high.sum(dim=1, keepdim=True) >= k  # [B, 1]
        return torch.where(enough, high, _top_k_mask(conf, active, k))


@dataclass(frozen=True)
class SubBlockThreshold:
    """Fast-dLLM v2's per-step rule inside a block: threshold within sub-blocks (module docstring)."""

    threshold: float
    sub: int
    uses_margin: ClassVar[bool] = False

    def select(
        self,
        conf: torch.Tensor,
        active: torch.Tensor,
        repeated: torch.Tensor | None = None,
        step: int = 0,
        tok: torch.Tensor | None = None,
    ) -> torch.Tensor:
        n = active.shape[1]
        col = torch.arange(n, device=active.device)[None, :]  # [1, n]
        lo = torch.where(active, col, n).min(dim=1, keepdim=True).values  # [B, 1] leftmost masked
        here = active & (col // self.sub == lo // self.sub)  # [B, n] its sub-block's masked positions
        c = conf.masked_fill(~here, float("-inf"))
        best = torch.zeros_like(here).scatter_(1, c.argmax(dim=1, keepdim=True), True)  # one per row
        chosen = ((c > self.threshold) | best) & here
        first = active[:, :1]  # [B, 1] the block's first column: the previous block's argmax, alone
        return torch.where(first, col == 0, chosen)


def informative(tok: torch.Tensor, conf: torch.Tensor, active: torch.Tensor, eot_id: int) -> torch.Tensor:
    """conf [B, n] with implied end-of-text predictions (an undecided predicted end-of-text just
    before them) set to 0; tok, active [B, n]."""
    prev_open_eot = torch.zeros_like(active)
    prev_open_eot[:, 1:] = (tok[:, :-1] == eot_id) & active[:, :-1]
    return conf.masked_fill((tok == eot_id) & prev_open_eot, 0.0)


def first_true(mask: torch.Tensor) -> torch.Tensor:
    """[B] index of each row's first True in ``mask`` [B, N]; N where a row has none."""
    N = mask.shape[1]
    return torch.where(mask.any(dim=1), mask.int().argmax(dim=1), N)


def fill_after_eot(canvas: torch.Tensor, fixed: torch.Tensor, eot_id: int) -> torch.Tensor:
    """In place on canvas, fixed [B, N]: positions after a row's first committed end-of-text become
    committed end-of-text (module docstring); returns those it filled [B, N]."""
    first = first_true(fixed & (canvas == eot_id))  # [B]
    tail = torch.arange(canvas.shape[1], device=canvas.device) > first[:, None]
    fill = tail & ~fixed
    canvas[fill] = eot_id
    fixed |= tail
    return fill
