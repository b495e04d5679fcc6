"""The replay's HTML report and Markdown tables carry the same rows (editserver/replay/report.py)."""

from __future__ import annotations

from editserver.replay.report import markdown, render


def _result() -> dict:
    summary = {
        "requests": 150,
        "shown_rate": 0.04,
        "acceptance_rate": 0.0,
        "utility": -0.01,
        "threshold": 0.79,
    }
    return {
        "summary": summary,
        "cross_file": {"requests": 60, "shown_rate": 0.23, "acceptance_rate": 0.79, "utility": 0.125},
        "quiet": {"requests": 97, "false_alarms": 1, "silent_rate": 0.99, "silence_precision": 0.5},
        "by_language": {"python": summary},
        "suggestions": [],
    }


def test_html_and_markdown_both_show_cross_file_and_quiet_rows() -> None:
    html, md = render(_result()), markdown(_result())
    assert "<td>cross-file</td>" in html and "| cross-file |" in md
    assert "+0.125" in html and "+0.125" in md
    # the quiet case is HTML in the page (no Markdown markers), bold in the Markdown
    assert "<p>Quiet case (nothing to do in the region, 97 requests): false alarms 1" in html
    assert "**" not in html
    assert "**Quiet case** (nothing to do in the region, 97 requests)" in md


def test_report_without_cross_file_or_quiet_points_leaves_them_out() -> None:
    r = _result()
    r["cross_file"], r["quiet"] = {"requests": 0}, {}
    html, md = render(r), markdown(r)
    assert "cross-file" not in html and "Quiet case" not in html
    assert "cross-file" not in md and "Quiet case" not in md
