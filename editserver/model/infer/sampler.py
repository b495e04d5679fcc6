"""The one denoising loop: a canvas of masks refined in parallel steps, as a decode plan says.

The reverse process of masked diffusion starts from a canvas of ``<|mask|>`` tokens and, at every
step, predicts all masked tokens at once, keeping (unmasking) some of them (LLaDA, Nie et al. 2025,
Alg. 2 with low-confidence remasking). Design decisions:
- Everything variable is a piece of the plan (model/infer/plan.py): the unmasking rule
  (model/infer/rules.py), the cache policy (model/infer/cache.py), the block size, sampling. The loop
  never branches on the model family or on the request kind.
- ``step`` is one model call and one rule decision; ``denoise`` runs blocks of steps and applies them.
  Callers observe it through ``Hooks``: ``observe`` sees the canvas after every step (streaming,
  recording), ``done`` ends rows early (a stop sequence in the committed text, an ensemble row that can
  no longer win), ``draft`` gives a ``canvas_draft`` model its region tokens, ``should_stop`` cancels.
- Semi-autoregressive blocks: the canvas is decoded block by block, left to right; inside a block
  tokens are unmasked in parallel. Later blocks stay masked while an earlier one is decoded.
- The canvas grows: it starts ``first_width`` positions wide (each row at most its own canvas length)
  and gains a block of masks only when a block is done and some row has neither ended nor reached its
  own length. A two-token answer costs the same whatever ``max_tokens`` the client sent.
- End-of-text: once a row commits ``<|endoftext|>`` at position j, positions after j become
  end-of-text (training pads every answer with end-of-text to the canvas end) and the row is finished.
  A row ended by the ``done`` hook is filled the same way, so one rule ends a row however it finished.
- Per-row canvases (``Rows.canvas_lens``): rows whose canvases differ in length decode on one canvas
  of the longest; a shorter row's extra positions start committed as end-of-text and no position
  attends to them (a key mask), so every row decodes as it would alone: the canvas length is a length
  prior, and a suggestion must not depend on which requests it shared a batch with.
- Only rows with something left to decide are computed: the cache state is cut to them.
- Committed tokens are never re-masked or changed; the mask token and layout tags are never proposed.
- Pure with respect to randomness: sampling (temperature > 0) draws only from the explicit
  ``torch.Generator``; greedy decoding draws nothing. Stats come back with the tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from editserver.model.infer import ops
from editserver.model.infer.cache import Rows
from editserver.model.infer.plan import DecodePlan, Sampling
from editserver.model.infer.rules import fill_after_eot, first_true, informative


@dataclass
class Hooks:
    """How a caller watches and steers a decode; every hook is optional."""

    observe: Callable[[torch.Tensor], None] | None = None  # canvas [B, N] after each step
    # (canvas [B, N], fixed [B, N], conf [B, N]) -> [B] bool: rows to end now
    done: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    # (canvas [B, N], fixed [B, N]) -> [B, N] region token per position (-1: none)
    draft: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    should_stop: Callable[[], bool] | None = None


@dataclass(frozen=True)
class Tokens:
    mask_id: int
    eot_id: int
    suppress_ids: tuple[int, ...] = ()  # never proposed (layout tags)


@dataclass
class SampleResult:
    tokens: torch.Tensor  # [B, N]; end-of-text after each row's answer
    confidences: torch.Tensor  # [B, N]; probability of each token when it was committed
    lengths: torch.Tensor  # [B]; tokens before the first end-of-text
    steps: int  # denoising steps (model calls over the canvas)
    model_calls: int  # steps plus context passes
    finished: torch.Tensor  # [B] bool; True when the row reached end-of-text
    cancelled: bool = False
    row_steps: int = 0  # canvas rows the steps computed
    width: int = 0  # how wide the canvas grew


@dataclass
class Canvas:
    """The loop's state: every position's token, whether it is committed, and its confidence."""

    tokens: torch.Tensor  # [B, N]
    fixed: torch.Tensor  # [B, N] bool
    conf: torch.Tensor  # [B, N] probability when committed (1 where filled with end-of-text)
    prev: torch.Tensor  # [B, N] last step's prediction at still-masked positions; -1: none
    real: torch.Tensor  # [B, N] bool: positions of each row's own canvas


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


def _penalty(plan: DecodePlan, bias: torch.Tensor, c: Canvas, idx: torch.Tensor, eot_id: int) -> torch.Tensor:
    """[b, V] what each computed row's logits lose: the suppressed ids, and the presence penalty."""
    V = bias.shape[0]
    penalty = -bias.expand(len(idx), V)
    if plan.sampling.presence_penalty:
        seen = torch.zeros((len(idx), V), device=bias.device)
        seen.scatter_(1, torch.where(c.fixed[idx], c.tokens[idx], eot_id), 1.0)  # committed tokens
        seen[:, eot_id] = 0.0
        penalty = penalty + seen * plan.sampling.presence_penalty
    return penalty


