"""Line charts as inline SVG: the report's threshold curves, with no plotting library and no network.

Design decisions:
- One function, ``line_chart``, draws several named series over a shared x axis with fixed ticks,
  a legend and a dashed vertical marker (the chosen threshold); ``None`` values break a line.
- Colours come from a fixed palette, so the same series look the same across charts.
- Everything is escaped; the SVG is a string embedded directly in the HTML report.
"""

from __future__ import annotations

from html import escape

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    return [lo + (hi - lo) * i / (n - 1) for i in range(n)]


def line_chart(
    series: dict[str, list[tuple[float, float | None]]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    y_range: tuple[float, float] | None = None,
    marker: float | None = None,
    width: int = 520,
    height: int = 300,
) -> str:
    left, right, top, bottom = 56, 130, 30, 44
    pw, ph = width - left - right, height - top - bottom
    xs = [x for pts in series.values() for x, _ in pts]
    ys = [y for pts in series.values() for _, y in pts if y is not None]
    x0, x1 = (min(xs), max(xs)) if xs else (0.0, 1.0)
    if y_range is not None:
        y0, y1 = y_range
    else:
        y0, y1 = (min(ys), max(ys)) if ys else (0.0, 1.0)
        if y1 - y0 < 1e-9:
            y0, y1 = y0 - 0.5, y1 + 0.5
    x1 = x1 if x1 > x0 else x0 + 1.0

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def py(y: float) -> float:
        return top + (1 - (y - y0) / (y1 - y0)) * ph

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f'<text x="{left}" y="16" font-size="13" font-weight="bold">{escape(title)}</text>',
        f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>',
    ]
    for t in _ticks(x0, x1, 6):
        out.append(
            f'<line x1="{px(t):.1f}" y1="{top + ph}" x2="{px(t):.1f}" y2="{top + ph + 4}" stroke="#999"/>'
        )
        out.append(f'<text x="{px(t):.1f}" y="{top + ph + 16}" text-anchor="middle">{t:.2f}</text>')
    y_fmt = ".2f" if y1 - y0 >= 0.5 else ".3f"
    for t in _ticks(y0, y1, 5):
        out.append(f'<line x1="{left}" y1="{py(t):.1f}" x2="{left + pw}" y2="{py(t):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{left - 6}" y="{py(t) + 4:.1f}" text-anchor="end">{t:{y_fmt}}</text>')
    if y0 < 0 < y1:
        out.append(f'<line x1="{left}" y1="{py(0):.1f}" x2="{left + pw}" y2="{py(0):.1f}" stroke="#666"/>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 8}" text-anchor="middle">{escape(x_label)}</text>')
    out.append(
        f'<text x="14" y="{top + ph / 2}" text-anchor="middle" transform="rotate(-90 14 {top + ph / 2})">'
        f"{escape(y_label)}</text>"
    )
    if marker is not None and x0 <= marker <= x1:
        out.append(
            f'<line x1="{px(marker):.1f}" y1="{top}" x2="{px(marker):.1f}" y2="{top + ph}" '
            f'stroke="#000" stroke-dasharray="4 3"/>'
        )
    for i, (name, pts) in enumerate(series.items()):
        color = PALETTE[i % len(PALETTE)]
        segs, cur = [], []
        for x, y in pts:
            if y is None:
                if cur:
                    segs.append(cur)
                cur = []
            else:
                cur.append(f"{px(x):.1f},{py(min(max(y, y0), y1)):.1f}")
        if cur:
            segs.append(cur)
        for seg in segs:
            out.append(
                f'<polyline fill="none" stroke="{color}" stroke-width="1.8" points="{" ".join(seg)}"/>'
            )
        ly = top + 8 + i * 16
        out.append(
            f'<line x1="{left + pw + 10}" y1="{ly}" x2="{left + pw + 28}" y2="{ly}" '
            f'stroke="{color}" stroke-width="2"/>'
        )
        out.append(f'<text x="{left + pw + 32}" y="{ly + 4}">{escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out)
