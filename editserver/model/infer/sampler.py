"""The one denoising loop: a canvas of masks refined in parallel steps, as a decode plan says.

The reverse process of masked diffusion starts from a canvas of ``<|mask|>`` tokens and, at every
step, predicts all masked tokens at once, keeping (unmasking) some of them (LLaDA, Nie et al. 2025,
Alg. 2 with low-confidence remasking). Design decisions:
- Everything variable is a piece of the plan (model/infer/plan.py): the unmasking rule
  (model/infer/unmasking.py), the cache policy (model/infer/cache.py), the block size, sampling. The loop
  never branches on the model family or on the request kind.
- ``step`` is one model call and one rule decision; ``Decode.run`` runs blocks of steps and applies
  them (``denoise`` is a decode of one caller). This module is the loop only: what it takes and gives
  (a caller's ``Member`` and its ``Hooks``, ``Tokens``, ``SampleResult``) and its state (``Canvas``)
  are plain data in model/infer/loop_types.py, which says what each hook may do.
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
- Joining and leaving (``Decode``): a caller's rows (a ``Member``) may join a running decode at a block
  boundary, on canvas positions from that block on (``Rows.canvas_from``: key-masked and rotary-
  shifted on the own transformer, left out of the sequence on in-place families), with the rule's
  per-block step counter at 0 as at its own first block; its hooks see only its own slice, and it
  gets its result the moment its rows are all committed. Every row keeps its own width in use and
  grows it as it would alone, so a joined row decodes exactly as alone, provided the blocks line up
  (``join`` refuses a member whose block boundaries would not). Greedy decoding only, for the
  scheduler (server/scheduler.py): with sampling, rows share the generator's draws.
- Only rows with something left to decide are computed: the cache state is cut to them.
- Canvas edits (``plan.edit``, model/infer/canvas_edit.py): a family whose model chooses its answer's
  length reshapes each row's canvas after a step's commits (DreamOn: an expand becomes two masks, a
  committed end-of-text in the gap is removed), before the ``done`` hook and the end-of-text fill read
  it. The block's end follows the widths, and a width that changed re-prepares the cache state:
  positions after the change moved, so every key/value is recomputed at the next step (a
  ``DualCache`` refresh; its prefix could be kept, but its values read the old canvas too).
- Committed tokens are never re-masked or changed, except by a canvas edit or a plan's token editing
  (``plan.revise``, model/infer/token_edit.py: LLaDA2.1 rewrites written tokens of the current block,
  and a full block takes steps while they change it); the mask token and layout tags are never
  proposed. A member's ``lead`` starts its canvas inside a block (block diffusion).
- The choice of tokens from logits (greedy or tempered top-p) and what a row's logits lose first are
  model/infer/choose.py's.
- Pure with respect to randomness: sampling (temperature > 0) draws only from the explicit
  ``torch.Generator``; greedy decoding draws nothing. Stats come back with the tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from editserver.model.infer.cache import Rows
from editserver.model.infer.choose import choose_tokens, penalty
from editserver.model.infer.loop_types import Canvas, Hooks, Member, SampleResult, Tokens
from editserver.model.infer.plan import DecodePlan
from editserver.model.infer.unmasking import fill_after_eot, first_true, informative


def step(
    model: torch.nn.Module,
    plan: DecodePlan,
    state: object,
    c: Canvas,
    idx: torch.Tensor,  # [b] the rows computed (the others have nothing masked in the block)
    blk: slice,
    width: int,  # positions of the canvas in use
    k: int,  # steps this block has taken
    bias: torch.Tensor,  # [V] (or [B, V] per row) -inf on ids never proposed
    tokens: Tokens,
    generator: torch.Generator | None,
    hooks: Hooks,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One model call on rows ``idx`` and the decisions: (commit, rewrite, token, confidence) [B, n];
    ``rewrite``: written tokens the plan's token editing changes (model/infer/token_edit.py)."""
    active = ~c.fixed[:, blk]  # [B, n]
    editable = torch.zeros_like(active)  # [B, n] written tokens the plan may rewrite
    if plan.revise is not None:
        editable[idx] = plan.revise.editable(c.tokens, c.fixed, c.real, blk, tokens.eot_id)[idx]
    want = active | editable  # [B, n]
    act = want[idx]  # [b, n]
    draft = None if hooks.draft is None else hooks.draft(c.tokens, c.fixed)[idx, :width]  # [b, W]
    # only the positions decided on are projected onto the vocabulary: [M, V], M = act.sum()
    logits = plan.cache.logits(model, state, c.tokens[idx, :width], blk, draft, act)
    pen = penalty(plan, bias, c, idx, tokens.eot_id)[act.nonzero()[:, 0]]  # [M, V]
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
    rewrite = editable  # all False without token editing
    if plan.revise is not None:
        rewrite = plan.revise.select(tok, conf, c.tokens[:, blk], editable)  # [B, n]
    return commit & active, rewrite, tok, conf


