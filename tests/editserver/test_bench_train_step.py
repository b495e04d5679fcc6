"""``editserver bench train-step``: every variant timed from the same weights, bad lists refused."""

from __future__ import annotations

import json
import subprocess
import sys


def _bench(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "editserver.cli", "bench", "train-step", "--preset", "tiny", *args]
    return subprocess.run(cmd, capture_output=True, text=True)


def test_train_step_reports_each_variant(tmp_path) -> None:
    out = tmp_path / "r.json"
    r = _bench(
        "--variants",
        "eager",
        "--precisions",
        "fp32,bf16",
        "--rounds",
        "2",
        "--warmup",
        "1",
        "--batch-size",
        "2",
        "--seq-len",
        "32",
        "--threads",
        "1",
        "--json",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(out.read_text())
    assert [v["name"] for v in d["variants"]] == ["eager/fp32", "eager/bf16"]
    assert d["variants"][0]["speedup"] == 1.0
    for v in d["variants"]:
        assert v["tokens_per_s"] == 2 * 32 / v["median_step_s"] and v["warmup_s"] > 0
    assert "eager/bf16" in r.stdout


def test_train_step_refuses_unknown_variants() -> None:
    r = _bench("--variants", "eager,jit")
    assert r.returncode == 2 and "--variants" in r.stderr
    r = _bench("--precisions", "fp8")
    assert r.returncode == 2 and "--precisions" in r.stderr
