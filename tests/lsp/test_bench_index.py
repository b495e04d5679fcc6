"""`editserver bench index` runs end to end on a small generated workspace and reports its figures."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.lsp.conftest import REPO, quiet_env


@pytest.mark.slow  # two LSP starts and stops: about a minute on 2 busy cores
def test_bench_index_reports_build_memory_typing_and_reopening():
    cmd = [sys.executable, "-m", "editserver.cli", "bench", "index", "--files", "40"]
    out = subprocess.run(cmd, cwd=REPO, env=quiet_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "files indexed: 40 (skipped 0)" in out.stdout
    assert re.search(r"cold build: [\d.]+ s, LSP RSS [\d.]+ -> [\d.]+ MB", out.stdout)
    assert re.search(r"after it", out.stdout)
    assert "parsed 0" in out.stdout  # the second start reads every record from the cache


def test_bench_index_refuses_a_bad_size():
    cmd = [sys.executable, "-m", "editserver.cli", "bench", "index", "--files", "3"]
    out = subprocess.run(cmd, cwd=REPO, env=quiet_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--files" in out.stderr
