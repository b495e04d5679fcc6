"""The self-contained HTML report: metric tables, threshold curves, example suggestions as diffs.

Design decisions:
- One HTML file with inline CSS and inline SVG (svg.py): it opens offline, can be mailed or
  attached to CI, and loads nothing from the network.
- It is rendered from the same result dict the ``--json`` output holds, so the two never disagree.
- Next edit is also shown per kind (in-file, cross-file): each kind's held-out figures under the
  joint threshold and under the per-kind ones (replay/kinds.py), and each kind's tuning or why it
  kept the joint threshold.
- FIM gets the same treatment as next edit: its threshold in force, its tuning (chosen threshold,
  ROC AUC, curves on the training repositories) and its sweep on the evaluation repositories.
- Examples are picked deterministically (accepted and rejected proposals in id order, shown ones
  first, then ones with an actual change to compare against) and shown as unified diffs of
  the region: what the model proposed, and what the developer did.
"""

from __future__ import annotations

import difflib
from html import escape

from editserver.replay import kinds
from editserver.replay.svg import line_chart

CSS = """
body{font-family:-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.5em}h2{margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.6em 0;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}
pre{background:#f8f8f8;padding:6px;overflow-x:auto;font-size:12px;border:1px solid #e4e4e4}
.add{color:#116611}.del{color:#aa1111}.hdr{color:#777}.muted{color:#777;font-size:12px}
.charts{display:flex;flex-wrap:wrap;gap:12px}
"""

EDIT_COLS = [
    ("requests", "requests", "int"),
    ("reachable", "reachable", "int"),
    ("shown rate", "shown_rate", "pct"),
    ("acceptance", "acceptance_rate", "pct"),
    ("exact match", "exact_match_rate", "pct"),
    ("kept rate", "kept_rate", "pct"),
    ("utility", "utility", "num"),
    ("p50 ms", ("latency_ms", "p50"), "ms"),
    ("p95 ms", ("latency_ms", "p95"), "ms"),
]
FIM_COLS = [
    ("requests", "requests", "int"),
    ("exact match", "exact_match_rate", "pct"),
    ("accepted prefix (chars)", "accepted_prefix_chars", "num1"),
    ("accepted prefix (share)", "accepted_prefix_fraction", "pct"),
    ("shown rate", "shown_rate", "pct"),
    ("exact among shown", "exact_among_shown", "pct"),
    ("utility", "utility", "num"),
    ("p50 ms", ("latency_ms", "p50"), "ms"),
    ("p95 ms", ("latency_ms", "p95"), "ms"),
]


def fmt(v, how: str) -> str:
    if v is None:
        return "–"
    if how == "pct":
        return f"{100 * v:.1f}%"
    if how == "num":
        return f"{v:+.3f}"
    if how == "num1":
        return f"{v:.1f}"
    if how == "dec":
        return f"{v:.3f}"
    if how == "ms":
        return f"{v:.0f}"
    return str(v)


def _get(d: dict, key):
    if isinstance(key, tuple):
        for k in key:
            d = (d or {}).get(k)
        return d
    return d.get(key)


def table(rows: dict[str, dict], cols: list, first: str) -> str:
    head = "".join(f"<th>{escape(c[0])}</th>" for c in cols)
    body = []
    for name, s in rows.items():
        cells = "".join(f"<td>{fmt(_get(s, key), how)}</td>" for _, key, how in cols)
        body.append(f"<tr><td>{escape(name)}</td>{cells}</tr>")
    return f"<table><tr><th>{escape(first)}</th>{head}</tr>{''.join(body)}</table>"


def diff_html(before: str, after: str, label: str) -> str:
    lines = list(
        difflib.unified_diff(before.splitlines(), after.splitlines(), "region", label, lineterm="", n=2)
    )
    out = []
    for line in lines:
        cls = (
            "hdr"
            if line.startswith(("---", "+++", "@@"))
            else "add"
            if line.startswith("+")
            else "del"
            if line.startswith("-")
            else ""
        )
        out.append(f'<span class="{cls}">{escape(line)}</span>' if cls else escape(line))
    return "<pre>" + ("\n".join(out) or "(no change)") + "</pre>"


