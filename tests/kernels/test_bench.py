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


def _bench(args: list[str], out_json: Path) -> tuple[subprocess.CompletedProcess, dict]:
    cmd = [sys.executable, "-m", "editserver.cli", "bench", "kernels", *args, "--json", str(out_json)]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc, json.loads(out_json.read_text())


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU report")
def test_open_weight_shape_on_cpu(tmp_path):
    """--shape times the ops at Qwen2-0.5B's widths (no checkpoint needed) and sums them per step."""
    args = ["--shape", "qwen2-0.5b", "--threads", "1", "--repeat", "1", "--contexts", "33",
            "--batches", "1", "--canvas", "4"]  # fmt: skip
    proc, result = _bench(args, tmp_path / "bench.json")
    assert "end to end: skipped, --shape qwen2-0.5b" in proc.stdout
    assert result["shape"]["name"] == "qwen2-0.5b" and result["shape"]["head_dim"] == 64
    shapes = {row["op"]: row["shape"] for row in result["kernels"]}
    assert shapes["swiglu"] == "[4, 4864]" and shapes["token_confidence"] == "[1, 4, 151936]"
    assert shapes["attention"] == "B=1 H=14/2 D=64 N=4 ctx=33"
    (step,) = result["per_step"]
    assert step["layers"] == 24 and set(step["ms"]) == {"torch", "sdpa"} and step["ms"]["torch"] > 0
    assert "e2e" not in result


def test_per_step_sums_the_ops_of_a_step():
    from editserver.bench.kernels import per_step

    rows = [
        {"op": "add+rmsnorm", "batch": 1, "ms": {"torch": 1.0, "triton": 0.5}},
        {"op": "rotary q+k", "batch": 1, "ms": {"torch": 2.0, "triton": 1.0}},
        {"op": "swiglu", "batch": 1, "ms": {"torch": 3.0, "triton": 1.5}},
        {"op": "token_confidence", "batch": 1, "ms": {"torch": 10.0, "triton": 4.0}},
        {"op": "attention", "batch": 1, "context": 512, "ms": {"torch": 5.0, "triton": 2.0, "sdpa": 4.0}},
    ]
    (step,) = per_step(rows, n_layers=3)
    # per layer: 2 norms + rotary + swiglu + attention; then the final norm and token choice
    assert step["ms"] == {"torch": 3 * 12.0 + 11.0, "triton": 3 * 5.5 + 4.5, "sdpa": 3 * 11.0 + 11.0}
    assert (step["batch"], step["context"], step["layers"]) == (1, 512, 3)


@pytest.mark.gpu
def test_seven_b_attention_shape_on_cuda(tmp_path):
    """On a CUDA machine one command gives Triton next to SDPA per op and per step at 7B widths."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    args = ["--shape", "qwen2-7b", "--repeat", "3", "--contexts", "2048", "--batches", "1", "--canvas", "64"]
    _, result = _bench(args, tmp_path / "bench.json")
    assert result["triton"] is True
    att = next(row for row in result["kernels"] if row["op"] == "attention")
    assert att["shape"] == "B=1 H=28/4 D=128 N=64 ctx=2048" and {"triton", "torch", "sdpa"} <= set(att["ms"])
    (step,) = result["per_step"]
    assert {"triton", "torch", "sdpa"} == set(step["ms"]) and step["layers"] == 28