def _apply(
    c: Canvas,
    blk: slice,
    commit: torch.Tensor,
    tok: torch.Tensor,
    conf: torch.Tensor,
    hooks: Hooks,
    eot: int,
    edit: Callable[[torch.Tensor], None] | None = None,
    rewrite: torch.Tensor | None = None,
):
    """Commit a step's tokens, rewrite the written ones ``rewrite`` [B, n] names, reshape the canvas
    (``edit`` of the commits [B, N]), end the rows ``hooks.done`` names, fill after end-of-text."""
    write = commit if rewrite is None else commit | rewrite  # [B, n]
    c.tokens[:, blk] = torch.where(write, tok, c.tokens[:, blk])
    c.conf[:, blk] = torch.where(write, conf, c.conf[:, blk])
    c.fixed[:, blk] |= commit
    if edit is not None:
        committed = torch.zeros_like(c.fixed)  # [B, N]
        committed[:, blk] = commit
        edit(committed)
    if hooks.done is not None:
        ended = hooks.done(c.tokens, c.fixed, c.conf) & ~c.fixed.all(dim=1)  # [B]
        if bool(ended.any()):
            fill = ended[:, None] & ~c.fixed  # [B, N]
            c.tokens[fill], c.conf[fill] = eot, 1.0
            c.fixed |= ended[:, None]
    c.conf[fill_after_eot(c.tokens, c.fixed, eot)] = 1.0


def _pad_columns(c: Canvas, n: int, mask_id: int) -> Canvas:
    """``c`` with ``n`` more positions per row, outside every row's canvas (committed, never read)."""
    B, dev = c.tokens.shape[0], c.tokens.device

    def more(x: torch.Tensor, fill) -> torch.Tensor:
        return torch.cat([x, torch.full((B, n), fill, dtype=x.dtype, device=dev)], dim=1)

    return Canvas(*(more(x, fill) for x, fill in zip(vars(c).values(), (mask_id, True, 0.0, -1, False))))


def _rows_of(members: list[Member], dev: torch.device) -> torch.Tensor:
    """[b] the decode's row indices of ``members``' rows, in order."""
    idx = [i for m in members for i in range(m.at, m.at + m.size)]
    return torch.tensor(idx, dtype=torch.long, device=dev)


_STATE = (
    "members",
    "c",
    "off",
    "n",
    "w",
    "budget",
    "start",
    "state",
    "sub",
    "sub_rows",
)  # what a failed join restores


