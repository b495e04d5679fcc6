"""Fixed canvas lengths side by side: the suffix never moves during a decode.

A FIM request asked with ``SamplingOptions(canvases=(8, 16, 32))`` is decoded on each of those
fixed canvas lengths (capped by its ``max_tokens``) as rows of ONE batch, and the answer the model
finds likeliest wins; an answer that fills its longest canvas without ending is decoded again on a
canvas twice as long (up to ``max_tokens``), alone, until it ends or reaches the cap.

Design decisions:
- Each row's canvas is fixed from the first step (``DecodePlan.fixed_canvas``): in an in-place layout
  the suffix sits right after the canvas, so a canvas that grows moves the suffix under tokens
  already committed; a fixed canvas never does. Rows of one batch keep their own canvas lengths
  (``Rows.canvas_lens``), so each decodes as it would alone (model/infer/sampler.py).
- The likelihood that picks is the one the single-line canvases use (engine.py ``line_likelihood``:
  the summed log-confidence of the answer and its end), the model's own length prior: these models
  were trained with answers padded by end-of-text, so the canvas length is a prior on the answer's.
  A row that filled its canvas has no end to pay for, so any row that ended beats it.
- Re-decoding a filled answer on a longer canvas (not growing it in place) is what keeps the suffix
  still; it costs a second decode only for answers longer than the longest canvas tried.
- Pure orchestration over a ``decode(rows, groups)`` callable (the engine's batch decode and pick),
  so it holds no model state and the engine's hook stays a few lines.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence


def lengths_for(canvases: Sequence[int], cap: int) -> list[int]:
    """The fixed canvas lengths a request with ``cap`` output tokens decodes on, longest first (a
    likelihood tie goes to the longest: the engine's pick keeps the first of equals)."""
    return sorted({max(1, min(n, cap)) for n in canvases}, reverse=True)


def filled(c) -> bool:
    """The answer ran to the end of its canvas without ending or meeting a stop sequence."""
    return c.finish_reason == "length" and c.stop_sequence is None


def longer(n: int, cap: int) -> int | None:
    """The next fixed canvas after one of ``n`` tokens that filled: twice as long, at most ``cap``;
    None once the cap is reached."""
    m = min(2 * n, cap)
    return m if m > n else None


def complete(
    reqs: Sequence,
    canvases: Sequence[int],
    cap_of: Callable[[object], int],
    decode: Callable[[list, list[list[int]]], list],
    likelihood: Callable[[object], float],
) -> list:
    """Each request's answer: its rows on every fixed length in one batch (``decode(rows, groups)``
    returns every row's completion; groups of rows that may end each other early), the likeliest
    that ended kept; when every row filled its canvas,
    the request is decoded again alone on a longer fixed canvas."""
    rows, groups = [], []
    for r in reqs:
        ns = lengths_for(canvases, cap_of(r))
        groups.append(list(range(len(rows), len(rows) + len(ns))))
        rows += [dataclasses.replace(r, max_tokens=n) for n in ns]
    # each row its own group: the single-line canvases' early end for a row that can no longer win on
    # likelihood (model/infer/early_stop.py) would mark a cut-off row as ended, which this pick prefers
    outs = decode(rows, [[j] for j in range(len(rows))])
    # an answer that ended beats one cut off by its canvas (whose likelihood lacks its end's cost);
    # max keeps the first of equals: a tie goes to the longest canvas
    best = [max((outs[j] for j in g), key=lambda c: (not filled(c), likelihood(c))) for g in groups]
    tried = [lengths_for(canvases, cap_of(r))[0] for r in reqs]  # each request's longest canvas so far

    def grow(i: int) -> int | None:  # every row filled: a longer fixed canvas, up to the cap
        return longer(tried[i], cap_of(reqs[i])) if filled(best[i]) else None

    again = [i for i in range(len(reqs)) if grow(i)]
    while again:
        sizes = [grow(i) for i in again]
        redo = [dataclasses.replace(reqs[i], max_tokens=n) for i, n in zip(again, sizes)]
        for i, n, c in zip(again, sizes, decode(redo, [[k] for k in range(len(redo))])):
            best[i], tried[i] = c, n
        again = [i for i in again if grow(i)]
    return best
