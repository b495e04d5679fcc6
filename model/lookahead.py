"""Lookahead: several of a rule's future steps verified in one model call.

A stateless unmasking rule R (``TopKRule(1)``, the one-token-per-step baseline, above all) commits,
from canvas state S_t, the set C_t = R(f(S_t)) of positions and tokens, where f is one model call;
S_{t+1} = S_t + C_t. Lookahead runs that trajectory in fewer calls (self-speculative decoding:
speculative decoding, Leviathan et al. 2023, with the model as its own drafter, as Gao et al. 2025
do for diffusion language models):

- Guess: from the last call's predictions, R applied again and again to the positions not yet
  committed (predictions frozen) guesses the next steps' sets G_1, ..., G_d (``depth`` at most), each
  with its tokens. With ``nodes`` > ``depth`` the guess is a tree: a step's set may also be guessed
  with its least likely token replaced by that position's runner-up, and the ``nodes`` guesses
  kept are the likeliest by the product of their frozen probabilities (best first, so every kept
  guess's parent is kept; SpecInfer's and Sequoia's token trees, Miao et al. 2024, Chen et al. 2024).
- Verify: one call over a variant of each row per guess, plus the row itself: a guess's variant is
  S_t plus the sets on its path (with the end-of-text tail a guessed end-of-text implies). A guess
  is right when its parent is and the parent's variant gives it: R on that variant commits exactly
  the guessed set with the guessed tokens. Siblings differ in a token, so at most one is right.
- Accept: with the deepest right guess at depth k, the call commits the k sets on its path and R's
  own choice on its variant, never guessed: k + 1 of R's steps for one call, at least one, as R
  alone. Each sub-step is handed back on its own (``plan``), so the loop applies the stop hook and
  the end-of-text fill after each exactly as after R's steps one by one: the answer, each token's
  confidence and where a stop sequence ends the row are R's own, token for token.
- Across blocks: each call also predicts the next semi-autoregressive block (still all masked, as
  at that block's first call) from the variant each row continues from; ``carry`` guesses that
  block's first steps from the last such look, so only a request's first block starts with nothing
  to verify. A carried guess is verified like any other, so it changes no answer, only the calls.
- ``agree``: a guess is right when its parent's variant predicts the guessed tokens at the guessed
  positions, whether or not R would pick those positions next. Every committed token is still the
  model's argmax given everything committed before it, so a one-token rule stays one token per step
  in quality, only in the order of the guesses (most certain first) where R's own order would
  have been re-ranked after each commit: the guesses R would have taken in another order count.
- ``accept`` (with ``agree``): a guessed token is also right when the verifying variant ranks it
  second at no less than ``accept`` times its first's probability (a relaxed acceptance like
  Medusa's typical acceptance, Cai et al. 2024). Such a token is no longer the model's argmax, so
  this trades answers for calls (README, session 42 measures both).
- Cost: a call computes up to ``nodes`` + 1 rows per row instead of one, and with a next block
  projects its positions onto the vocabulary too (the carry's look; not timed separately). A model call's latency on a
  GPU barely grows with a few more 32-token rows; on two CPU cores it does (README, session 41
  measures tokens per step, rows per step and milliseconds side by side).
- Only rules that read nothing but the current predictions can be verified this way: no step
  budget (it counts steps), no temporal stability (it reads the previous step), greedy decoding
  (a sampled token is not a function of the canvas). ``Lookahead.check`` says so up front.
- Pure tensor code on the loop's state; the model call is the loop's ``predict`` (model/sampler.py).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from model.sampler import fill_after_eot, first_true

# (rows' batch indices [R], canvases [R, N], committed [R, N], span=the positions, default the active
# block) -> token, confidence, certainty, and the runner-up token and its probability (None unless
# asked) [R, n] at those positions, and the final hidden states [R, n, dim] (None without a drafter)
Predict = Callable[..., tuple[torch.Tensor, ...]]
# (rows' batch indices [R], canvases [R, N], committed [R, N] with the guesses written in, a call's
# hidden states [R, n, dim], what was committed or guessed since [R, n]) -> Predict's first five at
# the active block, as the drafter re-predicts them (model/drafter.py)
Redraft = Callable[..., tuple[torch.Tensor, ...]]
# (tokens, certainties, still masked [R, n]) -> the rule's commits [R, n]
Select = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
# one sub-step of a plan: commit [B, n], its tokens [B, n], their confidences [B, n]
SubStep = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


@dataclass
class Guess:
    """A block's guessed steps, per row a tree of T guesses: ``parent`` [B, T] (-1: the current
    state), ``depth`` [B, T] (0: no guess), the guessed set ``own`` [B, T, n] with its tokens
    ``tok`` [B, T, n], and ``path`` / ``path_tok`` [B, T, n], the sets from the root to it.
    ``ahead``: the predictions (token, confidence, certainty, runner-up and its probability, each
    [B, n'] or None) for the next block that each row's latest call made, ``seen`` [B] the rows
    that have them (None: not looked at)."""

    parent: torch.Tensor
    depth: torch.Tensor
    own: torch.Tensor
    tok: torch.Tensor
    path: torch.Tensor
    path_tok: torch.Tensor
    ahead: tuple[torch.Tensor | None, ...] | None = None
    seen: torch.Tensor | None = None

    @staticmethod
    def none(B: int, n: int, device: torch.device) -> Guess:
        # one empty slot (depth 0), so a row's guesses can be looked up before there are any
        z = torch.zeros((B, 1), dtype=torch.long, device=device)
        e = torch.zeros((B, 1, n), dtype=torch.bool, device=device)
        return Guess(z - 1, z, e, e.long(), e.clone(), e.long())


@dataclass(frozen=True)
class Lookahead:
    depth: int = 4  # the deepest guess: at most depth + 1 of the rule's steps per call
    nodes: int | None = None  # guesses per row and call (None: ``depth``, a chain of top tokens)
    agree: bool = False  # accept guesses the model predicts, in any order (module docstring)
    # with ``agree``: also accept a guessed token that is the verifying call's runner-up at no less
    # than ``accept`` times its top token's probability (1: the top token only; module docstring)
    accept: float = 1.0

    def __post_init__(self) -> None:
        if self.depth < 1:
            raise ValueError(f"lookahead depth must be at least 1, got {self.depth}")
        if self.nodes is not None and self.nodes < self.depth:
            raise ValueError(f"lookahead nodes must be at least its depth {self.depth}, got {self.nodes}")
        if not 0 < self.accept <= 1:
            raise ValueError(f"lookahead accept must be in (0, 1], got {self.accept}")
        if self.accept < 1 and not self.agree:
            raise ValueError("lookahead accept below 1 needs agree (the rule's own steps are exact)")

    def check(self, rule: object, temperature: float) -> None:
        """ValueError unless ``rule`` at ``temperature`` can be verified (module docstring)."""
        if temperature > 0:
            raise ValueError("lookahead verifies greedy decoding only (temperature 0)")
        if hasattr(rule, "steps") or math.isfinite(getattr(rule, "stable", math.inf)):
            raise ValueError(
                "lookahead needs a rule that reads only the current step (no step budget, no stability)"
            )

    @property
    def tree(self) -> bool:
        """Whether guesses are a tree of runner-up tokens, not a chain of top ones."""
        return self.nodes is not None and self.nodes > self.depth

    @property
    def runner_up(self) -> bool:
        """Whether a call needs each position's runner-up token: to guess a tree, or to accept a
        runner-up (``accept`` < 1)."""
        return self.tree or self.accept < 1

    def step(
        self,
        predict: Predict,
        select: Select,
        canvas: torch.Tensor,  # [B, N]
        fixed: torch.Tensor,  # [B, N]
        blk: slice,
        guess: Guess | None,
        eot_id: int,
        nxt: slice | None = None,
        redraft: Redraft | None = None,
    ) -> tuple[list[SubStep], Guess, int]:
        """One model call: the rule's next sub-steps (each row's k + 1, module docstring), the
        guesses for the following call, and how many rows the call computed. ``guess``: the last
        call's in this block (None: none). ``nxt``: the next block, whose predictions the call also
        keeps for ``carry``. ``redraft``: the drafter, which re-predicts the block after each
        guessed set, so later guesses see earlier ones (None: guesses from frozen predictions)."""
        B, dev = canvas.shape[0], canvas.device
        if guess is None:
            guess = Guess.none(B, blk.stop - blk.start, dev)
        T = guess.parent.shape[1]
        live = (~fixed[:, blk]).any(dim=1)  # [B]
        slots = torch.cat([live[:, None], (guess.depth > 0) & live[:, None]], dim=1)  # [B, 1 + T]
        idx, slot = slots.nonzero(as_tuple=True)  # [R] each variant's row, and 0 (itself) or 1 + guess
        node = (slot - 1).clamp_min(0)
        put = guess.path[idx, node] & (slot > 0)[:, None]  # [R, n]
        vcan, vfix = canvas[idx].clone(), fixed[idx].clone()  # [R, N]
        vcan[:, blk] = torch.where(put, guess.path_tok[idx, node], vcan[:, blk])
        vfix[:, blk] |= put
        fill_after_eot(vcan, vfix, eot_id)
        vact = ~vfix[:, blk]  # [R, n]
        n = blk.stop - blk.start
        out = predict(idx, vcan, vfix, span=slice(blk.start, (nxt or blk).stop))  # [R, n (+ n')] each
        tok, conf, cert, alt_tok, alt_p = (None if x is None else x[:, :n] for x in out[:5])
        later = [None if x is None else x[:, n:] for x in out[:5]]  # [R, n'] the next block
        hid = None if out[5] is None else out[5][:, :n]  # [R, n, dim]
        sel = select(tok, cert, vact)  # [R, n] the rule's commits on each variant
        at = torch.full((B, 1 + T), -1, dtype=torch.long, device=dev)
        at[idx, slot] = torch.arange(len(idx), device=dev)  # [B, 1 + T] variant of each slot
        rows = torch.arange(B, device=dev)
        right = torch.zeros((B, 1 + T), dtype=torch.bool, device=dev)
        right[:, 0] = live
        for t in range(T):  # parents come before their children
            p = guess.parent[:, t] + 1  # [B] the parent's slot
            pv = at[rows, p].clamp_min(0)  # [B] the parent's variant
            own = guess.own[:, t]  # [B, n]
            ok = right[rows, p] & (at[rows, t + 1] >= 0) & own.any(dim=1)
            gt = guess.tok[:, t]  # [B, n]
            hit = tok[pv] == gt
            if self.accept < 1 and alt_tok is not None and alt_p is not None:
                hit |= (alt_tok[pv] == gt) & (alt_p[pv] >= self.accept * conf[pv])
            ok &= (hit | ~own).all(dim=1)
            if not self.agree:
                ok &= (sel[pv] == own).all(dim=1)
            right[:, t + 1] = ok
        depth = torch.cat([torch.zeros_like(guess.depth[:, :1]), guess.depth], dim=1)  # [B, 1 + T]
        best = depth.masked_fill(~right, -1).argmax(dim=1)  # [B] the deepest right slot
        k = depth[rows, best]  # [B] right guesses on its path
        S = int(k[live].max()) + 1 if bool(live.any()) else 0
        commit = torch.zeros((S, B, vact.shape[1]), dtype=torch.bool, device=dev)  # [S, B, n]
        ptok = torch.full_like(commit, eot_id, dtype=tok.dtype)
        pconf = torch.zeros_like(commit, dtype=conf.dtype)
        last = at[rows, best].clamp_min(0)  # [B] the variant each row continues from
        on = live.nonzero().squeeze(1)
        commit[k[on], on], ptok[k[on], on], pconf[k[on], on] = sel[last[on]], tok[last[on]], conf[last[on]]
        cur = best.clone()  # walk each path up: sub-step d - 1 commits the guess at depth d
        for d in range(int(k.max()) if len(k) else 0, 0, -1):
            r = (live & (k >= d)).nonzero().squeeze(1)
            g = cur[r] - 1  # the path's guess at depth d
            pv = at[r, guess.parent[r, g] + 1]  # its parent's variant, which verified it
            commit[d - 1, r], ptok[d - 1, r] = guess.own[r, g], guess.tok[r, g]
            pconf[d - 1, r] = (
                conf[pv] if alt_p is None else torch.where(ptok[d - 1, r] == tok[pv], conf[pv], alt_p[pv])
            )
            cur[r] = guess.parent[r, g] + 1
        plan = [(commit[s], ptok[s], pconf[s]) for s in range(S)]
        left = vact[last[on]] & ~sel[last[on]]  # [b, n]
        ended = first_true(sel[last[on]] & (tok[last[on]] == eot_id))  # a committed end-of-text ends it
        left &= torch.arange(left.shape[1], device=dev)[None, :] < ended[:, None]
        preds = [x[last[on]] if x is not None else None for x in (tok, conf, cert, alt_tok, alt_p)]
        redraw = None
        if redraft is not None and hid is not None:
            lv = last[on]  # [b] the variant each live row continues from
            done, done_tok = sel[lv], tok[lv]  # [b, n] this call's own commit

            def redraw(ptok: torch.Tensor, ppath: torch.Tensor) -> tuple[torch.Tensor, ...]:
                """The drafter's predictions [b, n] with guesses ``ptok`` at ``ppath`` [b, n]."""
                assert redraft is not None and hid is not None
                new = ppath | done  # [b, n] everything since the call the hidden states are from
                rcan, rfix = vcan[lv], vfix[lv]  # [b, N] copies (index with a tensor)
                rcan[:, blk] = torch.where(ppath, ptok, torch.where(done, done_tok, rcan[:, blk]))
                rfix[:, blk] |= new
                return redraft(idx[lv], rcan, rfix, hid[lv], new)

        g = self._guess(select, *preds, left, live, eot_id, redraw)
        if nxt is not None:  # each live row's look at the next block, from the variant it continues from
            # rows not live in this call keep the look their last call took
            prev = guess.ahead or tuple(None if x is None else x.new_zeros((B, x.shape[1])) for x in later)
            g.ahead = tuple(
                None if x is None else p.index_put((on,), x[last[on]]) for x, p in zip(later, prev)
            )
            g.seen = live if guess.seen is None else live | guess.seen
        return plan, g, len(idx)

    def carry(
        self, guess: Guess | None, select: Select, fixed: torch.Tensor, blk: slice, eot_id: int
    ) -> Guess | None:
        """The first guesses of block ``blk`` from the last block's look at it (``step``'s ``nxt``):
        the rule run on those frozen predictions, as within a block, for the rows that made one and
        still have it to decode (None: no row). Lookahead's later calls then verify them."""
        if guess is None or guess.ahead is None or guess.seen is None:
            return None
        live = guess.seen & (~fixed[:, blk]).any(dim=1)  # [B]
        if not bool(live.any()):
            return None
        preds = [None if x is None else x[live] for x in guess.ahead]
        return self._guess(select, *preds, ~fixed[live, blk], live, eot_id)

    def _guess(
        self,
        select: Select,
        tok: torch.Tensor,  # [b, n] the frozen predictions each live row continues from
        conf: torch.Tensor,
        cert: torch.Tensor,
        alt_tok: torch.Tensor | None,
        alt_p: torch.Tensor | None,
        left: torch.Tensor,  # [b, n] still to decide
        live: torch.Tensor,  # [B]
        eot_id: int,
        redraw: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, ...]] | None = None,
    ) -> Guess:
        """The rule run ``depth`` times on frozen predictions, as a chain or a tree (docstring); with
        ``redraw`` (the drafter, given the guessed tokens and where) on predictions re-drafted
        before each set, each position keeping those of the set it was guessed in."""
        b, n = tok.shape
        dev, pos = tok.device, torch.arange(n, device=tok.device)
        sets = torch.zeros((b, self.depth, n), dtype=torch.bool, device=dev)  # [b, D, n] the main path
        chain = [tok, conf, cert, alt_tok, alt_p]  # each position's prediction in the set it joins
        path = torch.zeros_like(left)  # [b, n] guessed so far
        for d in range(self.depth):
            if redraw is not None:
                tok, conf, cert, alt_tok, alt_p = redraw(chain[0], path)
            s = select(tok, cert, left)  # [b, n]
            if not bool(s.any()):
                sets = sets[:, :d]
                break
            sets[:, d] = s
            path |= s
            chain = [
                None if c is None else torch.where(s, x, c)
                for c, x in zip(chain, (tok, conf, cert, alt_tok, alt_p))
            ]
            left = left & ~s & (pos[None, :] <= first_true(s & (tok == eot_id))[:, None])
        tok, conf, cert, alt_tok, alt_p = chain
        D = sets.shape[1]
        if D == 0:  # nothing left to guess in any row
            return Guess.none(live.shape[0], n, dev)
        has = sets.any(dim=2)  # [b, D]
        # each set's runner-up: its least likely token swapped for that position's second choice
        weak = conf[:, None, :].expand(b, D, n).masked_fill(~sets, 2.0).argmin(dim=2)  # [b, D]
        logp = torch.where(sets, conf[:, None, :].clamp_min(1e-9).log(), 0.0).sum(dim=2)  # [b, D]
        alt = None
        if self.tree and alt_tok is not None and alt_p is not None:
            a = alt_p.gather(1, weak).clamp_min(1e-9).log() - conf.gather(1, weak).clamp_min(1e-9).log()
            alt = torch.where(has, logp + a, -math.inf)  # [b, D]
        trees = [_best_first(logp[i].tolist(), None if alt is None else alt[i].tolist(), has[i].tolist(),
                             self.nodes or self.depth) for i in range(b)]  # fmt: skip
        T = max([1, *(len(x) for x in trees)])  # at least the empty slot of ``Guess.none``
        parent = torch.full((b, T), -1, dtype=torch.long)
        depth = torch.zeros((b, T), dtype=torch.long)
        swaps = torch.zeros((b, T, D), dtype=torch.bool)  # [b, T, D] runner-ups on the path
        for i, tree in enumerate(trees):
            for t, (par, choices) in enumerate(tree):
                parent[i, t], depth[i, t] = par, len(choices)
                swaps[i, t, : len(choices)] = torch.tensor(choices, dtype=torch.bool)
        parent, depth, swaps = parent.to(dev), depth.to(dev), swaps.to(dev)
        ar = torch.arange(b, device=dev)[:, None]
        dsel = (depth - 1).clamp_min(0)  # [b, T]
        own = sets[ar, dsel] & (depth > 0)[..., None]  # [b, T, n]
        path = sets.cumsum(dim=1).bool()[ar, dsel] & (depth > 0)[..., None]  # [b, T, n]
        onehot = pos[None, None, :] == weak[..., None]  # [b, D, n] each set's runner-up position
        runner = alt_tok if alt_tok is not None else tok
        swap_own = onehot[ar, dsel] & swaps.gather(2, dsel[..., None])  # [b, T, n] this guess's swap
        swap_path = torch.einsum("btd,bdn->btn", swaps.float(), onehot.float()).bool()  # [b, T, n]
        out_tok = torch.where(swap_own, runner[:, None, :], tok[:, None, :])
        out_path_tok = torch.where(swap_path, runner[:, None, :], tok[:, None, :])
        B = live.shape[0]
        g = Guess(
            torch.full((B, T), -1, dtype=torch.long, device=dev),
            torch.zeros((B, T), dtype=torch.long, device=dev),
            *(torch.zeros((B, T, n), dtype=x.dtype, device=dev) for x in (own, out_tok, path, out_path_tok)),
        )
        for full, part in zip(
            (g.parent, g.depth, g.own, g.tok, g.path, g.path_tok),
            (parent, depth, own, out_tok, path, out_path_tok),
        ):
            full[live] = part
        return g


