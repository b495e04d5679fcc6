"""Models compared on the same replay points: acceptance against shown rate (editserver/replay/compare.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from editserver.replay.compare import render_comparison


def _result(shown: float, acc: float, requests: int = 300) -> dict:
    sweep = [
        {"threshold": t / 10, "shown_rate": shown * (1 - t / 10), "acceptance_rate": acc, "utility": 0.0}
        for t in range(11)
    ]
    summary = {"requests": requests, "shown_rate": shown, "acceptance_rate": acc, "utility": 0.01}
    fim = {"requests": 200, "shown_rate": 0.02, "exact_among_shown": 0.5, "utility": 0.0}
    return {
        "summary": summary,
        "sweep": sweep,
        "fim": {"summary": fim, "sweep": sweep},
        "settings": {"records": ["a.jsonl.xz"], "max_points": 300, "max_fim": 200, "points": {"seed": 0}},
    }


def test_two_models_on_one_chart_with_their_operating_points() -> None:
    page = render_comparison({"shipped": _result(0.027, 0.25), "aligned": _result(0.033, 0.2)})
    assert page.count("<svg") == 2 and "shipped" in page and "aligned" in page
    assert "2.7%" in page and "3.3%" in page and "25.0%" in page


def test_runs_on_different_points_are_refused() -> None:
    other = _result(0.03, 0.2)
    other["settings"]["max_points"] = 100
    with pytest.raises(ValueError, match="max_points"):
        render_comparison({"a": _result(0.03, 0.2), "b": other})
    with pytest.raises(ValueError, match="different numbers"):
        render_comparison({"a": _result(0.03, 0.2), "b": _result(0.03, 0.2, requests=299)})
    with pytest.raises(ValueError, match="at least two"):
        render_comparison({"a": _result(0.03, 0.2)})


def test_the_command_writes_the_page_and_says_what_is_wrong(tmp_path) -> None:
    for name, r in (("a", _result(0.03, 0.2)), ("b", _result(0.01, 0.5))):
        (tmp_path / f"{name}.json").write_text(json.dumps(r))
    cmd = [sys.executable, "-m", "editserver.cli", "replay", "--compare", f"a={tmp_path / 'a.json'}"]
    cmd += ["--compare", f"b={tmp_path / 'b.json'}"]
    r = subprocess.run([*cmd, "--html", str(tmp_path / "c.html")], capture_output=True, text=True)
    assert r.returncode == 0 and (tmp_path / "c.html").read_text().count("<svg") == 2
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 2 and "--html" in r.stderr and "Traceback" not in r.stderr
