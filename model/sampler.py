"""The parallel denoising sampler: one loop, with pluggable cache policy and unmasking rule.

The reverse process of masked diffusion starts from a canvas of ``<|mask|>`` tokens and, at every
step, predicts all masked tokens at once, keeping (unmasking) some of them (LLaDA, Nie et al. 2025,
Alg. 2 with low-confidence remasking). Design decisions:
- Semi-autoregressive blocks: the canvas is decoded block by block, left to right; inside a block
  tokens are unmasked in parallel. Later blocks stay masked while an earlier one is decoded.
- Unmasking rule (``UnmaskRule``): ``ThresholdRule`` is Fast-dLLM's confidence-aware parallel
  decoding (Wu et al. 2025, Eq. 4): every masked token of the active block whose confidence
  p(x_i) >= tau is committed in the same step, and at least the single most confident one, so every
  step makes progress. ``TopKRule(1)`` is the one-token-per-step baseline. ``JointRule`` bounds the
  error of committing several tokens together instead of each token's own confidence (EB-sampler,
  Ben-Hamu et al. 2025, its entropy bound: commit the largest confidence-ordered set S with
  sum_{i in S} e_i - max_{i in S} e_i <= gamma, here with e_i = -log p(x_i)): a near-certain token
  (an indentation run, a closing bracket) lets the next one ride along, so it spends steps where
  the model is unsure rather than on every token that misses a fixed threshold. It also commits
  what a threshold would (the union), for long draft-copied rewrites.
- What a rule reads as a token's certainty (``uses_margin``): its probability p1, or the gap
  p1 - p2 to the runner-up (the top-k margin of Dream's sampler, Ye et al. 2025; Kim et al. 2025).
  With e_i = -log(p1 - p2) the joint bound spends its budget on positions where two answers
  compete (``a`` or ``b``, ``)`` or ``,``), which committed beside their neighbours make the
  inconsistent lines parallel decoding loses quality to, and less on a token that leads a long tail
  of unlikely ones (README, session 24: 15.2% at 1.74 tokens/step against p1's 14.7% at 1.73).
  Scores (``confidences``) stay p1 either way: the selectivity thresholds were tuned on them.
- Temporal stability (``JointRule.stable``): a masked position whose token is the one it was
  predicted at the previous step, from a canvas that has since changed, is committed when its
  certainty clears ``stable``, beside the bound's set. Wang et al. 2025 ("Time is a feature") vote
  over whole answers across steps; here agreement across steps is a per-token commit criterion.
  Two agreeing predictions from different contexts are evidence a single
  marginal is not: the bound stays tight for tokens seen once, and a token that survived its
  neighbours' commits joins without spending the budget (README, session 25: 15.1% at 1.90
  tokens/step against the bound alone's 15.2% at 1.74 and 14.1% at 1.91; session 26: with any
  repeat committed, 14.3% at 2.07 against the p1 bound's 13.5% at 2.05).
- One copy at a time (``JointRule.one_copy``): of two adjacent undecided positions predicting the
  same token, a step commits the more certain; each may be placing the one token the line needs
  (``return 'No''``). A true double commits later (docs/model-history.md, session 40).
- Step budget (``StepBudget``): a wrapper that gives any rule at most so many steps per block and
  commits everything still masked at the last one (each row its own budget, so one batch can hold
  budgeted one-line requests beside unbudgeted ones). A loose rule spends its last steps of a
  one-line answer on a few uncertain tokens, one at a time; by the budget's last step the rest of
  the line is written around them, and committing them together costs little (README, session 34).
- Cache policy (``CachePolicy``, model/cache.py): ``ContextCache`` runs the context once and reuses
  its keys/values at every step (exact: the context never attends to the canvas); ``NoCache`` is the
  reference that recomputes everything.
- Lookahead (``lookahead``, model/lookahead.py): a call may verify guessed future steps of a rule
  that reads only the current step; it hands back a run of sub-steps, applied one at a time.
- End-of-text: once a row commits ``<|endoftext|>`` at position j, positions after j are set to
  end-of-text (training pads every answer with end-of-text to the canvas end, so nothing else can
  follow), and the row is finished: decoding stops early when every row is finished.
- Implied end-of-text is not a decision: training pads every answer with end-of-text to the canvas
  end, so a predicted end-of-text right after another undecided predicted end-of-text follows from
  it. Such positions enter the unmasking rule with confidence 0 (``informative``); the rule then
  spends a step on the run's first end-of-text (which fills the tail) or on a real token, never on
  the canvas's last position, the most confident and least informative end-of-text. This only
  reorders commits; committed tokens are still each position's own prediction.
- Stop hook (``done``): a caller may end a row early, e.g. once the committed start of its answer
  holds a stop sequence (model/api.py). Such a row's undecided positions become end-of-text, exactly
  as after a committed end-of-text, so one rule ends a row whichever way it finished, or once it can
  no longer beat another row of its request (model/ensemble.py). The sampler knows nothing
  of text or requests; the hook sees only tokens and their confidences.
- Draft hook (``draft``): a ``canvas_draft`` model gets, before every step, the region token each
  canvas position would copy, aligned on what each row has committed so far (model/draft.py).
- Only rows with something left to decide are computed: a row that has ended (end-of-text, a stop
  sequence, outscored) or has nothing masked left in the active block commits nothing this step, so
  the step runs on the others alone (``CachePolicy.rows``; the context cache is cut to them). A
  one-line request's two ensemble rows rarely end together, and neither do a batch's requests, so
  this saves compute while every row decodes exactly as before.
- Per-row canvases (``canvas_lens``): a batch decodes rows whose canvases differ in length (a short
  rewrite beside a long one, a 48-token line beside a 64-token block) on one canvas of the longest
  length. A shorter row's extra positions start committed as end-of-text and no position attends to
  them (a key mask), so every row decodes as it would alone: the canvas length is part of the
  question (training pads each answer to a random canvas length, so a longer canvas is a prior
  toward a longer answer), and a suggestion must not depend on which requests it shared a batch with.
- Committed tokens are never re-masked or changed; the mask token and layout tags are never proposed.
- Pure with respect to randomness: sampling (temperature > 0) draws only from the explicit
  ``torch.Generator``; greedy decoding draws nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol

import torch

from model import ops
from model.cache import CachePolicy, ContextCache
from model.transformer import Transformer

if TYPE_CHECKING:  # model/lookahead.py builds on this module's helpers
    from model.drafter import Drafter
    from model.lookahead import Guess, Lookahead


# ---- unmasking rules ---------------------------------------------------------------------------
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
    """``inner``'s commits, and at a row's last budgeted step of a block every position still masked
    there: a block takes at most ``steps[b]`` steps in row b (inf: no budget; [B]).

    LLaDA decodes a block in a fixed number of steps (Nie et al. 2025, Alg. 2); here the inner rule
    decides while the budget lasts, so a confident answer still ends sooner, and the last step
    commits each remaining position's own prediction (README, session 34: 3 steps at ``low`` and
    ``instant`` passed as many tasks at 5% more tokens per step; at ``medium`` 5 cost real code)."""

    inner: UnmaskRule
    steps: torch.Tensor  # [B] float: steps a block may take in each row

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
        last = (step + 1 >= self.steps)[:, None]  # [B, 1]
        return self.inner.select(conf, active, repeated, step, tok) | (active & last)


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


# ---- the loop ----------------------------------------------------------------------------------
def _drafts(
    draft: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    idx: torch.Tensor,  # [R] batch row of each canvas
    can: torch.Tensor,  # [R, N]
    fix: torch.Tensor,  # [R, N]
    canvas: torch.Tensor,  # [B, N] the batch, for rows ``idx`` leaves out
    fixed: torch.Tensor,  # [B, N]
) -> torch.Tensor:
    """The draft hook's tokens [R, N] for canvases that are states of batch rows ``idx`` (a row may
    appear several times: lookahead's variants); the hook reads row b as batch row b, so each call
    holds at most one state per row."""
    out = torch.empty_like(can)
    order = torch.argsort(idx, stable=True)
    first = torch.searchsorted(idx[order], idx[order])  # [R] first slot of each sorted row
    occ = torch.empty_like(idx)
    occ[order] = torch.arange(len(idx), device=idx.device) - first  # [R] how often the row came before
    for o in range(int(occ.max()) + 1 if len(idx) else 0):
        r = (occ == o).nonzero().squeeze(1)
        full_c, full_f = canvas.clone(), fixed.clone()
        full_c[idx[r]], full_f[idx[r]] = can[r], fix[r]
        out[r] = draft(full_c, full_f)[idx[r]]
    return out


@dataclass
class SampleResult:
    tokens: torch.Tensor  # [B, N]; end-of-text after each row's answer
    confidences: torch.Tensor  # [B, N]; probability of each token when it was committed
    lengths: torch.Tensor  # [B]; tokens before the first end-of-text
    steps: int  # denoising steps (model calls over the canvas)
    model_calls: int  # steps plus the context pass
    finished: torch.Tensor  # [B] bool; True when the row reached end-of-text
    cancelled: bool = False
    canvases: list[torch.Tensor] = field(default_factory=list)  # every intermediate canvas, if recorded
    row_steps: int = 0  # canvas rows the steps computed (a step computes each undecided row, or its variants)


def choose_tokens(
    logits: torch.Tensor,  # [B, n, V]
    temperature: float,
    top_p: float,
    generator: torch.Generator | None,
    penalty: torch.Tensor | None = None,  # [B, V] subtracted from logits
    want_margin: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Token, its probability and (if asked) the top-2 margin p1 - p2 per position [B, n]: greedy
    (argmax, softmax max) or tempered top-p sampling (the margin of the tempered distribution)."""
    B, n, V = logits.shape
    if temperature <= 0 or top_p >= 1.0:
        # argmax or tempered sampling without a top-p cut: one pass over V, penalty applied on read
        return ops.token_confidence(logits, penalty, temperature, generator, want_margin)
    logits = logits.float()
    if penalty is not None:
        logits = logits - penalty[:, None, :]
    probs = torch.softmax(logits / temperature, dim=-1)  # [B, n, V]
    margin = None
    if want_margin:
        two = probs.topk(min(2, V), dim=-1).values  # [B, n, 2]
        margin = two[..., 0] - (two[..., 1] if V > 1 else 0.0)
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        keep = sorted_p.cumsum(-1) - sorted_p < top_p
        keep[..., 0] = True  # the top token always stays, however small top_p is
        sorted_p = sorted_p * keep
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
        probs = probs / probs.sum(-1, keepdim=True)
    tok = torch.multinomial(probs.view(B * n, V), 1, generator=generator).view(B, n)
    return tok, probs.gather(-1, tok[..., None]).squeeze(-1), margin


