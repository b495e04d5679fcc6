"""Summary statistics the benchmarks and the replay report: one definition of a percentile for all.

Design decisions:
- A percentile interpolates linearly between the two nearest ranks of the sorted samples (numpy's
  default, ``method="linear"``): the q-th of n sorted samples sits at rank (n - 1) * q, so p50 is
  the median (of [1, 2, 3, 4]: 2.5) and p95 of few samples does not jump a whole sample at once.
  Before, four benchmarks took a nearest rank and the replay interpolated, so "p50" meant two
  different things; interpolation is the one the figures pinned by tests were computed with
  (``editserver replay`` and ``bench fim``), and nearest rank by any convention would move them.
- An empty sample has no percentile: None (JSON null), never a misleading 0.
- Benchmarks' own ``stats`` blocks (count, p50, p95, mean in milliseconds to 0.1) come from
  ``latency_stats``, so every latency scenario reports the same keys.
- Named with a leading ``_``: a helper the benchmarks share, not a benchmark (cli/bench.py).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float, digits: int | None = None) -> float | None:
    """The ``q``-quantile (0 <= q <= 1) of ``values``, interpolated linearly between ranks; None
    when empty. ``digits``: rounded to that many decimals."""
    if not values:
        return None
    v = sorted(values)
    pos = (len(v) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    out = v[lo] + (v[hi] - v[lo]) * (pos - lo)
    return out if digits is None else round(out, digits)


def latency_stats(values: Sequence[float]) -> dict:
    """Count, p50, p95 and mean of millisecond samples, to 0.1 ms (None where there are none)."""
    return {
        "n": len(values),
        "p50_ms": percentile(values, 0.50, 1),
        "p95_ms": percentile(values, 0.95, 1),
        "mean_ms": round(statistics.fmean(values), 1) if values else None,
    }