def step(
    model: torch.nn.Module,
    plan: DecodePlan,
    state: object,
    c: Canvas,
    idx: torch.Tensor,  # [b] the rows computed (the others have nothing masked in the block)
    blk: slice,
    width: int,  # positions of the canvas in use
    k: int,  # steps this block has taken
    bias: torch.Tensor,  # [V] -inf on ids never proposed
    tokens: Tokens,
    generator: torch.Generator | None,
    hooks: Hooks,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One model call on rows ``idx`` and the rule's decision: (commit, token, confidence) [B, n]."""
    active = ~c.fixed[:, blk]  # [B, n]
    act = active[idx]  # [b, n]
    draft = None if hooks.draft is None else hooks.draft(c.tokens, c.fixed)[idx, :width]  # [b, W]
    # only still-masked positions are projected onto the vocabulary: [M, V], M = act.sum()
    logits = plan.cache.logits(model, state, c.tokens[idx, :width], blk, draft, act)
    pen = _penalty(plan, bias, c, idx, tokens.eot_id)[act.nonzero()[:, 0]]  # [M, V]
    tok_m, conf_m, margin_m = choose_tokens(
        logits[:, None, :], plan.sampling, generator, pen, plan.rule.uses_margin
    )  # [M, 1] each

    def back(x: torch.Tensor, fill: float) -> torch.Tensor:  # [M] -> [B, n]; rows left out stay ``fill``
        full = torch.full(active.shape, fill, dtype=x.dtype, device=x.device)
        full[idx] = torch.full(act.shape, fill, dtype=x.dtype, device=x.device).masked_scatter_(act, x)
        return full

    tok, conf = back(tok_m[:, 0], tokens.eot_id), back(conf_m[:, 0], 0.0)
    cert = conf if margin_m is None else back(margin_m[:, 0].to(conf.dtype), 0.0)
    repeated = (tok == c.prev[:, blk]) & active  # [B, n] predicted the same twice running
    if getattr(plan.rule, "uses_entropy", False):  # Dream's published order: certainty -H(p)
        p = torch.softmax(logits.float() - pen, dim=-1)  # [M, V]; suppressed ids: 0
        neg_entropy = (p * torch.log(p + 1e-10)).sum(-1)  # [M], Dream's sum p log(p + eps)
        cert = back(neg_entropy, float("-inf"))
    else:
        cert = informative(tok, cert, active, tokens.eot_id)
    commit = plan.rule.select(cert, active, repeated, k, tok)  # [B, n]
    c.prev[:, blk] = torch.where(active & ~commit, tok, -1)
    return commit & active, tok, conf


def _apply(
    c: Canvas, blk: slice, commit: torch.Tensor, tok: torch.Tensor, conf: torch.Tensor, hooks: Hooks, eot: int
):
    """Commit a step's tokens, end the rows ``hooks.done`` names, fill after end-of-text."""
    c.tokens[:, blk] = torch.where(commit, tok, c.tokens[:, blk])
    c.conf[:, blk] = torch.where(commit, conf, c.conf[:, blk])
    c.fixed[:, blk] |= commit
    if hooks.done is not None:
        ended = hooks.done(c.tokens, c.fixed, c.conf) & ~c.fixed.all(dim=1)  # [B]
        if bool(ended.any()):
            fill = ended[:, None] & ~c.fixed  # [B, N]
            c.tokens[fill], c.conf[fill] = eot, 1.0
            c.fixed |= ended[:, None]
    c.conf[fill_after_eot(c.tokens, c.fixed, eot)] = 1.0


def _new_canvas(rows: Rows, N: int, width: int, tokens: Tokens, dev: torch.device) -> Canvas:
    B = rows.context.shape[0]
    lens = torch.full((B,), N, device=dev) if rows.canvas_lens is None else rows.canvas_lens
    if bool((lens > N).any()) or bool((lens < 1).any()):
        raise ValueError(f"canvas_lens must lie in [1, {N}]")
    real = torch.arange(N, device=dev)[None, :] < lens[:, None]  # [B, N]
    # a shorter row's padding starts as committed end-of-text (nothing to decide there)
    tokens_ = torch.where(real, tokens.mask_id, tokens.eot_id)
    prev = torch.full((B, N), -1, dtype=torch.long, device=dev)
    return Canvas(tokens_, ~real, (~real).float(), prev, real)


@torch.no_grad()
def denoise(
    model: torch.nn.Module,
    rows: Rows,
    canvas_len: int,
    plan: DecodePlan,
    tokens: Tokens,
    *,
    first_width: int | None = None,  # the canvas's first width (None: all of it at once)
    generator: torch.Generator | None = None,
    hooks: Hooks | None = None,
) -> SampleResult:
    """Decode up to ``canvas_len`` tokens per row (``rows.canvas_lens[b]`` for row b) as ``plan`` says."""
    hooks = hooks or Hooks()
    dev, N = rows.context.device, canvas_len
    B, V = rows.context.shape[0], model.cfg.vocab_size
    c = _new_canvas(rows, N, N, tokens, dev)
    lens = c.real.sum(dim=1)  # [B]
    width = N if first_width is None else max(1, min(N, first_width))
    state = plan.cache.prepare(model, rows.with_canvas_lens(lens.clamp_max(width)))
    bias = torch.zeros(V, device=dev)
    bias[[tokens.mask_id, *tokens.suppress_ids]] = float("-inf")
    steps = row_steps = calls = 0
    cancelled, start = False, 0
    sub, sub_rows = state, torch.arange(B, device=dev)  # the state of the rows a step computes
    while start < N and not cancelled:
        if start >= width:  # grow by a block for the rows still writing
            width = min(N, width + plan.block_size)
            state = plan.cache.prepare(model, rows.with_canvas_lens(lens.clamp_max(width)))
            sub, sub_rows, calls = state, torch.arange(B, device=dev), calls + 1
        blk = slice(start, min(width, start + plan.block_size))
        k = 0
        while bool((active := ~c.fixed[:, blk]).any()):
            if hooks.should_stop is not None and hooks.should_stop():
                cancelled = True
                break
            live = active.any(dim=1).nonzero().squeeze(1)  # [b] rows with something to decide
            if not bool(torch.isin(live, sub_rows).all()):  # a row back in play: cut the full state
                sub, sub_rows = (state, live) if len(live) == B else (plan.cache.rows(state, live), live)
            elif len(live) < len(sub_rows):  # fewer rows than last step: cut the smaller state
                sub, sub_rows = plan.cache.rows(sub, torch.searchsorted(sub_rows, live)), live
            commit, tok, conf = step(
                model, plan, sub, c, sub_rows, blk, width, k, bias, tokens, generator, hooks
            )
            _apply(c, blk, commit, tok, conf, hooks, tokens.eot_id)
            steps, k, row_steps = steps + 1, k + 1, row_steps + len(sub_rows)
            if hooks.observe is not None:
                hooks.observe(c.tokens)
        start = blk.stop
        if bool(c.fixed.all()):  # every row ended (its end-of-text fills the rest)
            break
    is_eot = c.fixed & (c.tokens == tokens.eot_id)
    lengths = first_true(is_eot)  # [B]
    finished = (is_eot & c.real).any(dim=1)  # end-of-text inside the row's own canvas, not its padding
    return SampleResult(
        c.tokens, c.conf, lengths, steps, steps + calls + 1, finished, cancelled, row_steps, width
    )