def _best_first(
    top: list[float], alt: list[float] | None, has: list[bool], budget: int
) -> list[tuple[int, list[int]]]:
    """The ``budget`` likeliest guesses of a row, parents first: each is (parent index, choices),
    choice d = 1 where depth d + 1 takes its runner-up; ``top`` / ``alt`` [D]: log-probability of
    depth d's set with its top tokens / with its runner-up; ``has`` [D]: depth d has a set."""
    D = has.index(False) if False in has else len(has)  # a row's sets end at its first empty one
    out: list[tuple[int, list[int]]] = []
    heap: list[tuple[float, int, int, list[int]]] = []  # (-log p, tiebreak, parent index, choices)
    count = 0

    def push(parent: int, logp: float, choices: list[int]) -> None:
        nonlocal count
        d = len(choices)
        if d >= D:
            return
        heapq.heappush(heap, (-(logp + top[d]), count, parent, [*choices, 0]))
        count += 1
        if alt is not None and math.isfinite(alt[d]):
            heapq.heappush(heap, (-(logp + alt[d]), count, parent, [*choices, 1]))
            count += 1

    push(-1, 0.0, [])
    while heap and len(out) < budget:
        neg, _, parent, choices = heapq.heappop(heap)
        out.append((parent, choices))
        push(len(out) - 1, -neg, choices)
    return out