def _curves_chart(curve: list[dict], title: str, marker: float | None) -> str:
    pts = {
        "shown rate": [(c["threshold"], c["shown_rate"]) for c in curve],
        "acceptance": [(c["threshold"], c["acceptance_rate"]) for c in curve],
    }
    rates = line_chart(
        pts, title=f"{title}: rates", x_label="threshold", y_label="rate", y_range=(0.0, 1.0), marker=marker
    )
    u = [c["utility"] for c in curve] or [0.0]
    lo, hi = min(0.0, *u), max(0.0, *u)
    util = line_chart(
        {"utility": [(c["threshold"], c["utility"]) for c in curve]},
        y_range=(lo, hi if hi > lo else lo + 0.1),  # zero always on the axis: above it showing pays
        title=f"{title}: utility per request",
        x_label="threshold",
        y_label="utility",
        marker=marker,
    )
    return f'<div class="charts">{rates}{util}</div>'


def _examples(rows: list[dict], label: str, n: int) -> str:
    # shown ones first; suppressed proposals still illustrate the model when the threshold hides all
    picked = [r for r in rows if r.get("label") == label]
    picked.sort(key=lambda r: (not r.get("shown"), r.get("expected") is None, r["id"]))
    out = []
    for r in picked[:n]:
        score = r.get("shown_score")
        out.append(
            f"<h4>{escape(r['id'])} <span class='muted'>k={r['k']}/{r['n_hunks']} · "
            f"score {fmt(score, 'dec')} · "
            f"kept {100 * r.get('kept', 0):.0f}%{' · exact' if r.get('exact') else ''}"
            f"{'' if r.get('shown') else ' · suppressed by the threshold'}</span></h4>"
        )
        out.append(diff_html(r["region"], r.get("suggestion") or "", "suggested"))
        if r.get("window") is not None:
            out.append(
                "<div class='muted'>what the developer did next (region and the hunks it overlaps):</div>"
            )
            out.append(diff_html(r["window"], r["expected"], "actual"))
    return "".join(out) or "<p class='muted'>none</p>"


TUNING_COLS = [
    ("ROC AUC", "auc", "dec"),
    ("best threshold", "best_threshold", "dec"),
    ("best utility", "best_utility", "num"),
]


def _tuning_rows(tuning: dict) -> dict[str, dict]:
    return {
        name: {"auc": c["auc"], "best_threshold": c["best_threshold"], "best_utility": c["best_utility"]}
        for name, c in tuning["aggregates"].items()
    }


def _edit_scopes(result: dict) -> dict[str, dict]:
    """The next-edit summary rows: all, cross-file points when there were any."""
    cross = result.get("cross_file") or {}
    return {"all": result["summary"], **({"cross-file": cross} if cross.get("requests") else {})}


def _quiet_line(result: dict) -> str | None:
    q = result.get("quiet") or {}
    if not q.get("requests"):
        return None
    return (
        f"Quiet case (nothing to do in the region, {q['requests']} requests): false alarms "
        f"{q['false_alarms']}, left silent {fmt(q['silent_rate'], 'pct')}, precision of silence "
        f"{fmt(q['silence_precision'], 'pct')}"
    )


def _head(result: dict) -> list[str]:
    s, src = result["summary"], result.get("settings", {})
    thr = s.get("threshold")
    return [
        f"<!doctype html><html><head><meta charset='utf-8'><title>editserver replay</title>"
        f"<style>{CSS}</style></head><body>",
        "<h1>editserver replay: acceptance on real git history</h1>",
        f"<p class='muted'>suggester: {escape(str(result.get('suggester')))} · inputs: "
        f"{escape(', '.join(map(str, src.get('inputs', []))))} · seed {escape(str(src.get('seed')))}"
        f"{'' if result.get('complete', True) else ' · <b>interrupted: partial results</b>'}</p>",
        f"<p>Threshold in force: <b>{escape(kinds.fmt_threshold(thr))}</b>"
        f" on aggregate <b>{escape(str(s.get('score_aggregate')))}</b>.</p>",
    ]


