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


def test_bench_step_interleaves_shapes_and_times_a_block_models_one_line_answer(tmp_path) -> None:
    """An in-place shape and a block-diffusion one in one run, context reuse off and on: per shape and
    variant ms/step and the one-line answer's ms, and the summary the goal figure reads (its p50 at
    the smallest batch, reuse on, per shape)."""
    out = tmp_path / "step.json"
    cmd = [
        sys.executable,
        "-m",
        "editserver.cli",
        "bench",
        "step",
        "--shape",
        "tiny,tiny-block,tiny-spm-block",
    ]
    cmd += ["--batches", "1,2", "--context", "37", "--suffix", "8", "--canvas", "6", "--answer", "8"]
    cmd += ["--repeat", "1", "--device", "cpu", "--reuse", "off,on", "--bandwidth-mib", "16"]
    r = subprocess.run([*cmd, "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    shapes = ["tiny", "tiny-block", "tiny-spm-block"]
    names = {f"{s}/torch/{u}" for s in shapes for u in ("off", "on")}
    assert res["shapes"] == shapes
    for key in ("rows", "first_ms", "later_ms", "answer_ms"):
        assert set(res[key]) == {"1", "2"} and all(set(v) == names for v in res[key].values())
    assert all(ms > 0 for v in res["answer_ms"].values() for ms in v.values())
    answer = res["answer"]
    assert (answer["batch"], answer["reuse"], answer["tokens"]) == (1, "on", 8)
    assert set(answer["p50_ms"]) == set(shapes)
    assert answer["p50_ms"]["tiny-block"]["torch"] == res["answer_ms"]["1"]["tiny-block/torch/on"]
    assert "one-line answer" in r.stdout and "block 4, block cache" in r.stdout
    bad = subprocess.run(
        [*cmd[:6], "tiny,nonesuch", "--device", "cpu"], capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2 and "--shape" in bad.stderr


def test_block_shapes_have_the_published_parameter_counts() -> None:
    """Built on the meta device (no memory): each block shape's parameters equal its base model's
    published count (the safetensors totals of Qwen2.5-1.5B/7B, Qwen3-1.7B/8B, Seed-Coder-8B), so
    dims, heads, FFN width, vocabulary, biases, norms and head tying are the published ones."""
    import torch

    from editserver.bench._step_shapes import BLOCK_SHAPES, block_model

    want = {
        "fast-dllm-v2-1.5b": 1_543_714_304,  # tied head, q/k/v biases
        "fast-dllm-v2-7b": 7_615_616_512,
        "sdar-1.7b": 2_031_739_904,  # Qwen3-1.7B's count with a separate head
        "sdar-8b": 8_190_735_360,
        "stable-diffcoder-8b": 8_250_462_208,
    }
    for name, n in want.items():
        spec = BLOCK_SHAPES[name]
        model = block_model(spec, spec.ops, "meta", torch.float32)
        assert model.num_parameters() == n, name
        assert model.cfg.block_size == (32 if name.startswith("fast") else 4)


def test_llada2_mini_is_a_block_shape_of_its_published_size() -> None:
    """LLaDA2-mini decodes on the block grid with its experts: 16B parameters in all (the publisher's
    "16B"; embeddings, a dense first layer, 19 layers of 256 experts and a shared one), 32-token
    blocks, half of each head rotated."""
    import torch

    from editserver.bench._step_shapes import BLOCK_SHAPES, block_model

    spec = BLOCK_SHAPES["llada2-mini"]
    model = block_model(spec, spec.ops, "meta", torch.float32)
    assert 16.0e9 < model.num_parameters() < 16.5e9
    assert model.cfg.block_size == 32 and model.cfg.rotary_dim == 64 and model.cfg.moe.n_experts == 256


@pytest.mark.parametrize("name", ["tiny-block", "tiny-spm-block"])
def test_a_block_shapes_typed_decode_reuses_the_head_of_the_file(name) -> None:
    """On the prefix store, each decode one typed token after the one before reuses the context's
    whole blocks up to the cursor: in the chat order (prefix, typed, suffix) the suffix after it is
    recomputed, in SPM order (suffix, prefix, typed) only the block the typed token lands in."""
    import types

    import torch

    from editserver.bench._step_shapes import BLOCK_SHAPES, block_model, decode_ms
    from editserver.model.infer.prefix import PrefixStore

    spec = BLOCK_SHAPES[name]
    model = block_model(spec, spec.ops, "cpu", torch.float32)
    store = PrefixStore(2**30)
    args = types.SimpleNamespace(context=301, suffix=40, canvas=6)
    for typed in range(3):
        was = store.reused_tokens
        _, steps = decode_ms(model, 1, args, "cpu", store, 8, typed, spec.rule(spec.block), spec.spm)
        assert steps == 8  # one token a step: random weights pass no threshold
    reused = store.reused_tokens - was  # the third decode's
    head = 300 if not spec.spm else 40 + 300  # whole blocks before the cursor's block (block 4)
    assert reused == head
