"""Aggregates of per-token confidences into one suggestion score (the selectivity signal).

Design decisions:
- A registry of pure functions keyed by name; the checkpoint's ``score_aggregate`` names one, and
  the replay harness compares them by measurement before choosing.
- Scores lie in [0, 1]; an empty answer scores 1 (nothing uncertain was proposed).
- The candidates span the range from "one doubtful token sinks it" (``min``) through the lowest
  quarter (``tail_mean``), the (geometric) mean, to the typical token (``median``); the replay harness
  measures which one best separates accepted from rejected edits (editserver replay --tune-records).
- A rewrite that changes only layout (``layout_only``: the same code with line breaks, blank lines or
  trailing blanks moved) is no proposal, like one equal to its region: in replay such rewrites were
  copy slips (a line broken mid-expression, two lines joined, a stray blank line), and layout is a
  formatter's job. Re-indenting lines (same lines, other leading blanks) is a real edit and stays.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

_BLANKS = re.compile(r"\s+")


def _mean(c: Sequence[float]) -> float:
    return sum(c) / len(c)


def _geomean(c: Sequence[float]) -> float:
    return math.exp(sum(math.log(max(x, 1e-9)) for x in c) / len(c))


def _min(c: Sequence[float]) -> float:
    return min(c)


def _tail_mean(c: Sequence[float]) -> float:
    """Mean of the least confident quarter: sensitive to a few doubtful tokens, robust to one."""
    k = max(1, len(c) // 4)
    return sum(sorted(c)[:k]) / k


def _median(c: Sequence[float]) -> float:
    """Typical token confidence: ignores a few doubtful tokens entirely (the opposite of ``min``)."""
    s = sorted(c)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


AGGREGATES: dict[str, Callable[[Sequence[float]], float]] = {
    "mean": _mean,
    "geomean": _geomean,
    "min": _min,
    "tail_mean": _tail_mean,
    "median": _median,
}


def aggregate(confidences: Sequence[float], how: str = "mean") -> float:
    if how not in AGGREGATES:
        raise ValueError(f"unknown score aggregate {how!r}; choose from {sorted(AGGREGATES)}")
    return AGGREGATES[how](confidences) if len(confidences) else 1.0


def layout_only(region: str, rewrite: str) -> bool:
    """``rewrite`` differs from ``region`` only in blanks, and not only in the lines' indentation."""
    if rewrite == region or _BLANKS.sub("", rewrite) != _BLANKS.sub("", region):
        return False
    return [x.lstrip() for x in rewrite.splitlines()] != [x.lstrip() for x in region.splitlines()]
