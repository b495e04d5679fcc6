"""The FIM benchmark's scoring: execution-based pass@1 in a subprocess, first-line cut, percentiles."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from editserver.bench.fim import L2R_CE_MAX_TOKENS, first_line, passes, percentile
from tests.hf_models import make_published

TASK = {
    "task_id": "T/0",
    "entry_point": "add",
    "prompt": "def add(a, b):\n",
    "suffix": "",
    "canonical_solution": "    return a + b\n",
    "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n",
}


def test_canonical_passes_and_wrong_fails() -> None:
    assert passes(TASK, TASK["canonical_solution"], timeout=10)
    assert not passes(TASK, "    return a - b\n", timeout=10)
    assert not passes(TASK, "    while True: pass\n", timeout=2)  # a hang is a failure, not a stall


def test_the_checked_program_caps_its_own_cpu_time() -> None:
    # the cap outlives the benchmark: a looping answer dies even if `bench fim` is killed first
    limited = {
        **TASK,
        "test": TASK["test"]
        + "    import resource\n    assert resource.getrlimit(resource.RLIMIT_CPU)[0] == 3\n",
    }
    assert passes(limited, TASK["canonical_solution"], timeout=2)
    assert not passes(limited, TASK["canonical_solution"], timeout=5)


def test_first_line_and_percentile() -> None:
    assert first_line("\n    return x\n    y = 2\n") == "    return x\n"
    assert first_line("x") == "x"
    assert percentile([1, 2, 3, 4], 0.5) == 2.5 and percentile([], 0.5) is None


def _run(checkpoint, tmp_path, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    suite = tmp_path / "mini-singleline-infilling.jsonl.gz"
    with gzip.open(suite, "wt") as fh:
        fh.write(json.dumps(TASK) + "\n")
    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "editserver.cli", "bench", "fim", "--suite", str(suite)]
    cmd += ["--model", str(checkpoint), "--json", str(out), *args]
    return subprocess.run(cmd, capture_output=True, text=True), out


def _bench(checkpoint, tmp_path, max_tokens: int, *args: str) -> dict:
    r, out = _run(checkpoint, tmp_path, "--max-tokens", str(max_tokens), *args)
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text())


def test_bench_command_end_to_end(tiny_checkpoint, tmp_path) -> None:
    d = _bench(tiny_checkpoint, tmp_path, 8)
    for block in (d, d["sequential"]):
        assert {"pass_at_1", "exact_match", "tokens_per_step", "latency_ms", "n"} <= set(block)
        assert block["n"] == 1 and set(block["latency_ms"]) == {"p50", "p95"}
    assert d["middle_ce"] > 0 and d["middle_ce_l2r"] > 0 and 0.0 <= d["agreement"] <= 1.0
    assert d["stop"] == ["\n"] and d["single_line_cut"]  # asked for one line, as the LSP does
    pp = d["postprocessed"]  # the same answers as the HTTP API sends them (protocol/postprocess.py)
    assert 0.0 <= pp["pass_at_1"] <= 1.0 and 0 <= pp["changed"] <= d["n"] and isinstance(pp["rules"], dict)


def test_one_token_canvases_agree_with_one_token_per_step(tiny_checkpoint, tmp_path) -> None:
    """With a one-token canvas both modes commit the same argmax: parallel unmasking changes nothing."""
    d = _bench(tiny_checkpoint, tmp_path, 1)
    assert d["agreement"] == 1.0 and d["samples"] == d["sequential"]["samples"]


def test_long_canvases_skip_the_left_to_right_cross_entropy(tiny_checkpoint, tmp_path) -> None:
    """One row per answer token: a multi-line canvas reports null instead of taking hours."""
    d = _bench(tiny_checkpoint, tmp_path, L2R_CE_MAX_TOKENS + 1, "--no-sequential")
    assert d["middle_ce"] > 0 and d["middle_ce_l2r"] is None and "sequential" not in d


def test_no_ce_skips_the_cross_entropy_pass(tiny_checkpoint, tmp_path) -> None:
    d = _bench(tiny_checkpoint, tmp_path, 8, "--no-sequential", "--no-ce")
    assert d["middle_ce"] is None and d["middle_ce_l2r"] is None
    assert d["n"] == 1 and d["rows_per_step"] >= 1.0


def test_a_missing_suite_says_how_to_get_one(tiny_checkpoint, tmp_path) -> None:
    cmd = [sys.executable, "-m", "editserver.cli", "bench", "fim", "--suite", str(tmp_path / "none.jsonl.gz")]
    r = subprocess.run(cmd + ["--model", str(tiny_checkpoint)], capture_output=True, text=True)
    assert r.returncode == 2 and "pass --suite FILE" in r.stdout and "Traceback" not in r.stderr


def test_an_unknown_effort_is_refused_before_any_work(tiny_checkpoint, tmp_path) -> None:
    r, out = _run(tiny_checkpoint, tmp_path, "--effort", "fast")
    assert r.returncode == 2 and "got 'fast'" in r.stdout and "Traceback" not in r.stderr
    assert not out.exists()


def test_a_missing_model_is_a_message(tmp_path) -> None:
    r, out = _run(tmp_path / "nope", tmp_path)
    assert r.returncode == 2 and "not a checkpoint directory" in r.stdout and "Traceback" not in r.stderr
    assert not out.exists()


@pytest.mark.parametrize("name", ["Open-dCoder-0.5B", "LLaDA-8B-Instruct", "LLaDA-MoE-7B-A1B-Instruct"])
def test_published_and_default_decodes_in_one_run(tmp_path, name) -> None:
    """``--decode published,default`` on a directory laid out as its publisher ships it: both decodes
    over the same tasks, both rows printed, the published loop one token per step."""
    d, _ = make_published(tmp_path / "models", name)
    args = ("--max-tokens", "8", "--decode", "published,default", "--no-ce", "--no-sequential")
    r, out = _run(d, tmp_path, *args)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert res["decode"] == ["published", "default"] and res["n"] == res["default"]["n"] == 1
    assert res["tokens_per_step"] <= 1.0 and res["rows_per_step"] == 1.0  # one token, one row a step
    assert 0.0 <= res["default_agreement"] <= 1.0 and res["default_latency_ratio_p50"] > 0
    rows = [line.split()[0] for line in r.stdout.splitlines() if line.split()[:1]]
    assert {"published", "parallel"} <= set(rows) and "default vs published" in r.stdout


def test_published_decode_is_refused_for_a_family_without_one(tiny_checkpoint, tmp_path) -> None:
    r, out = _run(tiny_checkpoint, tmp_path, "--decode", "published")
    assert r.returncode == 2 and "no published decoding loop" in r.stdout and "Traceback" not in r.stderr
    r, _ = _run(tiny_checkpoint, tmp_path, "--decode", "fastest")
    assert r.returncode == 2 and "--decode takes default, published, fixed" in r.stdout
    assert not out.exists()
