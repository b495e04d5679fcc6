"""`editserver bench latency` runs end to end (tiny model) and reports p50/p95 per layer."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.lsp.conftest import REPO, quiet_env


def test_bench_latency_reports_percentiles(tiny_server):
    cmd = [sys.executable, "-m", "editserver.cli", "bench", "latency", "--url", tiny_server]
    cmd += ["--samples", "6", "--next-edits", "2", "--debounce-ms", "0", "--json"]
    cmd += ["--cross-file", "1", "--workspace-files", "60"]
    out = subprocess.run(cmd, cwd=REPO, env=quiet_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    k = report["keystroke_to_suggestion"]
    # 6 scripted keystrokes, plus a few more to find and type along a suggestion
    assert k["n"] >= 6 and 0 < k["p50_ms"] <= k["p95_ms"]
    assert report["model_answers"]["n"] + report["cache_answers"]["n"] == k["n"]
    assert report["direct_http_fim"]["n"] == report["model_answers"]["n"]
    ne = report["next_edit"]
    # the rename scenario
    assert ne["uses"] >= 3 and ne["first_shown"]["n"] == ne["all_shown"]["n"] == 2
    assert ne["first_shown"]["p50_ms"] <= ne["all_shown"]["p50_ms"]
    assert all(0 <= r <= ne["uses"] for r in ne["renamed_per_sample"])
    # the rename carried into other files of a generated workspace, indexed first
    cf = report["cross_file"]
    assert cf["samples"] == 1 and cf["index"]["files"] == 60 and cf["index"]["parsed"] == 60
    assert cf["first_cross_file"]["p50_ms"] <= cf["all_shown"]["p50_ms"]
    assert 0 <= cf["renamed_per_sample"][0] <= cf["uses"]
    # progress goes to stderr while it runs, counting every keystroke and rename
    assert "latency" in out.stderr and "9/9" in out.stderr


def test_bench_latency_refuses_remote_urls():
    cmd = [sys.executable, "-m", "editserver.cli", "bench", "latency", "--url", "http://example.com:8000"]
    out = subprocess.run(cmd, cwd=REPO, env=quiet_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "loopback" in out.stderr


@pytest.mark.slow
def test_bench_latency_times_esc_to_the_first_edit_in_neovim(shipped_server):
    """``--nvim N``: a rename in headless Neovim, every sample drawing its first next edit."""
    cmd = [sys.executable, "-m", "editserver.cli", "bench", "latency", "--url", shipped_server]
    cmd += ["--samples", "1", "--next-edits", "0", "--cross-file", "0", "--nvim", "2", "--json"]
    out = subprocess.run(cmd, cwd=REPO, env=quiet_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    nv = json.loads(out.stdout.strip().splitlines()[-1])["nvim"]
    assert nv["samples"] == 2 and len(nv["esc_to_first_edit_ms"]) == 2
    assert None not in nv["esc_to_first_edit_ms"] and nv["n"] == 2 and 0 < nv["p50_ms"] <= nv["p95_ms"]
