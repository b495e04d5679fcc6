"""editserver replay against real model plumbing: the CLI in-process, and a real ``editserver serve``.

The tiny random-weight checkpoint writes gibberish, so these tests assert that every request is
made, labelled, scored and written, never that the model is right. The slow test runs the shipped
checkpoint on shared held-out records.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.editserver.test_replay import build_repos, write_records

LABELS = {"accepted", "rejected", "unchanged", "empty", "error"}
SMALL = ["--region-lines", "6", "--context-lines", "2", "--history", "1", "--max-steps", "1", "--no-progress"]
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "edits"


def editserver(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("editserver")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "editserver.cli"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("engine-repos")
    shop, web = build_repos(root)
    return shop, write_records(web, root / "acme+web.jsonl.xz")


@pytest.fixture(scope="module")
def shop(built) -> Path:
    return built[0]


def check_result(doc: dict, requests: int) -> None:
    assert doc["complete"] is True and doc["summary"]["requests"] == requests
    for row in doc["suggestions"]:
        assert row["label"] in LABELS and row["error"] is None
        assert 0.0 <= row["score"] <= 1.0 and row["latency_ms"] > 0
    assert doc["fim"]["summary"]["requests"] >= 1


def test_cli_in_process_with_a_checkpoint(shop, tmp_path, tiny_checkpoint):
    out = tmp_path / "r.json"
    r = editserver(
        "replay",
        str(shop),
        "--in-process",
        "--model",
        str(tiny_checkpoint),
        "--max-points",
        "2",
        "--max-fim",
        "1",
        "--effort",
        "instant",
        "--batch-size",
        "2",
        "--json",
        str(out),
        *SMALL,
    )
    assert r.returncode == 0, r.stderr
    assert "next edit: 2 requests" in r.stdout and "skipped:" in r.stdout
    doc = json.loads(out.read_text())
    check_result(doc, 2)
    from editserver.model.infer.scoring import AGGREGATES

    assert all(set(row["scores"]) == set(AGGREGATES) for row in doc["suggestions"])
    assert doc["summary"]["score_aggregate"] == "mean" and doc["summary"]["threshold"] == 0.0
    assert out.with_suffix(".html").read_text().startswith("<!doctype html>")


def test_cli_tunes_and_writes_the_fim_threshold(built, tmp_path, tiny_checkpoint):
    shop, web_records = built
    ck = tmp_path / "ck"
    shutil.copytree(tiny_checkpoint, ck)
    out = tmp_path / "t.json"
    r = editserver(
        "replay",
        str(shop),
        "--in-process",
        "--model",
        str(ck),
        "--tune-records",
        str(web_records),
        "--tune-points",
        "1",
        "--tune-fim",
        "2",
        "--max-points",
        "1",
        "--max-fim",
        "2",
        "--effort",
        "instant",
        "--write-config",
        "--json",
        str(out),
        *SMALL,
    )
    assert r.returncode == 0, r.stderr
    assert "FIM tuned on training repositories" in r.stdout
    doc = json.loads(out.read_text())
    ft = doc["tuning"]["fim"]
    chosen = ft["chosen"]["fim_threshold"]
    assert ft["summary_untuned"]["requests"] == 2 and len(doc["tune_fim_completions"]) == 2
    assert ft["score_aggregate"] == doc["tuning"]["chosen"]["score_aggregate"]
    for row in doc["tune_fim_completions"]:  # the engine's score is what a threshold is tuned on
        assert row["scores"][doc["tuning"]["chosen"]["score_aggregate"]] is not None
        assert row["scores"]["mean"] == pytest.approx(row["score"])  # the tiny checkpoint's aggregate
    if not any(row["label"] == "accepted" for row in doc["tune_fim_completions"]):
        assert chosen == 1.0  # the random model's completions never pay: suppress them all
    saved = json.loads((ck / "config.json").read_text())["inference"]
    assert saved["fim_threshold"] == chosen
    assert saved["selectivity_threshold"] == doc["tuning"]["chosen"]["selectivity_threshold"]
    f = doc["fim"]["summary"]
    assert f["threshold"] == chosen and f["requests"] == 2


def test_cli_errors_are_one_line_and_status_2(tmp_path):
    r = editserver("replay", "--in-process", "--model", str(tmp_path), timeout=60)
    assert r.returncode == 2 and "nothing to replay" in r.stderr and "Traceback" not in r.stderr
    r = editserver("replay", str(tmp_path), "--in-process", "--model", str(tmp_path), timeout=60)
    assert r.returncode == 2 and "not a git repository" in r.stderr
    r = editserver(
        "replay",
        "--records",
        str(tmp_path / "missing.jsonl.xz"),
        "--server-url",
        "http://127.0.0.1:9",
        timeout=60,
    )
    assert r.returncode == 2 and "no such record file" in r.stderr


def test_http_against_a_real_server(shop, tmp_path, tiny_checkpoint):
    load = pytest.importorskip("editserver.bench.load")
    out = tmp_path / "h.json"
    with load.LocalServer(["--model", str(tiny_checkpoint), "--max-output-tokens", "48"]) as server:
        r = editserver(
            "replay",
            str(shop),
            "--server-url",
            server.url,
            "--max-points",
            "2",
            "--max-fim",
            "1",
            "--effort",
            "instant",
            "--batch-size",
            "2",
            "--json",
            str(out),
            *SMALL,
        )
    assert r.returncode == 0, r.stderr + r.stdout
    doc = json.loads(out.read_text())
    check_result(doc, 2)
    # over HTTP the server's own selectivity decisions are the thresholds in force
    assert doc["summary"]["threshold"] is None and doc["fim"]["summary"]["threshold"] is None
    assert all(isinstance(row["above_threshold"], bool) for row in doc["suggestions"])
    for row in doc["fim_completions"]:
        assert isinstance(row["above_threshold"], bool) and 0.0 <= row["score"] <= 1.0
        assert row["label"] in LABELS and row["shown"] == (row["label"] in ("accepted", "rejected"))


@pytest.mark.slow
def test_shipped_checkpoint_on_held_out_records(tmp_path, shipped_checkpoint):
    if not SHARED.is_dir():
        pytest.skip("no ../shared/data/edits")
    out = tmp_path / "s.json"
    r = editserver(
        "replay",
        "--records",
        str(SHARED / "jd+tenacity.jsonl.xz"),
        "--in-process",
        "--model",
        str(shipped_checkpoint),
        "--max-points",
        "8",
        "--max-fim",
        "4",
        "--max-cross",
        "4",
        "--region-lines",
        "12",
        "--effort",
        "instant",
        "--json",
        str(out),
        "--no-progress",
        timeout=900,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    check_result(doc, 12)  # 8 points in the edited file, 4 in files a change reaches (cross-file)
    assert doc["in_file"]["requests"] == 8 and doc["cross_file"]["requests"] == 4
    assert doc["model_meta"] is not None and doc["summary"]["threshold"] is not None
    assert doc["by_repository"].keys() == {"jd/tenacity"}
