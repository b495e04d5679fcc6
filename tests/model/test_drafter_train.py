"""Training the drafter (model/drafter_train.py, ``editserver train-drafter``) on a tiny checkpoint."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from model.api import Engine, FimRequest, SamplingOptions
from model.drafter import Drafter
from model.drafter_train import agreement, collect, line_tasks, train


def _sources(root: Path, files: int = 6) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for k in range(files):
        body = "".join(f"    total_{i} = values[{i}] * {k + i} + offset\n" for i in range(12))
        (root / f"mod{k}.py").write_text(f"def f{k}(values, offset):\n{body}    return total_0\n")
    return root


def test_line_tasks_cut_one_indented_line_out(tmp_path) -> None:
    files = sorted(_sources(tmp_path / "src").glob("*.py"))
    tasks = line_tasks(files, 10, random.Random(0))
    assert len(tasks) == 10
    for prefix, suffix in tasks:
        assert prefix.startswith("def f") and prefix.endswith("\n")
        whole = files[int(prefix[5])].read_text()
        missing = whole[len(prefix) : len(whole) - len(suffix)] if suffix else whole[len(prefix) :]
        assert whole.startswith(prefix) and whole.endswith(suffix)
        assert missing.count("\n") == 1 and missing.startswith("    ")


def test_a_trained_drafter_fits_the_models_later_calls(tiny_checkpoint, tmp_path) -> None:
    eng = Engine.load(tiny_checkpoint)
    files = sorted(_sources(tmp_path / "src").glob("*.py"))
    rng = random.Random(0)
    data = collect(eng, line_tasks(files, 8, rng), rng, batch=4)
    calls = data.calls()
    assert len(calls) == 8 and all(len(c) >= 1 for c in calls)
    assert data.hidden.shape[:2] == data.tokens.shape == data.fixed.shape
    for c in calls:  # each decode's canvas only gains commits, call after call
        for a, b in zip(c, c[1:]):
            assert bool((data.fixed[b] >= data.fixed[a]).all()) and int(data.fixed[b].sum()) > int(
                data.fixed[a].sum()
            )
    torch.manual_seed(0)
    d = Drafter(eng.model.cfg)
    before = agreement(d, eng, data)
    # as initialized it is the identity on the masked positions: its guesses are the frozen ones
    # (hidden states stored in bf16 may flip a near tie), which also checks that each call's hidden
    # states and tokens line up
    assert abs(before["run_drafter"] - before["run_frozen"]) < 0.05
    assert set(before["by_gap"]) <= set(range(1, 7)) and before["by_gap"][1]["n"] > 0
    # the identity already fits a random model's later calls (they barely change), so training
    # starts from a scrambled drafter and has to find its way back
    with torch.no_grad():
        d.block.attn.wo.weight.normal_(std=0.5)
        d.block.ffn.w_down.weight.normal_(std=0.5)
    scrambled = agreement(d, eng, data)
    losses = train(d, eng, data, 60, random.Random(1), batch=16, lr=3e-3)
    after = agreement(d, eng, data)
    assert sum(losses[-10:]) / 10 < losses[0]
    # runs of right guesses (up to 6 from each call): none scrambled, most of the frozen run after
    assert scrambled["run_drafter"] < 0.5 < 3.0 < after["run_drafter"]


def test_the_cli_writes_a_drafter_the_engine_uses(tiny_checkpoint, tmp_path) -> None:
    src = _sources(tmp_path / "src", files=10)
    out = tmp_path / "ck"
    shutil.copytree(tiny_checkpoint, out)
    cmd = [sys.executable, "-m", "editserver.cli", "train-drafter", "--model", str(out), "--src", str(src)]
    cmd += ["--tasks", "8", "--val-tasks", "4", "--steps", "5", "--batch-size", "4", "--threads", "1"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "mean run of right guesses" in r.stdout and (out / "drafter.safetensors").is_file()
    eng = Engine.load(out)
    o = SamplingOptions(sequential=True, stop=["\n"], lookahead=3, lookahead_draft=True)
    c = eng.complete(FimRequest("def f(values, offset):\n", "    return 1\n", max_tokens=16, options=o))
    plain = eng.complete(
        FimRequest(
            "def f(values, offset):\n",
            "    return 1\n",
            max_tokens=16,
            options=SamplingOptions(sequential=True, stop=["\n"]),
        )
    )
    assert c.text == plain.text
    bad = subprocess.run([*cmd[:6], "--steps", "0"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "at least 1" in bad.stderr
