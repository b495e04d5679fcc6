"""The optimizer choice: Muon on the blocks' matrices, AdamW elsewhere; switching kinds re-warms."""

from __future__ import annotations

import json
import random

import pytest
import torch

from editserver.model.infer.config import PRESETS, ModelConfig
from editserver.model.infer.tokenizer import train_tokenizer
from editserver.model.infer.transformer import Transformer
from editserver.model.train.data import RowBuilder, RowStore
from editserver.model.train.loop import TrainConfig, _lr, train
from editserver.model.train.optim import Optimizer
from tests.conftest import CORPUS
from tests.model.test_training import diffusion_losses


def _tiny(vocab: int = 400) -> Transformer:
    cfg = {**PRESETS["tiny"].to_dict(), "vocab_size": vocab, "canvas_draft": True}
    return Transformer(ModelConfig.from_dict(cfg))


def test_muon_takes_the_blocks_matrices_and_adamw_the_rest() -> None:
    model = _tiny()
    opt = Optimizer(model, "muon", 1e-3, 0.1)
    adamw, muon = opt.parts
    names = {id(p): n for n, p in model.named_parameters()}
    on_muon = {names[id(p)] for g in muon.param_groups for p in g["params"]}
    on_adamw = {names[id(p)] for g in adamw.param_groups for p in g["params"]}
    assert on_muon and all(n.startswith("layers.") and "norm" not in n for n in on_muon)
    assert {"embed.weight", "draft_gain", "copy_gate.weight", "norm.weight"} <= on_adamw
    assert on_muon | on_adamw == set(names.values()) and not on_muon & on_adamw
    with pytest.raises(ValueError, match="optimizer"):
        Optimizer(model, "sgd", 1e-3, 0.1)


def test_muon_lowers_the_diffusion_loss() -> None:
    losses = diffusion_losses(lambda model: Optimizer(model, "muon", 3e-3, 0.0))
    assert sum(losses[-4:]) < 0.7 * sum(losses[:4])


def test_state_round_trips_and_another_kind_is_refused() -> None:
    model = _tiny()
    muon = Optimizer(model, "muon", 1e-3, 0.1)
    model(torch.randint(0, 300, (2, 12))).sum().backward()
    muon.step()
    again = Optimizer(model, "muon", 1e-3, 0.1)
    assert again.load_state_dict(muon.state_dict())
    assert again.parts[1].state_dict()["state"].keys() == muon.parts[1].state_dict()["state"].keys()
    adamw = Optimizer(model, "adamw", 1e-3, 0.1)
    assert not adamw.load_state_dict(muon.state_dict())
    # a state saved before the wrapper existed is a bare AdamW state dict
    bare = torch.optim.AdamW(adamw.parts[0].param_groups).state_dict()
    assert adamw.load_state_dict(bare) and not muon.load_state_dict(bare)


def test_a_run_resumed_with_muon_warms_up_again(tmp_path) -> None:
    tok = train_tokenizer(CORPUS, vocab_size=400)
    b = RowBuilder(tok, 128, random.Random(0))
    rows = [r for r in (b.fim("".join(CORPUS[i : i + 6])) for i in range(100)) if r][:16]
    RowStore.write(tmp_path / "data" / "train", iter(rows), len(rows), 128, tok.eot_id)
    tok.save(tmp_path / "data" / "tokenizer.json")
    cfg = TrainConfig(tmp_path / "run", tmp_path / "data", preset="tiny", steps=30, batch_size=4)
    cfg.warmup_steps, cfg.eval_every, cfg.lr = 10, 30, 1e-3
    train(cfg)
    cfg.steps, cfg.optimizer = 60, "muon"
    train(cfg)
    state = torch.load(tmp_path / "run" / "state.pt", weights_only=False)
    assert state["opt"]["kind"] == "muon" and state["opt_start"] == 30
    lrs = {
        e["step"]: e["lr"]
        for e in map(json.loads, (tmp_path / "run" / "train.log.jsonl").open())
        if "lr" in e
    }
    assert lrs[25] == pytest.approx(1e-3) and lrs[50] == pytest.approx(1e-3)
    assert _lr(30, cfg, 0.0, 30) == pytest.approx(1e-4), "the first step after the switch is warm-up's first"
    # resumed again with Muon: its state loads, no new warm-up
    cfg.steps = 70
    train(cfg)
    assert torch.load(tmp_path / "run" / "state.pt", weights_only=False)["opt_start"] == 30
