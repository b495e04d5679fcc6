"""Models side by side: acceptance against shown rate, from the ``--json`` results of replay runs.

Design decisions:
- Each run's threshold sweep on the evaluation repositories (``sweep``, and ``fim.sweep``) traces
  how often a model is shown and how often it is then right as its threshold moves; plotted as
  acceptance over shown rate, the curves of two models compare selectivity at every operating
  point, not only at the thresholds each was tuned to. Each model's own operating point (its
  summary's shown rate) is listed in the table beside the charts.
- Runs compare only on the same points: the report refuses results whose evaluation settings or
  request counts differ.
- Pure: results in, one self-contained HTML page out (svg.py draws the charts).
"""

from __future__ import annotations

from html import escape

from editserver.replay.svg import line_chart

_SAME = ("records", "max_points", "max_fim", "points")


def _curve(sweep: list[dict]) -> list[tuple[float, float | None]]:
    """(shown rate, acceptance) for each threshold where something is shown, by shown rate."""
    pts = {round(c["shown_rate"], 6): c["acceptance_rate"] for c in sweep if c["shown_rate"] > 0}
    return sorted(pts.items())


def check_comparable(results: dict[str, dict]) -> None:
    """ValueError naming the first setting two runs disagree on (they must share their points)."""
    names = list(results)
    base = results[names[0]]
    for name in names[1:]:
        r = results[name]
        for key in _SAME:
            if base.get("settings", {}).get(key) != r.get("settings", {}).get(key):
                raise ValueError(f"{names[0]} and {name} were replayed with different {key}")
        for kind in ("summary", "fim"):
            a = base[kind] if kind == "summary" else base["fim"]["summary"]
            b = r[kind] if kind == "summary" else r["fim"]["summary"]
            if a["requests"] != b["requests"]:
                raise ValueError(f"{names[0]} and {name} answered different numbers of {kind} requests")


def _row(name: str, r: dict) -> str:
    s, f = r["summary"], r["fim"]["summary"]

    def pct(v) -> str:
        return "n/a" if v is None else f"{100 * v:.1f}%"

    def num(v) -> str:
        return "n/a" if v is None else f"{v:+.3f}"

    cells = [
        name,
        pct(s["shown_rate"]),
        pct(s["acceptance_rate"]),
        num(s["utility"]),
        pct(f["shown_rate"]),
        pct(f.get("exact_among_shown")),
        num(f["utility"]),
    ]
    return "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>"


def render_comparison(results: dict[str, dict]) -> str:
    """One HTML page comparing replay results (name -> the ``--json`` document)."""
    if len(results) < 2:
        raise ValueError("a comparison needs at least two replay results")
    check_comparable(results)
    edit = line_chart(
        {n: _curve(r["sweep"]) for n, r in results.items()},
        title="next edits: acceptance against shown rate (evaluation repositories)",
        x_label="shown rate",
        y_label="accepted among shown",
        y_range=(0.0, 1.0),
    )
    fim = line_chart(
        {n: _curve(r["fim"]["sweep"]) for n, r in results.items()},
        title="FIM: exact among shown against shown rate",
        x_label="shown rate",
        y_label="exact among shown",
        y_range=(0.0, 1.0),
    )
    head = (
        "<tr><th>model</th><th>edits shown</th><th>accepted among shown</th><th>edit utility</th>"
        "<th>FIM shown</th><th>exact among shown</th><th>FIM utility</th></tr>"
    )
    rows = "".join(_row(n, r) for n, r in results.items())
    return (
        "<!doctype html><meta charset='utf-8'><title>editserver replay: models compared</title>"
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
        "td,th{padding:2px 8px;border-bottom:1px solid #ddd}</style>"
        "<h1>Replay: models compared on the same points</h1>"
        f"<p>Each model at its own tuned thresholds:</p><table>{head}{rows}</table>"
        f"<h2>Next edits</h2>{edit}<h2>FIM</h2>{fim}"
    )
