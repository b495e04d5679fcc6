"""Lookahead: several of a rule's future steps verified in one model call, with the rule's own answer.

A stateless unmasking rule R (``TopKRule(1)``, the one-token-per-step baseline, above all) commits,
from canvas state S_t, the set C_t = R(f(S_t)) of positions and tokens, where f is one model call;
S_{t+1} = S_t + C_t. Lookahead runs that same trajectory in fewer calls (self-speculative decoding,
as in speculative decoding for autoregressive models, Leviathan et al. 2023; for diffusion models,
Gao et al. 2025, "Self Speculative Decoding for Diffusion Large Language Models"):

- Guess: from the last call's predictions, R applied again and again to positions not yet committed
  (predictions frozen) guesses the next steps' sets G_1, ..., G_d (``depth`` of them at most).
- Verify: one call over d + 1 variants of each row, variant j = S_t + G_1 + ... + G_j (with the
  end-of-text tail a guessed end-of-text implies). The rule on variant j gives exactly C_{t+j} when
  G_1..G_j were right, so G_{j+1} is right iff R(f(variant j)) = G_{j+1}, positions and tokens.
- Accept: with k guesses right, the step commits G_1..G_k and the rule's choice on variant k, the
  latter never guessed: k + 1 of the rule's steps for one model call, and at least one, as R alone.
  Each sub-step is handed back on its own (``plan``), so the loop applies the stop hook and the
  end-of-text fill after each exactly as it would after R's steps one by one: the answer, each
  token's confidence and where a stop sequence ends the row are the rule's own, token for token.
- Cost: a step computes up to d + 1 rows per row instead of one. A model call's latency on a GPU
  barely grows with a few more 32-token rows; on two CPU cores it does (README, session 41 measures
  both tokens per step and milliseconds).
- Only rules that read nothing but the current predictions can be verified this way: no step
  budget (it counts steps), no temporal stability (it reads the previous step), greedy decoding
  (a sampled token is not a function of the canvas). ``check_rule`` says so up front.
- Pure tensor code on the loop's state; the model call is the loop's ``predict`` (model/sampler.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

# (rows' batch indices [R], canvases [R, N], committed [R, N]) -> token, confidence, certainty [R, n]
Predict = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]
]
# (tokens, certainties, still masked [R, n]) -> the rule's commits [R, n]
Select = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
# one sub-step of a plan: commit [B, n], its tokens [B, n], their confidences [B, n]
SubStep = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


@dataclass
class Guess:
    """A block's guessed next steps: ``step`` [B, n] the future step (1, 2, ...) a position is guessed
    to commit at, 0 for none; ``tok`` [B, n] its guessed token."""

    step: torch.Tensor
    tok: torch.Tensor

    @staticmethod
    def none(B: int, n: int, device: torch.device) -> Guess:
        z = torch.zeros((B, n), dtype=torch.long, device=device)
        return Guess(z, z.clone())


def check_rule(rule: object, temperature: float) -> None:
    """ValueError unless ``rule`` at ``temperature`` can be verified (module docstring)."""
    if temperature > 0:
        raise ValueError("lookahead verifies greedy decoding only (temperature 0)")
    if hasattr(rule, "steps") or math.isfinite(getattr(rule, "stable", math.inf)):
        raise ValueError(
            "lookahead needs a rule that reads only the current step (no step budget, no stability)"
        )


def _fill_after_eot(canvas: torch.Tensor, fixed: torch.Tensor, eot_id: int) -> None:
    """In place: every position after a row's first committed end-of-text becomes committed
    end-of-text (the loop's own end-of-text fill)."""
    N = canvas.shape[1]
    is_eot = fixed & (canvas == eot_id)  # [R, N]
    first = torch.where(is_eot.any(dim=1), is_eot.int().argmax(dim=1), N)  # [R]
    tail = torch.arange(N, device=canvas.device)[None, :] > first[:, None]
    canvas[tail & ~fixed] = eot_id
    fixed |= tail


@dataclass(frozen=True)
class Lookahead:
    depth: int = 6  # guessed future steps verified per call (rows per row: depth + 1 at most)
    # accept a guessed step when the variant before it predicts the guessed tokens, whether or not
    # the rule would pick those positions next (module docstring); False: the rule's own answer
    agree: bool = False

    def __post_init__(self) -> None:
        if self.depth < 1:
            raise ValueError(f"lookahead depth must be at least 1, got {self.depth}")

    def step(
        self,
        predict: Predict,
        select: Select,
        canvas: torch.Tensor,  # [B, N]
        fixed: torch.Tensor,  # [B, N]
        blk: slice,
        guess: Guess,
        eot_id: int,
    ) -> tuple[list[SubStep], Guess, int]:
        """One model call: the rule's next sub-steps (each row's k + 1, module docstring), the
        guesses for the following call, and how many rows the call computed."""
        B, dev = canvas.shape[0], canvas.device
        active = ~fixed[:, blk]  # [B, n]
        live = active.any(dim=1)  # [B]
        m = torch.where(live, guess.step.amax(dim=1).clamp_max(self.depth), -1)  # [B] guesses; -1: no row
        idx = torch.repeat_interleave(torch.arange(B, device=dev), m + 1)  # [R] each variant's row
        first = torch.cumsum(m + 1, 0) - (m + 1)  # [B] each row's first variant
        depth = torch.arange(len(idx), device=dev) - first[idx]  # [R] variant j of its row
        g = guess.step[idx]  # [R, n]
        put = (g >= 1) & (g <= depth[:, None])  # [R, n] guesses 1..j applied
        vcan, vfix = canvas[idx].clone(), fixed[idx].clone()  # [R, N]
        vcan[:, blk] = torch.where(put, guess.tok[idx], vcan[:, blk])
        vfix[:, blk] |= put
        _fill_after_eot(vcan, vfix, eot_id)
        vact = ~vfix[:, blk]  # [R, n]
        tok, conf, cert = predict(idx, vcan, vfix)  # [R, n] each
        sel = select(tok, cert, vact)  # [R, n] the rule's commits on each variant
        # guess j + 1 is right iff the rule on variant j commits exactly it, with its tokens; ``agree``:
        # iff variant j predicts its tokens, wherever the rule would commit
        nxt = g == (depth + 1)[:, None]  # [R, n]
        right = ((tok == guess.tok[idx]) | ~nxt).all(dim=1) & nxt.any(dim=1) & (depth < m[idx])
        if not self.agree:
            right &= (sel == nxt).all(dim=1)
        # k[b]: leading right guesses of row b; variant j is used (as sub-step j) for j <= k[b]
        wrong_at = torch.where(right, len(idx), depth)  # [R]
        k = torch.full((B,), len(idx), device=dev).scatter_reduce(0, idx, wrong_at, "amin")  # [B]
        k = torch.minimum(k, m.clamp_min(0))
        used = depth <= k[idx]  # [R]
        S = int(k[live].max()) + 1 if bool(live.any()) else 0
        commit = torch.zeros((S, *active.shape), dtype=torch.bool, device=dev)  # [S, B, n]
        ptok = torch.full((S, *active.shape), eot_id, dtype=tok.dtype, device=dev)
        pconf = torch.zeros((S, *active.shape), dtype=conf.dtype, device=dev)
        u = used.nonzero().squeeze(1)
        # sub-step j < k commits guess j + 1 (the rule's own set on variant j unless ``agree``), k the rule's
        take = torch.where((depth < k[idx])[:, None], nxt, sel)  # [R, n]
        commit[depth[u], idx[u]] = take[u]
        ptok[depth[u], idx[u]] = tok[u]
        pconf[depth[u], idx[u]] = conf[u]
        plan = [(commit[s], ptok[s], pconf[s]) for s in range(S)]
        last = (first + k)[live]  # [b] each live row's last variant
        return plan, self._guess(select, tok, cert, vact & ~take, take, live, last, eot_id), len(idx)

    def _guess(
        self,
        select: Select,
        tok: torch.Tensor,  # [R, n]
        cert: torch.Tensor,
        left: torch.Tensor,  # [R, n] still masked after the variant's own commits
        sel: torch.Tensor,  # [R, n] the variant's own commits
        live: torch.Tensor,  # [B]
        last: torch.Tensor,  # [b] the variant each live row continues from
        eot_id: int,
    ) -> Guess:
        """The rule run ``depth`` times on the variant's frozen predictions (module docstring)."""
        B, n = live.shape[0], tok.shape[1]
        out = Guess.none(B, n, tok.device)
        tok, cert = tok[last], cert[last]  # [b, n]
        pos = torch.arange(n, device=tok.device)
        # a committed end-of-text ends the row: nothing after it is left to guess
        left = left[last] & (pos[None, :] < _first(sel[last] & (tok == eot_id))[:, None])
        step = torch.zeros_like(tok)
        going = torch.ones(len(last), dtype=torch.bool, device=tok.device)  # [b]
        for d in range(1, self.depth + 1):
            s = select(tok, cert, left) & going[:, None]  # [b, n]
            going &= s.any(dim=1)
            s &= going[:, None]
            if not bool(going.any()):
                break
            step[s] = d
            left &= ~s & (pos[None, :] <= _first(s & (tok == eot_id))[:, None])
        out.step[live], out.tok[live] = step, tok
        return out


def _first(mask: torch.Tensor) -> torch.Tensor:
    """[b] index of each row's first True in ``mask`` [b, n]; n where a row has none."""
    return torch.where(mask.any(dim=1), mask.int().argmax(dim=1), mask.shape[1])
