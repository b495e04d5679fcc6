"""Acceptance metrics over labelled suggestions, threshold sweeps, and the threshold choice.

Design decisions:
- A row is one request's outcome (a dict, exactly as logged). It is *shown* when it is a real
  proposal (accepted or rejected, see judge.py) and clears the threshold in force; suppressed,
  unchanged, blank and failed requests are not shown.
- A threshold is one number, None (the source's own decision, ``above_threshold``), or a dict of
  one per next-edit kind (``in_file``, ``cross_file``: replay/kinds.py), read by the row's ``where``.
- Utility per request rewards a shown suggestion +0.75 when accepted and -0.25 when rejected (Cursor's
  reward), 0 when nothing is shown: staying quiet is free, so it is positive only when more than a
  quarter of what is shown gets accepted.
- FIM rows carry the same labels (judge.py: accepted = the exact rest of the line, rejected, empty),
  so shown rate, utility, sweeps and the threshold choice are the same functions for both kinds. A
  FIM summary keeps ``exact_match_rate`` over all requests (the model's, whatever is shown) and adds
  what the FIM threshold makes of it: ``shown_rate``, ``exact_among_shown`` and ``utility``.
- ``threshold=None`` means "the source's own decision" (``above_threshold`` as the server reported it);
  a number re-decides from the row's score under the chosen aggregate, so any threshold and any
  aggregate can be evaluated offline from one replay.
- Rates with an empty denominator are ``None`` (JSON null), never a misleading 0.
- Latency percentiles are the benchmarks' (bench/_stats.py): linear interpolation between ranks.
- The threshold is chosen on a fixed grid (0.00 to 1.00 by 0.01), in the middle of the run of
  thresholds that share the best utility (the widest margin to the tuning scores); when no
  threshold makes showing pay, 1.0 (suppress) is chosen. The aggregate is chosen by the best utility it reaches, then by ROC AUC (how well its
  score separates accepted from rejected proposals).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from editserver.bench._stats import percentile

REWARD_ACCEPT, REWARD_REJECT = 0.75, -0.25
GRID = [round(i / 100, 2) for i in range(101)]
CANDIDATE = ("accepted", "rejected")


def row_score(row: dict, aggregate: str | None) -> float | None:
    if aggregate and aggregate in (row.get("scores") or {}):
        return row["scores"][aggregate]
    return row.get("score")


def kind_of(row: dict) -> str:
    """A next-edit row's kind: ``in_file`` or ``cross_file`` (rows logged before kinds: in-file)."""
    return row.get("where") or "in_file"


def is_shown(row: dict, threshold: float | dict | None, aggregate: str | None) -> bool:
    if row.get("label") not in CANDIDATE:
        return False
    if isinstance(threshold, dict):  # one per next-edit kind (replay/kinds.py)
        threshold = threshold.get(kind_of(row))
    if threshold is None:
        return row.get("above_threshold") is not False
    s = row_score(row, aggregate)
    return s is None or s >= threshold


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def summarize(rows: list[dict], threshold: float | dict | None = None, aggregate: str | None = None) -> dict:
    n = len(rows)
    shown = [r for r in rows if is_shown(r, threshold, aggregate)]
    acc = sum(r["label"] == "accepted" for r in shown)
    rej = len(shown) - acc
    exact = sum(bool(r.get("exact")) for r in shown)
    lat = [r["latency_ms"] for r in rows if r.get("latency_ms") is not None and not r.get("error")]
    return {
        "requests": n,
        "shown": len(shown),
        "accepted": acc,
        "rejected": rej,
        "exact": exact,
        "errors": sum(bool(r.get("error")) for r in rows),
        # requests where a remaining hunk overlaps the editable region: the ceiling on accepted ones
        "reachable": sum(bool(r.get("reachable")) for r in rows),
        "shown_rate": _ratio(len(shown), n),
        "acceptance_rate": _ratio(acc, len(shown)),
        "exact_match_rate": _ratio(exact, n),
        "kept_rate": _ratio(sum(r.get("kept", 0.0) for r in shown), len(shown)),
        "utility": _ratio(REWARD_ACCEPT * acc + REWARD_REJECT * rej, n),
        "latency_ms": {"p50": percentile(lat, 0.5), "p95": percentile(lat, 0.95)},
        "threshold": threshold,
        "score_aggregate": aggregate,
    }


