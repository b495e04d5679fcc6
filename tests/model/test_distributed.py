"""Data-parallel training under torchrun (model/train/distributed.py): 2 CPU processes on gloo.

Each test starts ``torchrun --standalone -m editserver.cli train`` as a user does, on a tiny preset and
a tiny synthetic corpus, one torch thread per process.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from editserver.model.infer.loader import load_checkpoint
from editserver.model.infer.tokenizer import train_tokenizer
from editserver.model.train.data import RowBuilder, RowStore
from tests.conftest import CORPUS

TORCHRUN = Path(sys.executable).with_name("torchrun")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# The processes mask other positions than the single process does (each draws its own stream), so
# the curves agree in distribution, not value by value. Compared: the held-out loss every 5 steps
# (fixed masks, so only the weights differ) and the training CE per 5-step window (the 1/t-weighted
# training loss itself is too heavy-tailed over 5 steps: one small t makes a spike).
VAL_TOLERANCE = 0.05  # relative
WINDOW_TOLERANCE = 0.15  # relative


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("dp-data")
    tok = train_tokenizer(CORPUS, vocab_size=400)
    b = RowBuilder(tok, 128, random.Random(0))
    rows = [r for r in (b.fim("".join(CORPUS[i % 100 : i % 100 + 6])) for i in range(400)) if r][:96]
    RowStore.write(d / "train", iter(rows), len(rows), 128, tok.eot_id)
    RowStore.write(d / "val", iter(rows[:16]), 16, 128, tok.eot_id)
    tok.save(d / "tokenizer.json")
    return d


def _args(data: Path, run: Path, steps: int, *extra: str) -> list[str]:
    return [
        "train", "--data", str(data), "--run-dir", str(run), "--preset", "tiny", "--steps", str(steps),
        "--batch-size", "16", "--warmup", "2", "--threads", "1", "--log-every", "1", *extra,
    ]  # fmt: skip


def train(nproc: int, data: Path, run: Path, steps: int, *extra: str) -> subprocess.CompletedProcess:
    """One process (``python -m editserver.cli``) or ``nproc`` under torchrun."""
    if nproc == 1:
        cmd = [sys.executable, "-m", "editserver.cli"]
    else:
        cmd = [str(TORCHRUN), "--nproc-per-node", str(nproc), "--standalone", "-m", "editserver.cli"]
    r = subprocess.run(
        cmd + _args(data, run, steps, *extra), capture_output=True, text=True, env=ENV, timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    return r


def events(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "train.log.jsonl").read_text().splitlines()]


def losses(run: Path) -> list[float]:
    return [e["loss"] for e in events(run) if "loss" in e and "event" not in e]


def test_two_processes_train_like_one(data, tmp_path) -> None:
    one = train(1, data, tmp_path / "one", 20, "--eval-every", "5")
    two = train(2, data, tmp_path / "two", 20, "--eval-every", "5")
    val = [[e["val_loss"] for e in events(tmp_path / r) if e.get("event") == "eval"] for r in ("one", "two")]
    ce = [[e["ce"] for e in events(tmp_path / r) if "ce" in e] for r in ("one", "two")]
    assert len(val[0]) == len(val[1]) == 4 and len(ce[0]) == len(ce[1]) == 20
    windows = [(sum(ce[0][i : i + 5]) / 5, sum(ce[1][i : i + 5]) / 5) for i in range(0, 20, 5)]
    print(
        "held-out loss at steps 5..20, 1 vs 2 processes:", [(round(x, 3), round(y, 3)) for x, y in zip(*val)]
    )
    print("training CE per 5 steps, 1 vs 2 processes:", [(round(x, 3), round(y, 3)) for x, y in windows])
    for x, y in zip(*val):
        assert abs(x - y) <= VAL_TOLERANCE * x, val
    for x, y in windows:
        assert abs(x - y) <= WINDOW_TOLERANCE * x, windows
    assert val[1][-1] < val[1][0] * 0.8, "two processes learn"
    done = [e for e in events(tmp_path / "two") if e.get("event") == "done"][-1]
    assert done["world"] == 2 and len(set(done["weights_sha256"])) == 1, "ranks ended with different weights"
    # one process wrote the log and the checkpoint, and said how to serve it
    assert two.stdout.count("serve it: editserver serve --model") == 1 and "serve it" in one.stdout
    assert load_checkpoint(tmp_path / "two" / "checkpoint").meta["world"] == 2


@pytest.mark.parametrize("first,then", [(2, 1), (1, 2)])
def test_a_checkpoint_resumes_at_another_world_size(data, tmp_path, first: int, then: int) -> None:
    run = tmp_path / "run"
    train(first, data, run, 10, "--eval-every", "5")
    saved = torch.load(run / "state.pt", weights_only=False)
    assert saved["step"] == 10 and saved["world"] == first
    train(then, data, run, 14, "--eval-every", "7")
    ev = events(run)
    assert [e["step"] for e in ev if e.get("event") == "start"] == [0, 10]
    assert [e["world"] for e in ev if e.get("event") == "done"] == [first, then]
    resumed = [e for e in ev if "loss" in e and "event" not in e and e["step"] > 10]
    # the optimizer state came along: the LR does not warm up again from the resume
    assert resumed[0]["lr"] == pytest.approx(1.5e-3)
    # the weights came along: the loss goes on from where it was, not from a fresh model's
    fresh = losses(run)[:2]
    assert sum(x["loss"] for x in resumed) / len(resumed) < 0.85 * sum(fresh) / 2
    assert load_checkpoint(run / "checkpoint").meta["step"] == 14


def _rank_pids(parent: int) -> dict[int, int]:
    """rank -> pid of torchrun's worker processes (read from their environment)."""
    out = {}
    for child in Path(f"/proc/{parent}/task/{parent}/children").read_text().split():
        env = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        for var in env:
            if var.startswith(b"RANK="):
                out[int(var[5:])] = int(child)
    return out


