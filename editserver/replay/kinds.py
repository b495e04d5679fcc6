"""Next-edit thresholds per kind: in-file and cross-file points tuned apart, reported beside the joint one.

Design decisions:
- Two kinds, a row's ``where`` (points.py, crossfile.py): ``in_file`` (the edited file's regions)
  and ``cross_file`` (a file that follows the change). The server holds a request to its kind's
  threshold (``edit_kind`` on ``/v1/edit/completions``, the checkpoint's ``in_file_threshold`` /
  ``cross_file_threshold``), so the replay tunes and reports the same split.
- Each kind is tuned on its own tuning points, the quiet ones among them included (nothing the
  developer did next touches the region, crossfile.quiet: a suggestion shown there is a rejection,
  -0.25, so silence is what they reward), on the aggregate the joint tuning chose (a checkpoint
  scores with one aggregate), by the joint tuning's rule (metrics.best_threshold).
- ``MIN_ACCEPTED`` (5): a kind whose tuning points hold fewer accepted proposals than that (the
  most any threshold can show) keeps the joint threshold, and the result says so (``fallback``,
  printed by the CLI and the reports): with fewer, one acceptance more or less moves the optimum,
  which is noise, not a property of the kind.
- A threshold rule is one number for both kinds, or a dict kind -> threshold (metrics.is_shown
  reads the row's kind); ``rule`` collapses equal per-kind thresholds to one number, so a run whose
  kinds both keep the joint threshold reads as before.
- The held-out comparison (``compare``) summarises each kind's rows under the joint threshold and
  under the per-kind ones, in the same run: the same answers, only the cut differs.
"""

from __future__ import annotations

from editserver.replay import metrics
from editserver.replay.crossfile import quiet

KINDS = ("in_file", "cross_file")
LABELS = {"in_file": "in-file", "cross_file": "cross-file"}
MIN_ACCEPTED = 5

Rule = float | dict[str, float | None] | None


def rows_of(rows: list[dict], kind: str) -> list[dict]:
    return [r for r in rows if metrics.kind_of(r) == kind]


def _tune_one(own: list[dict], aggregate: str | None, joint: float) -> dict:
    accepted = sum(r.get("label") == "accepted" for r in own)
    entry = {
        "requests": len(own),
        "quiet": sum(quiet(r) for r in own if not r.get("error")),
        "accepted": accepted,
        "joint_utility": metrics.summarize(own, joint, aggregate)["utility"],
    }
    if accepted < MIN_ACCEPTED:
        return {
            **entry,
            "threshold": joint,
            "utility": entry["joint_utility"],
            "tuned": False,
            "fallback": f"{accepted} accepted among {len(own)} tuning points, fewer than {MIN_ACCEPTED}",
        }
    curve = metrics.sweep(own, aggregate)
    best = metrics.best_threshold(curve)
    return {
        **entry,
        "threshold": best["threshold"],
        "utility": best["utility"],
        "tuned": True,
        "fallback": None,
        "curve": curve,
    }


def tune_kinds(rows: list[dict], aggregate: str | None, joint: float) -> dict[str, dict]:
    """Each kind's threshold on its own tuning ``rows`` (quiet ones included), else the joint one."""
    return {kind: _tune_one(rows_of(rows, kind), aggregate, joint) for kind in KINDS}


def rule(thresholds: dict[str, float | None]) -> Rule:
    """The per-kind rule; one number when every kind has the same threshold."""
    values = {thresholds.get(k) for k in KINDS}
    return values.pop() if len(values) == 1 else {k: thresholds.get(k) for k in KINDS}


def tuned_rule(per_kind: dict[str, dict]) -> Rule:
    return rule({k: per_kind[k]["threshold"] for k in KINDS})


def source_rule(s) -> Rule:
    """The thresholds the source applies per kind (a scripted source may name one for both)."""
    own = getattr(s, "thresholds", None)
    return rule(own) if own else s.threshold


def compare(rows: list[dict], joint: float | None, per_kind: Rule, aggregate: str | None) -> dict:
    """Each kind's held-out rows under the joint threshold (None when the source did not say it)
    and under the per-kind rule in force."""
    out = {}
    for kind in KINDS:
        own = rows_of(rows, kind)
        out[kind] = {
            "joint": None if joint is None else metrics.summarize(own, joint, aggregate),
            "per_kind": metrics.summarize(own, per_kind, aggregate),
        }
    return out


def fmt_threshold(t: Rule) -> str:
    """A rule for people: ``0.79``, ``in-file 0.95 · cross-file 0.79``, or ``server decides``."""
    if isinstance(t, dict):
        return " · ".join(f"{LABELS[k]} {fmt_threshold(t.get(k))}" for k in KINDS)
    return "server decides" if t is None else f"{t:.2f}"


def tuning_lines(tuning: dict) -> list[str]:
    """One line per kind: its tuned threshold, or why it keeps the joint one."""
    per_kind = tuning.get("per_kind") or {}
    agg = (tuning.get("chosen") or {}).get("score_aggregate")
    out = []
    for kind in KINDS:
        k = per_kind.get(kind)
        if k is None:
            continue
        head = f"{LABELS[kind]} ({k['requests']} points, {k['quiet']} quiet, {k['accepted']} accepted): "
        if k["tuned"]:
            out.append(
                head + f"{agg} >= {k['threshold']:.2f} (utility {k['utility']:+.3f}; "
                f"{_num(k['joint_utility'])} at the joint threshold)"
            )
        else:
            out.append(head + f"keeps the joint threshold {k['threshold']:.2f}: {k['fallback']}")
    return out


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:+.3f}"


COLS = [
    ("points", "requests", "int"),
    ("shown", "shown", "int"),
    ("accepted", "accepted", "int"),
    ("acceptance", "acceptance_rate", "pct"),
    ("utility", "utility", "num"),
]


def comparison_rows(per_kind: dict) -> dict[str, dict]:
    """Table rows ``in-file, joint 0.79`` / ``in-file, per kind 0.95`` ...; kinds without points left out."""
    out: dict[str, dict] = {}
    for kind in KINDS:
        c = per_kind.get(kind) or {}
        if not (c.get("per_kind") or {}).get("requests"):
            continue
        if c.get("joint") is not None:
            out[f"{LABELS[kind]}, joint {fmt_threshold(c['joint']['threshold'])}"] = c["joint"]
        t = c["per_kind"]["threshold"]
        own = t.get(kind) if isinstance(t, dict) else t
        out[f"{LABELS[kind]}, per kind {fmt_threshold(own)}"] = c["per_kind"]
    return out