def group_by(rows: Iterable[dict], key: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        out[str(r.get(key))].append(r)
    return dict(sorted(out.items()))


def breakdown(rows: list[dict], threshold: float | dict | None, aggregate: str | None) -> dict:
    return {
        "by_language": {k: summarize(v, threshold, aggregate) for k, v in group_by(rows, "lang").items()},
        "by_repository": {k: summarize(v, threshold, aggregate) for k, v in group_by(rows, "repo").items()},
    }


def sweep(rows: list[dict], aggregate: str | None, grid: list[float] = GRID) -> list[dict]:
    """Shown rate, acceptance rate and utility at each threshold (one pass over sorted scores)."""
    n = len(rows)
    cands = sorted(
        (
            (row_score(r, aggregate) or 0.0, r["label"] == "accepted")
            for r in rows
            if r.get("label") in CANDIDATE
        ),
        reverse=True,
    )
    out = []
    for t in grid:
        shown = [ok for s, ok in cands if s >= t]
        acc = sum(shown)
        rej = len(shown) - acc
        out.append(
            {
                "threshold": t,
                "shown_rate": _ratio(len(shown), n),
                "acceptance_rate": _ratio(acc, len(shown)),
                "utility": _ratio(REWARD_ACCEPT * acc + REWARD_REJECT * rej, n) or 0.0,
            }
        )
    return out


def auc(rows: list[dict], aggregate: str | None) -> float | None:
    """ROC AUC of the score for accepted vs rejected proposals (ties count half)."""
    pos = [row_score(r, aggregate) or 0.0 for r in rows if r.get("label") == "accepted"]
    neg = [row_score(r, aggregate) or 0.0 for r in rows if r.get("label") == "rejected"]
    if not pos or not neg:
        return None
    wins = sum((p > q) + 0.5 * (p == q) for p in pos for q in neg)
    return wins / (len(pos) * len(neg))


def best_threshold(curve: list[dict]) -> dict:
    """The curve point to choose: the middle of the best-utility plateau, or 1.0 if showing never pays.

    Thresholds between two observed scores give equal utility; the middle of that run keeps the
    widest margin to the tuning set's scores on both sides. When no threshold makes showing pay
    (best utility <= 0, the model's proposals lose more than they win), the choice is to suppress.
    """
    top = max(round(c["utility"], 12) for c in curve)
    if top <= 0 and round(curve[-1]["utility"], 12) == top:
        return curve[-1]
    first = next(i for i, c in enumerate(curve) if round(c["utility"], 12) == top)
    last = first
    while last + 1 < len(curve) and round(curve[last + 1]["utility"], 12) == top:
        last += 1
    return curve[(first + last) // 2]


def compare_aggregates(rows: list[dict], aggregates: list[str]) -> dict[str, dict]:
    out = {}
    for a in aggregates:
        curve = sweep(rows, a)
        best = best_threshold(curve)
        out[a] = {
            "auc": auc(rows, a),
            "best_threshold": best["threshold"],
            "best_utility": best["utility"],
            "curve": curve,
        }
    return out


def choose(comparison: dict[str, dict], prefer: str | None = None) -> tuple[str, float]:
    """(aggregate, threshold) with the best utility; AUC, then the current aggregate, break ties."""

    def key(item):
        name, c = item
        return (round(c["best_utility"], 12), c["auc"] or 0.0, name == prefer)

    name, c = max(comparison.items(), key=key)
    return name, c["best_threshold"]


def fim_summary(rows: list[dict], threshold: float | None = None, aggregate: str | None = None) -> dict:
    """FIM quality (the model's, shown or not) and what the threshold in force makes of it."""
    n = len(rows)
    lat = [r["latency_ms"] for r in rows if not r.get("error")]
    shown = [r for r in rows if is_shown(r, threshold, aggregate)]
    hits = sum(bool(r.get("exact")) for r in shown)
    return {
        "requests": n,
        "exact_match_rate": _ratio(sum(bool(r.get("exact")) for r in rows), n),
        # after protocol/postprocess.py, as the HTTP API sends it
        "exact_match_rate_postprocessed": _ratio(sum(bool(r.get("exact_postprocessed")) for r in rows), n),
        "accepted_prefix_chars": _ratio(sum(r.get("prefix_chars", 0) for r in rows), n),
        "accepted_prefix_fraction": _ratio(sum(r.get("prefix_fraction", 0.0) for r in rows), n),
        "shown": len(shown),
        "shown_rate": _ratio(len(shown), n),
        "exact_among_shown": _ratio(hits, len(shown)),
        "utility": _ratio(REWARD_ACCEPT * hits + REWARD_REJECT * (len(shown) - hits), n),
        "errors": sum(bool(r.get("error")) for r in rows),
        "latency_ms": {"p50": percentile(lat, 0.5), "p95": percentile(lat, 0.95)},
        "threshold": threshold,
        "score_aggregate": aggregate,
    }


def fim_block(rows: list[dict], threshold: float | None = None, aggregate: str | None = None) -> dict:
    def by(key: str) -> dict:
        return {k: fim_summary(v, threshold, aggregate) for k, v in group_by(rows, key).items()}

    return {
        "summary": fim_summary(rows, threshold, aggregate),
        "by_position": by("position"),
        "by_language": by("lang"),
        "by_repository": by("repo"),
        "sweep": sweep(rows, aggregate) if rows else [],
    }
