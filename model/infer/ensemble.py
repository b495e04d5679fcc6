"""The length ensemble's early end: a row that can no longer win its request's vote stops decoding.

Design decisions:
- A single-line FIM request is decoded on several canvas lengths at once and the likeliest answer
  wins (model/infer/engine.py, ``line_likelihood``). The vote's scores only fall as a row commits more, so
  a row whose committed start already scores below a finished rival's answer can be ended without
  changing any answer: only steps are saved.
- Pure tensor code on the sampler's state (``done`` hook arguments); it knows nothing of requests
  beyond the row groups it is given.
"""

from __future__ import annotations

import torch

from model.infer.rules import first_true


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
