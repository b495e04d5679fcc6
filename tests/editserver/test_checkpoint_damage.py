"""Damaged checkpoint directories: one clear line naming the file and status 2, never a traceback,
never an allocation the config asks for but the weights do not hold."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from editserver.model.infer.checkpoint import CheckpointError
from editserver.model.infer.loader import load_checkpoint


def damaged(src: Path, dst: Path, kind: str) -> Path:
    shutil.copytree(src, dst)
    weights, config = dst / "model.safetensors", dst / "config.json"
    data = weights.read_bytes()
    cfg = json.loads(config.read_text())
    state = load_file(str(weights))
    if kind == "truncated":
        weights.write_bytes(data[: len(data) // 2])
    elif kind == "empty":
        weights.write_bytes(b"")
    elif kind == "nan":
        state["embed.weight"][3, 5] = float("nan")
        save_file(state, str(weights))
    elif kind == "inf":
        name = sorted(state)[-1]
        state[name].view(-1)[0] = float("-inf")
        save_file(state, str(weights))
    elif kind == "integers":
        save_file({k: (v * 100).to(torch.int32) for k, v in state.items()}, str(weights))
    elif kind == "huge":
        cfg["model"].update(dim=1 << 20, ffn_dim=1 << 22, n_layers=4096)
    elif kind == "huge-dim":  # the right layer count, dimensions no file holds
        cfg["model"].update(dim=1 << 24, ffn_dim=1 << 26)
    elif kind == "negative":
        cfg["model"]["n_heads"] = -4
    elif kind == "not-json":
        config.write_text('{"model": {"dim": 64,')
        return dst
    config.write_text(json.dumps(cfg))
    return dst


KINDS = {
    "truncated": "truncated or not a safetensors file",
    "empty": "truncated or not a safetensors file",
    "nan": "embed.weight holds NaN or infinite values",
    "inf": "holds NaN or infinite values",
    "integers": "not floating-point weights",
    "huge": "4096 layers",
    "huge-dim": "but config.json needs",
    "negative": "does not describe the model",
    "not-json": "config.json is not valid JSON",
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_damage_is_named_before_anything_is_allocated(kind, tiny_checkpoint, tmp_path):
    d = damaged(tiny_checkpoint, tmp_path / kind, kind)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(d)
    message = str(err.value)
    assert KINDS[kind] in message and "\n" not in message and str(d) in message, message


def test_half_precision_weights_are_not_damage(tiny_checkpoint, tmp_path):
    d = shutil.copytree(tiny_checkpoint, tmp_path / "f16")
    state = load_file(str(d / "model.safetensors"))
    save_file({k: v.half() for k, v in state.items()}, str(d / "model.safetensors"))
    assert load_checkpoint(d).model.embed.weight.dtype == torch.float32


@pytest.mark.parametrize("kind", ["truncated", "nan", "huge"])
def test_serve_prints_one_line_and_exits_2(kind, tiny_checkpoint, tmp_path):
    d = damaged(tiny_checkpoint, tmp_path / kind, kind)
    cmd = [sys.executable, "-m", "editserver.cli", "serve", "--model", str(d), "--port", "0"]
    cmd += ["--threads", "1", "--log-level", "error"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    lines = [line for line in r.stderr.splitlines() if not line.startswith("{")]  # JSON log lines aside
    assert len(lines) == 1 and lines[0].startswith("editserver serve: cannot load the model: "), r.stderr
    assert KINDS[kind] in lines[0]