@torch.no_grad()
def denoise(
    model: Transformer,
    context: torch.Tensor,  # [B, Lc] right-padded
    context_lens: torch.Tensor,  # [B]
    canvas_len: int,
    *,
    mask_id: int,
    eot_id: int,
    block_size: int = 32,
    rule: UnmaskRule = ThresholdRule(0.9),
    cache: CachePolicy | None = None,
    temperature: float = 0.0,
    top_p: float = 1.0,
    presence_penalty: float = 0.0,
    suppress_ids: list[int] | None = None,
    generator: torch.Generator | None = None,
    record: bool = False,
    on_step: Callable[[torch.Tensor], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    done: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    canvas_pos: torch.Tensor | None = None,  # [B] rotary position of the canvas start (see transformer)
    draft: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    canvas_lens: torch.Tensor | None = None,  # [B] each row's canvas, at most canvas_len (default: all)
    lookahead: Lookahead | None = None,  # verify guessed future steps of ``rule`` (model/lookahead.py)
    drafter: Drafter | None = None,  # lookahead's guesses re-predicted after each guess (model/drafter.py)
) -> SampleResult:
    """Decode ``canvas_len`` tokens after each row's context (``canvas_lens[b]`` for row b).

    ``done(canvas [B, N], fixed [B, N], conf [B, N]) -> [B] bool`` is asked after every step
    (``conf``: each committed token's probability, 1 at filled end-of-text); rows it marks end there
    (their undecided positions become end-of-text). ``draft(canvas [B, N], fixed [B, N]) ->
    [B, N]`` gives a ``canvas_draft`` model its draft tokens (-1 = none) before every step (model/draft.py).
    """
    cache = cache or ContextCache()
    B, N, dev = context.shape[0], canvas_len, context.device
    V = model.cfg.vocab_size
    pos = torch.arange(N, device=dev)
    real = torch.ones((B, N), dtype=torch.bool, device=dev)  # [B, N] positions of each row's canvas
    if canvas_lens is not None:
        if bool((canvas_lens > N).any()) or bool((canvas_lens < 1).any()):
            raise ValueError(f"canvas_lens must lie in [1, {N}]")
        real = pos[None, :] < canvas_lens[:, None]
    # a shorter row's padding starts as committed end-of-text (nothing to decide there)
    canvas = torch.where(real, mask_id, eot_id)  # [B, N]
    fixed = ~real
    conf_out = (~real).float()
    state = cache.prepare(model, context, context_lens, canvas_pos, canvas_lens)
    sub, sub_rows = state, None  # the state of the rows a step computes (sub_rows [b]; None: all)
    steps, row_steps, canvases, cancelled = 0, 0, [], False
    prev = torch.full((B, N), -1, dtype=torch.long, device=dev)  # [B, N] last step's prediction; -1: none
    # never propose the mask token or layout tags: [V] additive bias, -inf on suppressed ids
    bias = torch.zeros(V, device=dev)
    bias[[mask_id, *(suppress_ids or [])]] = float("-inf")
    if lookahead is not None:
        lookahead.check(rule, temperature)
    if drafter is not None and lookahead is None:
        raise ValueError("a drafter only re-predicts lookahead's guesses: it needs lookahead")

    def penalty_of(idx: torch.Tensor, can: torch.Tensor, fix: torch.Tensor) -> torch.Tensor:
        """[R, V] what each canvas's logits lose: the suppressed ids, and the presence penalty."""
        penalty = -bias.expand(len(idx), V)
        if presence_penalty:
            seen = torch.zeros((len(idx), V), device=dev)
            seen.scatter_(1, torch.where(fix, can, eot_id), 1.0)  # tokens already committed
            seen[:, eot_id] = 0.0
            penalty = penalty + seen * presence_penalty
        return penalty

    def read(logits: torch.Tensor, act: torch.Tensor, penalty: torch.Tensor) -> tuple:
        """Token, confidence, certainty, runner-up token and its probability (None unless lookahead
        needs them) [R, n] from the logits [M, V] of the positions ``act`` [R, n] marks."""
        pen = penalty[act.nonzero()[:, 0]]  # [M, V] each position's row's penalty
        # [M, 1] each
        tok_m, conf_m, margin_m = choose_tokens(
            logits[:, None, :], temperature, top_p, generator, pen, rule.uses_margin
        )

        def back(x: torch.Tensor, fill: float) -> torch.Tensor:  # [M] -> [R, n]
            return torch.full(act.shape, fill, dtype=x.dtype, device=dev).masked_scatter_(act, x)

        tok, conf = back(tok_m[:, 0], eot_id), back(conf_m[:, 0], 0.0)
        cert = conf if margin_m is None else back(margin_m[:, 0].to(conf.dtype), 0.0)
        alt_tok = alt_p = None
        if lookahead is not None and lookahead.runner_up:
            lf = logits.float() - pen  # [M, V]
            two_l, two_i = lf.topk(2, dim=-1)  # [M, 2]
            alt_tok = back(two_i[:, 1], eot_id)
            alt_p = back(torch.exp(two_l[:, 1] - torch.logsumexp(lf, dim=-1)).to(conf.dtype), 0.0)
        return tok, conf, cert, alt_tok, alt_p

    def predict(
        idx: torch.Tensor, can: torch.Tensor, fix: torch.Tensor, st: object = None, span: slice | None = None
    ) -> tuple:
        """``read``'s five [R, n] at the active block (or ``span``) of canvases ``can``, ``fix``
        [R, N], row r a state of batch row ``idx[r]``, and for lookahead's drafter the block's final
        hidden states [R, n, dim] (else None); ``st``: the cache state of those rows (None: cut here)."""
        st = cache.rows(state, idx) if st is None else st
        sp = blk if span is None else span
        act = ~fix[:, sp]  # [R, n]
        drafts = None if draft is None else _drafts(draft, idx, can, fix, canvas, fixed)
        # only still-masked positions are projected onto the vocabulary: [M, V], M = act.sum()
        if drafter is None:
            logits, hid = cache.logits(model, st, can, sp, drafts, act), None
        else:
            logits, hid = cache.logits(model, st, can, sp, drafts, act, hidden=True)
        return (*read(logits, act, penalty_of(idx, can, fix)), hid)

    def redraft(
        idx: torch.Tensor, can: torch.Tensor, fix: torch.Tensor, hid: torch.Tensor, new: torch.Tensor
    ):
        """``read``'s five [R, n] at the active block of ``can``, ``fix`` [R, N] as the drafter
        predicts them from a call's hidden states ``hid`` [R, n, dim] and the tokens committed or
        guessed since, ``new`` [R, n] (model/drafter.py)."""
        assert drafter is not None
        act = ~fix[:, blk]  # [R, n]
        x = drafter(hid, model.embed(can[:, blk]), new)  # [R, n, dim]
        return read(model.logits(x[act]), act, penalty_of(idx, can, fix))

    def select(tok: torch.Tensor, cert: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return rule.select(informative(tok, cert, act, eot_id), act, None, 0, tok)

    guess: Guess | None = None  # lookahead's guesses in the block (None: none yet)
    for start in range(0, N, block_size):
        blk = slice(start, min(N, start + block_size))
        nxt = slice(blk.stop, min(N, blk.stop + block_size)) if blk.stop < N else None
        k = 0  # steps this block has taken
        if lookahead is not None:  # the first guesses from the last block's look at this one
            guess = lookahead.carry(guess, select, fixed, blk, eot_id)
        while True:
            active = ~fixed[:, blk]  # [B, n]
            if not bool(active.any()):
                break
            if should_stop is not None and should_stop():
                cancelled = True
                break
            if lookahead is not None:
                plan, guess, R = lookahead.step(
                    predict, select, canvas, fixed, blk, guess, eot_id, nxt, redraft if drafter else None
                )
                row_steps += R
            else:
                # a row with nothing masked in this block commits nothing: compute the others alone
                live = active.any(dim=1)  # [B]
                rows = None if bool(live.all()) else live.nonzero().squeeze(1)  # [b]
                if rows is None:
                    sub, sub_rows = state, None
                elif sub_rows is None or not bool(torch.isin(rows, sub_rows).all()):
                    sub, sub_rows = cache.rows(state, rows), rows
                elif len(rows) < len(sub_rows):  # fewer rows than last step: cut the smaller state
                    sub, sub_rows = cache.rows(sub, torch.searchsorted(sub_rows, rows)), rows
                idx = torch.arange(B, device=dev) if rows is None else rows
                row_steps += len(idx)
                tok_b, conf_b, cert_b, _, _, _ = predict(idx, canvas[idx], fixed[idx], sub)  # [b, n] each
                # back to [B, n]: rows left out have nothing active
                tok = torch.full_like(active, eot_id, dtype=tok_b.dtype).index_copy_(0, idx, tok_b)
                conf = torch.zeros_like(active, dtype=conf_b.dtype).index_copy_(0, idx, conf_b)
                cert = torch.zeros_like(conf).index_copy_(0, idx, cert_b)
                repeated = (tok == prev[:, blk]) & active  # [B, n] predicted the same twice running
                cert = informative(tok, cert, active, eot_id)
                commit = rule.select(cert, active, repeated, k, tok)  # [B, n]
                prev[:, blk] = torch.where(active & ~commit, tok, -1)
                plan = [(commit, tok, conf)]
            steps += 1
            k += 1
            for commit, tok, conf in plan:  # one sub-step, or lookahead's verified run of them
                commit = commit & ~fixed[:, blk]  # a row the stop hook ended takes no more
                canvas[:, blk] = torch.where(commit, tok, canvas[:, blk])
                conf_out[:, blk] = torch.where(commit, conf, conf_out[:, blk])
                fixed[:, blk] |= commit
                if done is not None:
                    ended = done(canvas, fixed, conf_out) & ~fixed.all(dim=1)  # [B]
                    if bool(ended.any()):
                        fill = ended[:, None] & ~fixed  # [B, N]
                        canvas[fill], conf_out[fill] = eot_id, 1.0
                        fixed |= ended[:, None]
                conf_out[fill_after_eot(canvas, fixed, eot_id)] = 1.0
            if record:
                canvases.append(canvas.clone())
            if on_step is not None:
                on_step(canvas)
        if cancelled or bool(fixed.all()):  # every row ended (its end-of-text fills the rest)
            break
    is_eot = fixed & (canvas == eot_id)
    lengths = first_true(is_eot)  # [B]
    finished = (is_eot & real).any(dim=1)  # end-of-text inside the row's own canvas, not its padding
    return SampleResult(canvas, conf_out, lengths, steps, steps + 1, finished, cancelled, canvases, row_steps)