def _next_edit_section(result: dict) -> list[str]:
    parts = ["<h2>Next edit</h2>", table(_edit_scopes(result), EDIT_COLS, "scope")]
    quiet = _quiet_line(result)
    if quiet:
        parts.append(f"<p>{escape(quiet)}</p>")
    per_kind = kinds.comparison_rows(result.get("per_kind") or {})
    if per_kind:
        parts.append("<h3>Per kind: the joint threshold against one per kind</h3>")
        parts.append(table(per_kind, kinds.COLS, "kind, threshold"))
    parts.append("<h3>Per language</h3>" + table(result.get("by_language", {}), EDIT_COLS, "language"))
    parts.append("<h3>Per repository</h3>" + table(result.get("by_repository", {}), EDIT_COLS, "repository"))
    return parts


def _fim_section(fim: dict) -> list[str]:
    if not fim.get("summary", {}).get("requests"):
        return []
    return [
        "<h2>Fill in the middle (rest of an added line)</h2>",
        f"<p>{escape(_fim_threshold_line(fim['summary']))}</p>",
        table({"all": fim["summary"], **fim.get("by_position", {})}, FIM_COLS, "scope"),
        "<h3>Per language</h3>" + table(fim.get("by_language", {}), FIM_COLS, "language"),
        "<h3>Per repository</h3>" + table(fim.get("by_repository", {}), FIM_COLS, "repository"),
    ]


def _tuning_section(tuning: dict) -> list[str]:
    if "chosen" not in tuning:
        return []
    ch = tuning["chosen"]
    written = tuning.get("written_to")
    util_series = {
        name: [(c["threshold"], c["utility"]) for c in a["curve"]] for name, a in tuning["aggregates"].items()
    }
    chosen_curve = tuning["aggregates"][ch["score_aggregate"]]["curve"]
    return [
        f"<p>Tuned on {tuning['summary_untuned']['requests']} requests from training "
        f"repositories: aggregate <b>{escape(ch['score_aggregate'])}</b>, threshold "
        f"<b>{ch['selectivity_threshold']:.2f}</b> (utility there {ch['utility']:+.3f} per request)."
        f"{' Written into ' + escape(str(written)) + '.' if written else ''}</p>",
        *(f"<p>Per kind, {escape(line)}.</p>" for line in kinds.tuning_lines(tuning)),
        table(_tuning_rows(tuning), TUNING_COLS, "aggregate"),
        line_chart(
            util_series,
            title="training repositories: utility by aggregate",
            x_label="threshold",
            y_label="utility",
            marker=ch["selectivity_threshold"],
            width=620,
        ),
        _curves_chart(chosen_curve, "training repositories (tuning)", ch["selectivity_threshold"]),
    ]


def _fim_threshold_section(tuning: dict, fim: dict) -> list[str]:
    parts = ["<h2>FIM threshold</h2>"] if "fim" in tuning or fim.get("sweep") else []
    if "fim" in tuning:
        ft = tuning["fim"]
        parts.append(f"<p>{escape(_fim_tuning_line(tuning))}</p>")
        parts.append(
            _curves_chart(ft["curve"], "FIM, training repositories (tuning)", ft["chosen"]["fim_threshold"])
        )
    if fim.get("sweep"):
        sweep = _curves_chart(
            fim["sweep"], "FIM, evaluation repositories (validation)", fim["summary"]["threshold"]
        )
        parts.append(sweep)
    return parts


