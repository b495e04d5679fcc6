"""Early ends of rows: a stop sequence in the committed text, or a length-ensemble row that can no
longer win its request's vote. Both are the denoising loop's ``done`` hook (model/infer/sampler.py).

Design decisions:
- A row whose committed answer start (every position before the first undecided one) already holds
  a stop sequence ends there: nothing after it can change the returned text, so the text is the
  same as decoding the whole canvas and cutting afterwards, in fewer steps.
- A single-line FIM request is decoded on several canvas lengths at once and the likeliest answer
  wins (model/infer/engine.py, ``line_likelihood``). The vote's scores only fall as a row commits more, so
  a row whose committed start already scores below a finished rival's answer can be ended without
  changing any answer: only steps are saved.
- Pure tensor code on the sampler's state (``done`` hook arguments); it knows nothing of requests
  beyond the row groups it is given.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from editserver.model.infer.unmasking import first_true


def outscored(
    canvas: torch.Tensor,  # [B, N]
    fixed: torch.Tensor,  # [B, N]
    conf: torch.Tensor,  # [B, N] committed tokens' probabilities (1 where filled)
    ended: torch.Tensor,  # [B] rows ending this step anyway (a stop sequence)
    groups: list[list[int]],  # the rows of each request's length ensemble
    eot_id: int,
) -> torch.Tensor:
    """[B] bool: undecided rows that can no longer win their request's ``line_likelihood`` vote.

    A row's final score is the sum of log-confidences over its answer and its end, and its answer
    starts with the row's committed start (every position before the first undecided one, cut after
    a committed end-of-text), so that start's sum bounds the final score from above: later tokens
    only add log-probabilities <= 0. Once another row of the request has finished with a higher score
    the row cannot be picked, and ending it changes no answer (rows decode independently, sampler.py)
    but saves the steps it would still take. A finished row's score is exactly its start's sum
    (``_scored``); the margin keeps float rounding from ending a row that would tie.
    """
    B, N = canvas.shape
    pos = torch.arange(N, device=canvas.device)
    first_open = first_true(~fixed)  # [B]
    first_eot = first_true(fixed & (canvas == eot_id))  # [B]
    end = torch.minimum(first_open, first_eot + 1)  # [B] the committed start, its end-of-text included
    logc = conf.double().clamp_min(1e-9).log().masked_fill(pos[None, :] >= end[:, None], 0.0)
    bound = logc.sum(dim=1).tolist()  # [B]
    finished = (ended | fixed.all(dim=1) | (first_eot < first_open)).tolist()  # [B]
    out = torch.zeros(B, dtype=torch.bool, device=canvas.device)
    for g in groups:
        best = max((bound[i] for i in g if finished[i]), default=None)
        if best is None:
            continue
        for i in g:
            out[i] = not finished[i] and bound[i] < best - 1e-6
    return out


Hook = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


Ends = Callable[[str], bool]  # whether a row's committed text already decides its answer


def stop_hook(
    stops: list[list[str]],
    decode: Callable[[list[int]], str],
    eot_id: int,
    ends: list[Ends | None] | None = None,
    turn_ends: frozenset[int] = frozenset(),
) -> Hook | None:
    """Rows whose committed answer start already holds one of their stop strings or an end-of-turn
    token (``turn_ends``: an instruct model's answer ends there and the text is cut there, so later
    blocks would be decoded for nothing), or that their ``ends`` test says are decided (None: none of
    these for any row)."""
    stops = [[x for x in row if x] for row in stops]
    ends = ends or [None] * len(stops)
    if not any(stops) and not any(ends) and not turn_ends:
        return None

    def done(canvas: torch.Tensor, fixed: torch.Tensor, conf: torch.Tensor) -> torch.Tensor:  # [B]
        first_open = first_true(~fixed)  # [B]
        out = torch.zeros(canvas.shape[0], dtype=torch.bool, device=canvas.device)
        for b, (row, end) in enumerate(zip(stops, ends, strict=True)):
            if not row and end is None and not turn_ends:
                continue
            toks = canvas[b, : int(first_open[b])].tolist()
            if eot_id in toks:
                continue  # the answer has ended anyway
            if turn_ends.intersection(toks):
                out[b] = True
                continue
            if not row and end is None:
                continue  # no stop string and no end test: nothing to decode the text for
            text = decode(toks)
            out[b] = any(x in text for x in row) or (end is not None and end(text))
        return out

    return done


def done_hook(
    stops: list[list[str]],
    groups: list[list[int]],
    decode: Callable[[list[int]], str],
    eot_id: int,
    ends: list[Ends | None] | None = None,
    turn_ends: frozenset[int] = frozenset(),
) -> Hook | None:
    """``done`` for the loop: rows that hit a stop string or an end of turn or are decided, then
    ensemble rows that cannot win."""
    stop = stop_hook(stops, decode, eot_id, ends, turn_ends)
    groups = [g for g in groups if len(g) > 1]
    if not groups:
        return stop

    def done(canvas: torch.Tensor, fixed: torch.Tensor, conf: torch.Tensor) -> torch.Tensor:
        ended = stop(canvas, fixed, conf) if stop is not None else torch.zeros_like(fixed[:, 0])
        return ended | outscored(canvas, fixed, conf, ended, groups, eot_id)

    return done