class Decode:
    """The denoising loop's state, run block by block; members join at block boundaries and leave
    (``on_done``) as soon as their rows are done.

    Rows sit on one canvas [B, N]. A member that joins when the decode is at block ``start`` gets
    canvas positions ``[start, start + its N)``: its block k is the decode's block at ``start`` plus
    k blocks, the rule's per-block step counter is 0 there as at its own first block, the positions
    before ``start`` are committed and outside its canvas (``Canvas.real``; ``Rows.canvas_from`` for the
    cache policy), and its hooks see its own slice. Each row keeps its own canvas width in use
    (``w``, grown as it grows alone), so a member decodes exactly as it would alone, provided its
    block boundaries line up with the running rows' (``join`` refuses it otherwise).
    """

    def __init__(self, model: torch.nn.Module, plan: DecodePlan, tokens: Tokens, generator=None):
        self.model, self.plan, self.tokens, self.generator = model, plan, tokens, generator
        self.members: list[Member] = []  # in row order; done members leave at the next re-prepare
        self.c: Canvas | None = None
        self.off = self.n = self.w = None  # [B] canvas start, canvas length, width in use (own coordinates)
        self.budget = None  # [B] expands each row may still make (``plan.edit``)
        self.start = 0  # the next block's first canvas position
        self.state = self.sub = self.sub_rows = None
        self.steps = 0
        self.running = False  # joins before ``run`` prepare once, when it starts
        self.editing = None  # [B] rows whose full block still takes token-editing steps (``_block``)
        self.hooks = Hooks(observe=self._observe, done=self._done, draft=self._draft)

    @property
    def open(self) -> list[Member]:
        """Members whose rows are still decoding."""
        return [m for m in self.members if m.result is None]

    # ---- joining -------------------------------------------------------------------------------
    @torch.no_grad()
    def join(self, m: Member) -> None:
        """Add ``m`` at the current block boundary. ValueError, leaving the decode as it was, when it
        cannot join: a canvas length out of range, block boundaries that would not line up with the
        running rows' (a member decodes as alone only on its own block boundaries), or rows the cache
        policy cannot hold beside the others."""
        dev, b = m.rows.context.device, self.plan.block_size
        N = m.canvas_len
        lens = torch.full((m.size,), N, device=dev) if m.rows.canvas_lens is None else m.rows.canvas_lens
        if bool((lens > N).any()) or bool((lens < 1).any()):
            raise ValueError(f"canvas_lens must lie in [1, {N}]")
        w0 = lens if m.first_width is None else lens.clamp_max(max(1, m.first_width))
        keep = self.open
        if self.start > 0 and keep:
            idx = _rows_of(keep, dev)
            o, w, n = self.off[idx], self.w[idx], self.n[idx]
            aligned = bool((((self.start - o) % b == 0) & ((w >= n) | (w % b == 0))).all())
            if not aligned or not bool(((w0 >= lens) | (w0 % b == 0)).all()):
                raise ValueError("the running decode's block boundaries do not line up with this request's")
        saved = {name: getattr(self, name) for name in _STATE}
        places = [(k.at, k.offset) for k in keep]
        try:
            self._rebuild(keep, m, lens, w0)
        except Exception:
            for name, value in saved.items():
                setattr(self, name, value)
            for k, (at, offset) in zip(keep, places):
                k.at, k.offset = at, offset
            raise

    def _rebuild(self, keep: list[Member], m: Member | None, lens=None, w0=None) -> None:
        """Drop done members, add ``m`` at ``start``, cut the columns no open row uses, re-prepare."""
        c = self.c
        if c is not None:
            rows = _rows_of(keep, c.tokens.device)
            c = Canvas(*(x[rows] for x in vars(c).values()))
            off, n, w, budget = self.off[rows], self.n[rows], self.w[rows], self.budget[rows]
        if m is not None:
            dev = m.rows.context.device
            N, start = m.canvas_len, self.start + m.lead  # its canvas starts ``lead`` into the block
            if c is None:
                c = Canvas(
                    *(
                        torch.zeros((0, 0), dtype=t, device=dev)
                        for t in (torch.long, torch.bool, torch.float, torch.long, torch.bool)
                    )
                )
                off = n = w = budget = torch.zeros(0, dtype=torch.long, device=dev)
            if c.tokens.shape[1] < start + N:
                c = _pad_columns(c, start + N - c.tokens.shape[1], self.tokens.mask_id)
            W = c.tokens.shape[1]
            j = torch.arange(W, device=dev)[None, :]
            real = (j >= start) & (j < start + lens[:, None])  # [b, W]
            # before its start: committed but not end-of-text; after its canvas: end-of-text padding
            tok = torch.where(
                real, self.tokens.mask_id, torch.where(j < start, self.tokens.mask_id, self.tokens.eot_id)
            )
            new = Canvas(tok, ~real, (~real & (j >= start)).float(), torch.full_like(tok, -1), real)
            more = torch.zeros_like(lens)
            if self.plan.edit is not None:  # past its first width, an edited row's canvas is filler
                self.plan.edit.open(new, start + w0, self.tokens.eot_id)
                more = self.plan.edit.budget(lens, m.rows.suffix_lens)
            c = Canvas(*(torch.cat([x, y]) for x, y in zip(vars(c).values(), vars(new).values())))
            off, n, w = (
                torch.cat([off, torch.full_like(lens, start)]),
                torch.cat([n, lens]),
                torch.cat([w, w0]),
            )
            budget = torch.cat([budget, more])
            keep = [*keep, m]
        cut = min(int(off.min()), self.start) if len(off) else 0  # columns before every open row's canvas
        cut -= cut % self.plan.block_size  # on the block grid (a ``lead`` is inside a block)
        if cut:
            c = Canvas(*(x[:, cut:] for x in vars(c).values()))
        at = 0
        for k in keep:
            k.at, k.offset, at = at, k.offset - cut if k is not m else self.start + m.lead - cut, at + k.size
        self.c, self.off, self.n, self.w, self.start = c, off - cut, n, w, self.start - cut
        self.budget = budget
        self.members = keep
        self.state = None
        if self.running:  # a failing join must fail here, before the decode goes on
            self._prepare()

    def _prepare(self) -> None:
        """The cache policy's state for the rows at their current widths (``plan.cache.prepare``)."""
        parts = Rows.cat([k.rows for k in self.members], self.tokens.eot_id)
        parts = replace(parts, canvas_lens=self.w.minimum(self.n), canvas_from=self.off)
        self.state = self.plan.cache.prepare(self.model, parts)
        self.sub, self.sub_rows = self.state, torch.arange(len(self.off), device=self.off.device)

    # ---- the loop ------------------------------------------------------------------------------
    @torch.no_grad()
    def run(self, admit: Callable[[Decode], None] | None = None) -> None:
        """Decode until every member is done; ``admit`` is called at each block boundary after the
        first (it may ``join`` members there)."""
        b = self.plan.block_size
        self.running = True
        if self.state is None and self.open:
            self._prepare()
        while self.open:
            if self.start > 0 and admit is not None:
                admit(self)
            t = self.start - self.off  # [B] each row's own position of this block
            grow = ~self.c.fixed.all(dim=1) & (t >= self.w) & (self.w < self.n)  # [B]
            if bool(grow.any()):  # a row wrote to the end of its width: a block more (module docstring)
                for m in self.open:
                    m.calls += int(bool(grow[m.at : m.at + m.size].any()))
                self.w = torch.where(grow, (self.w + b).minimum(self.n), self.w)
                self._rebuild(self.open, None)
            if self.start >= self._span()[1]:
                raise RuntimeError("no row has a block left, yet some are open")
            self._block()
            self.start = self._span()[0].stop  # where the block ended (an edit may have moved it)

    def _span(self) -> tuple[slice, int]:
        """The current block and the canvas width in use: its end follows the rows' widths, which
        only a canvas edit changes inside a block."""
        width = int((self.off + self.w.minimum(self.n)).max())
        return slice(self.start, min(width, self.start + self.plan.block_size)), width

    def _block(self) -> None:
        """Steps on the current block until every row has committed it (or left), and while token
        editing goes on in a full block (model/infer/token_edit.py)."""
        c, k, B = self.c, 0, self.c.tokens.shape[0]
        edit = None if self.plan.edit is None else self._edit
        self.editing = torch.zeros(B, dtype=torch.bool, device=c.tokens.device)  # [B] full, still editing
        post = torch.zeros(B, dtype=torch.long, device=c.tokens.device)  # [B] steps since it filled
        while bool((active := ~c.fixed[:, (blk := self._span()[0])]).any()) or bool(self.editing.any()):
            self._cancel()
            active = ~c.fixed[:, blk]
            live = (
                (active.any(dim=1) | self.editing).nonzero().squeeze(1)
            )  # [b] rows with something to decide
            if len(live) == 0:
                break
            if not bool(torch.isin(live, self.sub_rows).all()):  # a row back in play: cut the full state
                self.sub, self.sub_rows = (
                    (self.state, live) if len(live) == B else (self.plan.cache.rows(self.state, live), live)
                )
            elif len(live) < len(self.sub_rows):  # fewer rows than last step: cut the smaller state
                self.sub = self.plan.cache.rows(self.sub, torch.searchsorted(self.sub_rows, live))
                self.sub_rows = live
            post += self.editing.long()
            commit, rewrite, tok, conf = step(
                self.model,
                self.plan,
                self.sub,
                c,
                self.sub_rows,
                blk,
                self._span()[1],
                k,
                self._bias(),
                self.tokens,
                self.generator,
                self.hooks,
            )
            computed = torch.zeros(B, dtype=torch.long, device=c.tokens.device)
            computed[self.sub_rows] = 1
            _apply(c, blk, commit, tok, conf, self.hooks, self.tokens.eot_id, edit, rewrite)
            if self.plan.revise is not None:  # a full block steps on while its last step changed it
                changed = (commit | rewrite).any(dim=1) & c.fixed[:, blk].all(dim=1)  # [B]
                self.editing = self.plan.revise.goes_on(changed, post)
            k, self.steps = k + 1, self.steps + 1
            for m in self.open:
                n = int(computed[m.at : m.at + m.size].sum())
                m.steps, m.row_steps = m.steps + int(n > 0), m.row_steps + n
            self.hooks.observe(c.tokens)
            self._leave()

    def _bias(self) -> torch.Tensor:
        """[V] -inf on the ids never proposed: the mask and the layout tags; [B, V] with a canvas
        edit, which bars its own ids per row (model/infer/canvas_edit.py ``bias``)."""
        if getattr(self, "_bias_v", None) is None:
            bias = torch.zeros(self.model.cfg.vocab_size, device=self.c.tokens.device)
            bias[[self.tokens.mask_id, *self.tokens.suppress_ids]] = float("-inf")
            self._bias_v = bias
        if self.plan.edit is not None:
            return self.plan.edit.bias(self._bias_v, self.w.minimum(self.n), self.n, self.budget)
        return self._bias_v

    def _edit(self, committed: torch.Tensor) -> None:
        """The plan's canvas edit of a step's commits [B, N]; a changed width re-prepares the cache
        state (module docstring). An edited canvas is one block, so every row starts at column 0."""
        assert not bool(self.off.any()), "a canvas edit needs every row's canvas at column 0"
        width = self.w.minimum(self.n)
        w, self.budget = self.plan.edit.apply(
            self.c, committed, width, self.n, self.budget, self.tokens.mask_id, self.tokens.eot_id
        )
        if bool((w != width).any()):
            self.w = w
            self._prepare()

    # ---- members' hooks on their own slices ----------------------------------------------------
    def _view(self, m: Member, x: torch.Tensor) -> torch.Tensor:
        """Member ``m``'s rows and canvas of x [B, N]: [m.size, m.canvas_len], as it would be alone."""
        return x[m.at : m.at + m.size, m.offset : m.offset + m.canvas_len]

    def _observe(self, canvas: torch.Tensor) -> None:
        for m in self.open:
            if m.hooks.observe is not None:
                m.hooks.observe(self._view(m, canvas))

    def _done(self, canvas: torch.Tensor, fixed: torch.Tensor, conf: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(canvas.shape[0], dtype=torch.bool, device=canvas.device)  # [B]
        for m in self.open:
            if m.hooks.done is not None:
                v = (self._view(m, canvas), self._view(m, fixed), self._view(m, conf))
                out[m.at : m.at + m.size] = m.hooks.done(*v)
        return out

    def _draft(self, canvas: torch.Tensor, fixed: torch.Tensor) -> torch.Tensor:
        out = torch.full_like(canvas, -1)  # [B, N]
        for m in self.open:
            if m.hooks.draft is not None:
                v = m.hooks.draft(self._view(m, canvas), self._view(m, fixed))  # [m.size, m.canvas_len]
                out[m.at : m.at + m.size, m.offset : m.offset + m.canvas_len] = v.to(out.device)
        return out

    def _cancel(self) -> None:
        """Members whose caller asked to stop leave now, as they are; the others go on."""
        for m in self.open:
            if m.hooks.should_stop is not None and m.hooks.should_stop():
                m.cancelled = True
                self._finish(m)
                self.c.fixed[m.at : m.at + m.size] = True  # nothing left to decide in its rows
                self.editing[m.at : m.at + m.size] = False

    def _leave(self) -> None:
        """Members whose rows are all committed get their result now, not when the decode ends."""
        for m in self.open:
            rows = slice(m.at, m.at + m.size)
            if bool(self.c.fixed[rows].all()) and not bool(self.editing[rows].any()):
                self._finish(m)

    def _finish(self, m: Member) -> None:
        tokens, conf = self._view(m, self.c.tokens).clone(), self._view(m, self.c.conf).clone()
        is_eot = self._view(m, self.c.fixed) & (tokens == self.tokens.eot_id)
        real = self._view(m, self.c.real)
        width = int(self.w[m.at : m.at + m.size].minimum(self.n[m.at : m.at + m.size]).max())
        m.result = SampleResult(
            tokens,
            conf,
            first_true(is_eot),  # [b]
            m.steps,
            m.steps + m.calls + 1,
            (is_eot & real).any(dim=1),  # end-of-text inside the row's own canvas, not its padding
            m.cancelled,
            m.row_steps,
            width,
        )
        if m.on_done is not None:
            m.on_done(m)


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
    d = Decode(model, plan, tokens, generator)
    m = Member(rows, canvas_len, first_width, hooks or Hooks())
    d.join(m)
    d.run()
    return m.result