def render(result: dict) -> str:
    fim, tuning = result.get("fim") or {}, result.get("tuning") or {}
    parts = _head(result) + _next_edit_section(result) + _fim_section(fim)
    parts += ["<h2>Selectivity threshold</h2>", *_tuning_section(tuning)]
    if result.get("sweep"):
        thr = result["summary"].get("threshold")
        marker = None if isinstance(thr, dict) else thr  # one per kind: no one place on this sweep
        parts.append(_curves_chart(result["sweep"], "evaluation repositories (validation)", marker))
    parts += _fim_threshold_section(tuning, fim)
    suggestions = result.get("suggestions", [])
    parts.append("<h2>Examples</h2><h3>Accepted</h3>" + _examples(suggestions, "accepted", 5))
    parts.append("<h3>Rejected</h3>" + _examples(suggestions, "rejected", 5))
    rob = result.get("robustness") or {}
    if rob:
        parts.append(
            "<h2>Robustness: what was skipped or failed</h2><table><tr><th>reason</th><th>count</th></tr>"
            + "".join(f"<tr><td>{escape(k)}</td><td>{v}</td></tr>" for k, v in sorted(rob.items()))
            + "</table>"
        )
    parts.append("</body></html>")
    return "\n".join(parts)


def _fim_threshold_line(summary: dict) -> str:
    t = summary.get("threshold")
    return (
        f"FIM threshold in force: {'server decides' if t is None else f'{t:.2f}'} on "
        f"{summary.get('score_aggregate')}; a completion below it is not shown. Exact match is the "
        "model's over all requests; shown rate, exact among shown and utility follow the threshold."
    )


def _fim_tuning_line(tuning: dict) -> str:
    ft = tuning["fim"]
    auc = ft.get("auc")
    return (
        f"Tuned on {ft['summary_untuned']['requests']} FIM requests from training repositories: "
        f"{ft['score_aggregate']} >= {ft['chosen']['fim_threshold']:.2f} (utility "
        f"{ft['chosen']['utility']:+.3f} per request, ROC AUC {fmt(auc, 'dec')})."
    )


def _md_table(rows: dict[str, dict], cols: list, first: str) -> str:
    out = [f"| {first} | " + " | ".join(c[0] for c in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, s in rows.items():
        out.append(f"| {name} | " + " | ".join(fmt(_get(s, key), how) for _, key, how in cols) + " |")
    return "\n".join(out)


def markdown(result: dict) -> str:
    """The headline tables as Markdown (for a README); the HTML report has the rest."""
    s = result["summary"]
    thr = s.get("threshold")
    parts = [
        f"Threshold in force: {kinds.fmt_threshold(thr)} on `{s.get('score_aggregate')}`"
        f" · suggester `{result.get('suggester')}`"
        + ("" if result.get("complete", True) else " · **interrupted: partial results**"),
        "",
        "**Next edit**",
        "",
        _md_table({**_edit_scopes(result), **result.get("by_language", {})}, EDIT_COLS, "scope"),
        "",
        _md_table(result.get("by_repository", {}), EDIT_COLS, "repository"),
    ]
    quiet = _quiet_line(result)
    if quiet:
        parts += ["", f"**Quiet case**{quiet[len('Quiet case') :]}"]
    per_kind = kinds.comparison_rows(result.get("per_kind") or {})
    if per_kind:
        parts += ["", "**Per kind**: the joint threshold against one per kind", ""]
        parts += [_md_table(per_kind, kinds.COLS, "kind, threshold")]
    fim = result.get("fim") or {}
    if fim.get("summary", {}).get("requests"):
        rows = {"all": fim["summary"], **fim.get("by_position", {}), **fim.get("by_language", {})}
        parts += ["", "**FIM (rest of an added line)**", "", _fim_threshold_line(fim["summary"])]
        parts += ["", _md_table(rows, FIM_COLS, "scope")]
    tuning = result.get("tuning") or {}
    if "chosen" in tuning:
        ch, lines = tuning["chosen"], kinds.tuning_lines(tuning)
        parts += [
            "",
            f"**Tuning** on {tuning['summary_untuned']['requests']} requests from training repositories: "
            f"chosen `{ch['score_aggregate']}` >= {ch['selectivity_threshold']:.2f} (utility {ch['utility']:+.3f})",
            "",
            *(f"- per kind, {line}" for line in lines),
            *([""] if lines else []),
            _md_table(_tuning_rows(tuning), TUNING_COLS, "aggregate"),
        ]
    if "fim" in tuning:
        parts += ["", f"**FIM tuning**: {_fim_tuning_line(tuning)}"]
    return "\n".join(parts) + "\n"
