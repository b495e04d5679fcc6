"""``editserver bench kernels`` runs on a CPU-only machine: PyTorch paths timed, Triton reported as
needing CUDA, end-to-end figures from a real (tiny) checkpoint, JSON written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU report")
def test_bench_runs_on_cpu(tiny_checkpoint, tmp_path):
    out_json = tmp_path / "bench.json"
    cmd = [
        sys.executable, "-m", "editserver.cli", "bench", "kernels",
        "--model", str(tiny_checkpoint), "--threads", "1", "--repeat", "1", "--contexts", "64",
        "--batches", "1,2", "--canvas", "8", "--max-tokens", "8", "--e2e-repeat", "1", "--json", str(out_json),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Triton kernels need CUDA" in proc.stdout
    result = json.loads(out_json.read_text())
    assert result["device"] == "cpu" and result["triton"] is False
    ops = {row["op"] for row in result["kernels"]}
    assert ops == {"add+rmsnorm", "rotary q+k", "swiglu", "token_confidence", "attention"}
    for row in result["kernels"]:
        assert "torch" in row["ms"] and "triton" not in row["ms"]
        if row["op"] == "attention":
            assert {"sdpa", "reference"} <= set(row["ms"])
    e2e = {(r["batch"], r["backend"]): r for r in result["e2e"]}
    assert set(e2e) == {(1, "torch"), (2, "torch")}
    for r in e2e.values():
        assert r["steps_per_s"] > 0 and r["ms_per_step"] > 0 and r["steps_per_call"] >= 1
        assert 0 <= r["mean_output_tokens"] <= 8
