"""The learning-rate schedule and time-budgeted runs (model/train/loop.py)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from editserver.model.infer.tokenizer import train_tokenizer
from editserver.model.train.data import RowBuilder, RowStore
from editserver.model.train.loop import TrainConfig, _lr, train
from tests.conftest import CORPUS


def _cfg(tmp_path: Path, **kw) -> TrainConfig:
    base = dict(run_dir=tmp_path / "run", data_dir=tmp_path / "data", preset="tiny", batch_size=4)
    return TrainConfig(**{**base, "lr": 1e-3, "warmup": 10, **kw})


def test_step_schedule_warms_holds_and_decays(tmp_path) -> None:
    cfg = _cfg(tmp_path, steps=100, decay_start=60)
    assert _lr(0, cfg) == pytest.approx(1e-4) and _lr(9, cfg) == pytest.approx(1e-3)
    assert _lr(59, cfg) == pytest.approx(1e-3)
    assert _lr(80, cfg) == pytest.approx(1e-3 * (1 - 0.9 * 0.5)) and _lr(100, cfg) == pytest.approx(1e-4)


def test_time_budget_schedule_decays_over_the_last_share(tmp_path) -> None:
    cfg = _cfg(tmp_path, steps=10**6, time_budget_s=100.0, decay_frac=0.2, decay_start=5)
    assert _lr(3, cfg, 50.0) == pytest.approx(4e-4), "warm-up still counts steps"
    # the budget, not decay_start, decides: stable to 80 s, then linear to 10% at 100 s
    assert _lr(500, cfg, 79.0) == pytest.approx(1e-3)
    assert _lr(500, cfg, 90.0) == pytest.approx(1e-3 * (1 - 0.9 * 0.5))
    assert _lr(500, cfg, 100.0) == pytest.approx(1e-4) and _lr(500, cfg, 130.0) == pytest.approx(1e-4)


def _data(tmp_path: Path, val: bool = False) -> None:
    tok = train_tokenizer(CORPUS, vocab_size=400)
    b = RowBuilder(tok, 128, random.Random(0))
    rows = [r for r in (b.fim("".join(CORPUS[i : i + 6])) for i in range(100)) if r][:16]
    RowStore.write(tmp_path / "data" / "train", iter(rows), len(rows), 128, tok.eot_id)
    if val:  # held-out rows make every save evaluate them too
        RowStore.write(tmp_path / "data" / "val", iter(rows[:8]), 8, 128, tok.eot_id)
    tok.save(tmp_path / "data" / "tokenizer.json")


def _events(tmp_path: Path) -> list[dict]:
    return [json.loads(x) for x in (tmp_path / "run" / "train.log.jsonl").read_text().splitlines()]


def test_a_time_budget_stops_saves_and_carries_over_resumes(tmp_path) -> None:
    _data(tmp_path)
    cfg = _cfg(tmp_path, steps=10**6, eval_every=10**6, time_budget_s=1.0)
    ckpt = train(cfg)
    state = torch.load(tmp_path / "run" / "state.pt", weights_only=False)
    spent = [e for e in _events(tmp_path) if e.get("event") == "time budget spent"]
    assert len(spent) == 1 and state["elapsed_s"] >= 1.0 and 0 < state["step"] < 10**6
    assert (ckpt / "model.safetensors").is_file(), "the run saves when its budget ends"
    # resumed with the same budget: nothing left to spend, so no step is taken
    train(cfg)
    again = torch.load(tmp_path / "run" / "state.pt", weights_only=False)
    assert again["step"] == state["step"]
    # a larger budget continues from the saved clock, not from zero
    cfg.time_budget_s, cfg.eval_every = state["elapsed_s"] + 0.5, 2
    train(cfg)
    more = torch.load(tmp_path / "run" / "state.pt", weights_only=False)
    assert more["step"] > state["step"] and more["elapsed_s"] >= cfg.time_budget_s
    events = _events(tmp_path)
    starts = [i for i, e in enumerate(events) if e.get("event") == "start"]
    assert [events[i]["step"] for i in starts] == [0, state["step"], state["step"]]
    logged = [e["elapsed_s"] for e in events[starts[-1] :] if e.get("event") == "eval"]
    assert logged and min(logged) >= round(state["elapsed_s"], 1), "the clock went on from the saved time"


@pytest.mark.gpu
def test_training_runs_and_resumes_on_cuda(tmp_path) -> None:
    """The GPU recipe's path: masks drawn on the CPU generator, rows and the model on the device, a
    fused optimizer, a resume from a state saved there, bf16 autocast, torch.compile (whose
    inductor failed on the validation batches' bool mask on torch 2.11, on an H200 on 2026-11-26) and a time
    budget."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    _data(tmp_path, val=True)
    cfg = _cfg(tmp_path, steps=4, eval_every=2, device="cuda", time_budget_s=600.0, compile=True)
    train(cfg)
    cfg.steps = 6
    ckpt = train(cfg)
    evals = [e for e in _events(tmp_path) if e.get("event") == "eval"]
    assert [e["step"] for e in evals] == [2, 4, 6] and all("val_loss" in e for e in evals)
    assert torch.load(tmp_path / "run" / "state.pt", weights_only=False)["step"] == 6
    assert (ckpt / "model.safetensors").is_file()
