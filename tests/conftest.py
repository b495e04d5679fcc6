"""Shared fixtures: fixed seeds and a tiny trained-from-scratch checkpoint for fast tests.

The tiny checkpoint (``tiny_checkpoint``) has a real byte-level BPE tokenizer and a real transformer
of the ``tiny`` preset with random weights: every code path runs, in milliseconds. Tests that need a
model that writes sensible code use ``shipped_checkpoint`` (the committed default).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from editserver.model.infer.checkpoint import DEFAULT_CHECKPOINT

SEED = 1234

CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "import os\n\nfor name in os.listdir('.'):\n    print(name)\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
    "function greet(name) {\n  return `hello ${name}`;\n}\n",
    'package main\n\nfunc main() {\n\tfmt.Println("hi")\n}\n',
    "fn main() {\n    let v: Vec<i32> = Vec::new();\n}\n",
] * 20


def pytest_configure(config):
    # under pytest-xdist each worker takes its share of the cores for torch, so two workers on two
    # cores do not each run two threads (processes the tests start keep their own --threads)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


@pytest.fixture(autouse=True)
def _fixed_seeds():
    random.seed(SEED)
    torch.manual_seed(SEED)


def train_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``editserver train ARGS`` in a subprocess, as a user runs it."""
    cmd = [sys.executable, "-m", "editserver.cli", "train", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def make_tiny_checkpoint(directory: Path) -> Path:
    from editserver.model.infer.checkpoint import save_checkpoint
    from editserver.model.infer.config import PRESETS, ModelConfig
    from editserver.model.infer.tokenizer import train_tokenizer
    from editserver.model.infer.transformer import Transformer

    torch.manual_seed(SEED)
    tok = train_tokenizer(CORPUS, vocab_size=400)
    cfg = ModelConfig.from_dict({**PRESETS["tiny"].to_dict(), "vocab_size": tok.vocab_size})
    save_checkpoint(directory, Transformer(cfg), tok, meta={"note": "tiny random test model"})
    return directory


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny-ckpt"))


@pytest.fixture(scope="session")
def shipped_checkpoint() -> Path:
    if not (DEFAULT_CHECKPOINT / "model.safetensors").is_file():
        pytest.skip("no shipped checkpoint in model/checkpoints/default")
    return DEFAULT_CHECKPOINT