def test_killing_one_process_ends_the_run_and_keeps_the_checkpoint(data, tmp_path) -> None:
    run = tmp_path / "run"
    cmd = [str(TORCHRUN), "--nproc-per-node", "2", "--standalone", "-m", "editserver.cli"]
    cmd += _args(data, run, 100_000, "--eval-every", "5", "--no-progress")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        deadline = time.monotonic() + 120
        while not (run / "state.pt").exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert (run / "state.pt").exists(), "no checkpoint within 120 s"
        pids = _rank_pids(proc.pid)
        assert set(pids) == {0, 1}
        os.kill(pids[1], signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    # torchrun names the process that failed and how
    assert "ChildFailedError" in err and "rank" in err and "SIGKILL" in err, err[-3000:]
    state = torch.load(run / "state.pt", weights_only=False)
    assert state["step"] >= 5 and state["step"] % 5 == 0
    assert load_checkpoint(run / "checkpoint").meta["step"] >= 5


def test_fsdp2_trains_on_two_cpu_processes_and_resumes_in_one(data, tmp_path) -> None:
    """FSDP2 (``fully_shard``) runs on gloo: the sharded run's full checkpoint serves and resumes."""
    run = tmp_path / "run"
    train(2, data, run, 6, "--eval-every", "3", "--fsdp")
    ev = events(run)
    assert [e["step"] for e in ev if e.get("event") == "eval"] == [3, 6]
    assert losses(run)[-1] < losses(run)[0]
    state = torch.load(run / "state.pt", weights_only=False)
    assert "opt_full" in state and state["step"] == 6
    ck = load_checkpoint(run / "checkpoint")
    assert ck.meta["world"] == 2 and set(ck.model.state_dict()) == set(state["model"])
    train(1, data, run, 8, "--eval-every", "8")  # one process takes the full weights, a fresh optimizer
    assert load_checkpoint(run / "checkpoint").meta["step"] == 8
