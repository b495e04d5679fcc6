"""``editserver bench step`` decodes a random open-weight-shaped model through the real loop."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def test_bench_step_reports_ms_per_step_per_batch(tmp_path) -> None:
    out = tmp_path / "step.json"
    cmd = [sys.executable, "-m", "editserver.cli", "bench", "step", "--shape", "tiny", "--batches", "1,3"]
    cmd += ["--context", "24", "--suffix", "8", "--canvas", "6", "--repeat", "1", "--device", "cpu"]
    r = subprocess.run([*cmd, "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())["rows"]
    assert set(rows) == {"1", "3"} and all(v["torch"] > 0 for v in rows.values())


def test_bench_step_prints_the_bandwidth_floor_and_compares_int8(tmp_path) -> None:
    out = tmp_path / "step.json"
    cmd = [sys.executable, "-m", "editserver.cli", "bench", "step", "--shape", "tiny", "--batches", "1"]
    cmd += ["--context", "24", "--suffix", "8", "--canvas", "4", "--repeat", "1", "--device", "cpu"]
    cmd += ["--quantize", "none,int8", "--bandwidth-mib", "16", "--backends", "torch"]
    r = subprocess.run([*cmd, "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert res["bandwidth_gb_s"] > 0 and set(res["rows"]["1"]) == {"torch/none", "torch/int8"}
    # int8 weights are a quarter of fp32's bytes (plus scales and norms): the floor shrinks
    assert 0 < res["floor_ms"]["int8"] < res["floor_ms"]["none"]
    assert "x floor" in r.stdout


@pytest.mark.gpu
def test_bench_step_compares_triton_and_sdpa_on_cuda(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    out = tmp_path / "step.json"
    cmd = [sys.executable, "-m", "editserver.cli", "bench", "step", "--shape", "qwen2-0.5b"]
    cmd += ["--batches", "1,16", "--repeat", "2", "--json", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())["rows"]
    assert all({"torch", "triton"} <= set(v) for v in rows.values())


def test_bench_step_compares_context_reuse(tmp_path) -> None:
    out = tmp_path / "step.json"
    cmd = [sys.executable, "-m", "editserver.cli", "bench", "step", "--shape", "tiny", "--batches", "1"]
    cmd += ["--context", "24", "--suffix", "8", "--canvas", "4", "--repeat", "1", "--device", "cpu"]
    cmd += ["--reuse", "off,on", "--bandwidth-mib", "16", "--backends", "torch"]
    r = subprocess.run([*cmd, "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert set(json.loads(out.read_text())["rows"]["1"]) == {"torch/off", "torch/on"}
    bad = subprocess.run([*cmd[:-6], "--reuse", "sometimes"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--reuse" in bad.stderr
