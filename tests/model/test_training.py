"""Training: the diffusion loss falls on a tiny config; checkpoints round-trip exactly; resume works."""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import pytest
import torch

from editserver.model.infer.checkpoint import save_checkpoint
from editserver.model.infer.config import PRESETS, InferenceConfig, ModelConfig
from editserver.model.infer.loader import load_checkpoint
from editserver.model.infer.tokenizer import train_tokenizer
from editserver.model.infer.transformer import Transformer
from editserver.model.train.data import RowBuilder, RowStore
from editserver.model.train.diffusion import diffusion_loss, mask_batch
from editserver.model.train.loop import TrainConfig, train
from editserver.model.train.optim import Optimizer
from tests.conftest import CORPUS, train_cli


def _tiny(vocab: int) -> Transformer:
    return Transformer(ModelConfig.from_dict({**PRESETS["tiny"].to_dict(), "vocab_size": vocab}))


def test_masking_only_touches_the_canvas() -> None:
    ids = torch.arange(40).view(2, 20) + 10
    noisy, masked, t, weight = mask_batch(
        ids, torch.tensor([5, 0]), torch.tensor([15, 20]), 1, torch.Generator().manual_seed(0)
    )
    assert not masked[0, :5].any() and not masked[0, 15:].any()
    assert torch.equal(noisy[~masked], ids[~masked]) and (noisy[masked] == 1).all()
    assert ((t > 0) & (t <= 1)).all()
    # uniform rows: the MDLM weight (1/t)/|canvas| on every masked position, nothing elsewhere
    assert torch.allclose(weight[0][masked[0]], 1 / (t[0] * 10)) and (weight[~masked] == 0).all()


def test_ordered_rows_mask_a_block_and_the_whole_tail() -> None:
    B, L = 64, 40
    ids = torch.arange(B * L).view(B, L) % 50 + 10
    ctx, lens = torch.full((B,), 8), torch.full((B,), 36)
    noisy, masked, t, weight = mask_batch(ids, ctx, lens, 1, torch.Generator().manual_seed(3), 0.5)
    assert torch.equal(noisy[~masked], ids[~masked]) and (noisy[masked] == 1).all()
    assert not masked[:, :8].any() and not masked[:, 36:].any()  # the context and padding stay clean
    blocks = set()
    for r in range(32):  # the ordered half: clean prefix, a partly masked block, a masked tail
        scored = (weight[r] > 0).nonzero().flatten()
        assert len(scored) and masked[r, scored].all()  # loss only on masked block positions
        start = int(masked[r].nonzero().min())
        assert not masked[r, 8:start].any() and int(scored.min()) == start
        assert torch.allclose(weight[r, scored], weight[r, scored[0]])  # one weight per row
        b = int((weight[r, scored[0]].reciprocal() - 1) / t[r] + 1.5)  # 1/(1 + t(b-1)) -> b
        assert int(scored.max()) < start + b and masked[r, start + b : 36].all()  # then all masked
        blocks.add(b)
    assert len(blocks) > 3 and all(1 <= b <= 32 for b in blocks)  # block sizes vary
    # the uniform half is untouched by the ordered rule: masks scattered, the tail not forced
    assert ((weight[32:] > 0) == masked[32:]).all()


def test_ordered_loss_trains_left_to_right_prediction() -> None:
    """With every row ordered, the loss only reads block positions: a tail token's value cannot
    change it, but a block token's can."""
    model = _tiny(256)
    ids = torch.randint(10, 200, (4, 24))
    ctx, lens = torch.zeros(4, dtype=torch.long), torch.full((4,), 24)

    def loss_of(x: torch.Tensor) -> float:
        g = torch.Generator().manual_seed(5)
        return float(diffusion_loss(model, x, ctx, lens, 1, g, ordered_share=1.0)[0].detach())

    _, masked, _, weight = mask_batch(ids, ctx, lens, 1, torch.Generator().manual_seed(5), 1.0)
    tail = masked & (weight == 0)
    r, c = tail.nonzero()[0].tolist()
    changed = ids.clone()
    changed[r, c] = (changed[r, c] + 1) % 200 + 10
    assert loss_of(changed) == loss_of(ids)
    r, c = (weight > 0).nonzero()[0].tolist()
    changed = ids.clone()
    changed[r, c] = (changed[r, c] + 1) % 200 + 10
    assert loss_of(changed) != loss_of(ids)


def diffusion_losses(
    make_optimizer: Callable[[Transformer], torch.optim.Optimizer | Optimizer],
) -> list[float]:
    """The diffusion loss of 60 steps on 8 plain rows of a tiny model, from fixed masks."""
    tok = train_tokenizer(CORPUS, vocab_size=400)
    model = _tiny(tok.vocab_size)
    b = RowBuilder(tok, 64, random.Random(0))
    rows = [b.plain(tok.encode("".join(CORPUS[i : i + 3]))) for i in range(8)]
    L = max(len(r.ids) for r in rows)
    ids = torch.tensor([r.ids + [tok.eot_id] * (L - len(r.ids)) for r in rows])
    ctx, lens = torch.zeros(8, dtype=torch.long), torch.tensor([len(r.ids) for r in rows])
    opt = make_optimizer(model)
    losses = []
    for step in range(60):
        loss, _ = diffusion_loss(model, ids, ctx, lens, tok.mask_id, torch.Generator().manual_seed(step % 4))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def test_loss_decreases_on_tiny_config() -> None:
    losses = diffusion_losses(lambda model: torch.optim.AdamW(model.parameters(), lr=3e-3))
    assert losses[-1] < losses[0] * 0.6


def test_checkpoint_save_load_equality(tmp_path) -> None:
    tok = train_tokenizer(CORPUS, vocab_size=400)
    model = _tiny(tok.vocab_size)
    inf = InferenceConfig(selectivity_threshold=0.42, score_aggregate="min")
    save_checkpoint(tmp_path, model, tok, inf, {"step": 3})
    ck = load_checkpoint(tmp_path)
    for (k, a), (_, b) in zip(model.state_dict().items(), ck.model.state_dict().items()):
        assert torch.equal(a, b), k
    assert ck.inference.selectivity_threshold == 0.42 and ck.inference.score_aggregate == "min"
    assert ck.inference.efforts["high"].threshold == inf.efforts["high"].threshold
    assert ck.inference.efforts == inf.efforts  # gamma included
    assert ck.meta == {"step": 3} and ck.tokenizer.encode("x = 1") == tok.encode("x = 1")
    assert set(json.loads((tmp_path / "config.json").read_text())) == {"model", "inference", "meta"}


def test_train_resumes_from_state(tmp_path) -> None:
    tok = train_tokenizer(CORPUS, vocab_size=400)
    b = RowBuilder(tok, 256, random.Random(0))
    rows = [r for r in (b.fim("".join(CORPUS[i : i + 6])) for i in range(100)) if r][:24]
    assert len(rows) == 24
    RowStore.write(tmp_path / "data" / "train", iter(rows), len(rows), 256, tok.eot_id)
    RowStore.write(tmp_path / "data" / "val", iter(rows[:8]), 8, 256, tok.eot_id)
    tok.save(tmp_path / "data" / "tokenizer.json")
    cfg = TrainConfig(
        run_dir=tmp_path / "run",
        data_dir=tmp_path / "data",
        preset="tiny",
        steps=6,
        batch_size=4,
        eval_every=3,
        warmup=2,
    )
    train(cfg)
    cfg.steps = 9
    ckpt = train(cfg)
    events = [json.loads(line) for line in (tmp_path / "run" / "train.log.jsonl").read_text().splitlines()]
    starts = [e for e in events if e.get("event") == "start"]
    assert [s["step"] for s in starts] == [0, 6]
    evals = [e for e in events if e.get("event") == "eval"]
    assert [e["step"] for e in evals] == [3, 6, 9] and all("val_loss" in e for e in evals)
    assert load_checkpoint(ckpt).meta["step"] == 9


def test_fine_tune_on_a_git_repository(tiny_checkpoint, tmp_path) -> None:
    """``editserver train --repo`` mines the history with gitpython and continues from a checkpoint."""
    import git

    repo = git.Repo.init(tmp_path / "proj")
    src = tmp_path / "proj" / "calc.py"
    body = "".join(f"def f{i}(x):\n    return helper(x, {i})\n\n" for i in range(8))
    for n, name in enumerate(["helper", "assist", "support"]):
        src.write_text("def helper(x, k):\n    return x + k\n\n" + body.replace("helper", name))
        repo.index.add([str(src)])
        repo.index.commit(f"rename {n}")
    run = tmp_path / "run"
    args = ["--repo", str(tmp_path / "proj"), "--init", str(tiny_checkpoint), "--run", str(run)]
    args += ["--rows", "16", "--steps", "2", "--batch-size", "2", "--eval-every", "1", "--seq-len", "256"]
    r = train_cli(*args, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "mined 2 file edits" in r.stdout
    ck = load_checkpoint(run / "checkpoint")
    assert ck.meta["step"] == 2
    log = (run / "train.log.jsonl").read_text()
    assert str(tiny_checkpoint) in log


def test_precision_auto_follows_the_hardware(monkeypatch) -> None:
    """bf16 autocast only where bf16 is computed natively; explicit choices are honoured."""
    import editserver.model.train.loop as mt

    monkeypatch.setattr(mt, "bf16_supported", lambda device: False)
    assert not mt.autocast("cpu", "auto")._enabled
    assert mt.autocast("cpu", "bf16")._enabled and not mt.autocast("cpu", "fp32")._enabled
    monkeypatch.setattr(mt, "bf16_supported", lambda device: True)
    assert mt.autocast("cpu", "auto")._enabled
    with pytest.raises(ValueError, match="precision"):
        mt.autocast("cpu", "fp8")
    assert mt.bf16_supported("cuda")


def test_train_cli_rejects_a_bad_mix(tmp_path) -> None:
    r = train_cli("--run", str(tmp_path / "r"), "--mix", "0.5,0.6,0.1")
    assert r.returncode == 2 and "--mix needs three or four" in r.stdout


def test_train_cli_source_needs_python_files(tmp_path) -> None:
    """``--source DIR`` adds DIR's Python files to the corpus; a DIR without any is an error."""
    from editserver.model.train.data import python_source_files

    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "algo.py").write_text("def f(x):\n    return x\n")
    (tmp_path / "src" / "click").mkdir()  # a held-out package is skipped under any root
    (tmp_path / "src" / "click" / "core.py").write_text("x = 1\n")
    assert [p.name for p in python_source_files([tmp_path / "src"])] == ["algo.py"]
    (tmp_path / "empty").mkdir()
    r = train_cli("--run", str(tmp_path / "r"), "--source", str(tmp_path / "empty"))
    assert r.returncode == 2 and "no Python files under" in r.stdout


def test_export_keeps_fp32_when_asked(tiny_checkpoint, tmp_path) -> None:
    """``--export-dtype fp32`` ships full-precision weights that a later run continues with --init."""
    import shutil

    from safetensors import safe_open

    shutil.copytree(tiny_checkpoint, tmp_path / "run" / "checkpoint")
    for dtype, want in (("fp32", "F32"), ("bf16", "BF16")):
        out = tmp_path / f"ship-{dtype}"
        r = train_cli("--run", str(tmp_path / "run"), "--export", str(out), "--export-dtype", dtype)
        assert r.returncode == 0, r.stderr
        with safe_open(str(out / "model.safetensors"), "pt") as f:
            name = next(iter(f.keys()))
            assert str(f.get_slice(name).get_dtype()) == want
        assert torch.allclose(
            load_checkpoint(out).model.embed.weight.float(),
            load_checkpoint(tiny_checkpoint).model.embed.weight.float(),
            atol=1e-2,
        )


def test_a_run_gains_the_draft_input_on_resume_and_keeps_it(tmp_path) -> None:
    """``--canvas-draft`` on a saved run: same weights, a gain that learns from next-edit rows."""
    tok = train_tokenizer(CORPUS, vocab_size=400)
    b = RowBuilder(tok, 256, random.Random(0))
    texts = ("".join(CORPUS[i : i + 8]) for i in range(0, len(CORPUS), 2))
    rows = [r for r in (b.rename("pkg/mod.py", t) for t in texts) if r][:16]
    assert len(rows) == 16
    RowStore.write(tmp_path / "data" / "train", iter(rows), len(rows), 256, tok.eot_id)
    tok.save(tmp_path / "data" / "tokenizer.json")
    cfg = TrainConfig(run_dir=tmp_path / "run", data_dir=tmp_path / "data", preset="tiny", steps=3)
    cfg.batch_size, cfg.eval_every, cfg.warmup = 4, 3, 1
    train(cfg)
    assert not load_checkpoint(tmp_path / "run" / "checkpoint").model.cfg.canvas_draft
    cfg.steps, cfg.canvas_draft = 6, True
    ck = load_checkpoint(train(cfg))
    gain = ck.model.draft_gain.detach()
    assert ck.model.cfg.canvas_draft and not torch.equal(gain, torch.ones_like(gain)), "the gain learned"
    cfg.steps, cfg.canvas_draft = 9, False  # resumed without the flag: the run keeps its draft input
    ck = load_checkpoint(train(cfg))
    assert ck.model.cfg.canvas_draft and ck.meta["step"] == 9


@pytest.mark.slow  # a cold inductor compile takes one to two minutes on 2 CPU cores
def test_compiled_training_matches_eager(tmp_path) -> None:
    """``--compile`` trains the same model: from the same initial weights and batches, the weights
    after a few steps equal eager training's (up to kernel rounding), under the same names."""
    tok = train_tokenizer(CORPUS, vocab_size=400)
    b = RowBuilder(tok, 64, random.Random(0))
    rows = [r for r in (b.fim("".join(CORPUS[i : i + 3])) for i in range(100)) if r][:16]
    RowStore.write(tmp_path / "data" / "train", iter(rows), len(rows), 64, tok.eot_id)
    tok.save(tmp_path / "data" / "tokenizer.json")
    weights = {}
    for compiled in (False, True):
        torch.manual_seed(0)  # the same initial weights for both runs
        cfg = TrainConfig(run_dir=tmp_path / f"run-{compiled}", data_dir=tmp_path / "data", preset="tiny")
        cfg.steps, cfg.batch_size, cfg.eval_every, cfg.warmup, cfg.compile = 3, 4, 3, 1, compiled
        # bf16 autocast (the default on AVX-512 BF16 CPUs) rounds differently when fused
        cfg.precision = "fp32"
        weights[compiled] = load_checkpoint(train(cfg)).model.state_dict()
    assert set(weights[True]) == set(weights[False])
    torch.manual_seed(0)
    init = _tiny(tok.vocab_size)  # the weights train() starts both runs from
    wq = "layers.0.attn.wq.weight"
    assert not torch.allclose(init.state_dict()[wq], weights[False][wq].float()), "3 steps changed nothing"
    for k, w in weights[False].items():
        torch.testing.assert_close(weights[True][k], w, rtol=1e-3, atol=1e-4)


def test_fine_tune_data_keeps_a_tiny_history_whose_commits_all_hash_to_validation(
    tiny_checkpoint, tmp_path
) -> None:
    """Every tenth commit (by sha) is held out; a history where that is every commit still trains.

    A commit's sha depends on its time, so the git test above hits this one run in a hundred."""
    import git

    from editserver.model.train.corpus import prepare
    from editserver.model.train.data import RowStore
    from editserver.model.train.gitmine import mine_repo

    repo = git.Repo.init(tmp_path / "proj")
    src = tmp_path / "proj" / "calc.py"
    for n, name in enumerate(["helper", "assist", "support"]):
        src.write_text(f"def {name}(x, k):\n    return x + k\n\n\nprint({name}(1, 2))\n")
        repo.index.add([str(src)])
        repo.index.commit(f"rename {n}")
    records = list(mine_repo(tmp_path / "proj"))
    assert len(records) == 2
    for r in records:
        r["sha"] = "0000000a" + r["sha"][8:]  # 10 % 10 == 0: in the held-out tenth
    data = tmp_path / "data"
    prepare(
        data,
        None,
        n_train=8,
        n_val=4,
        seq_len=256,
        tokenizer_path=tiny_checkpoint / "tokenizer.json",
        code_files=[],
        extra_records=records,
    )
    assert json.loads((data / "train" / "info.json").read_text())["files"] == 1
    assert len(RowStore(data / "train").ids) == 8


def test_train_cli_repo_must_be_a_git_repository(tmp_path) -> None:
    (tmp_path / "plain").mkdir()
    r = train_cli("--repo", str(tmp_path / "plain"), "--run", str(tmp_path / "r"))
    assert r.returncode == 2 and "not a git repository" in r.stdout and "Traceback" not in r.stderr


@pytest.mark.parametrize("flag", ["--init", "--teacher"])
def test_train_cli_names_a_missing_checkpoint(flag, tmp_path) -> None:
    r = train_cli(flag, str(tmp_path / "none"), "--run", str(tmp_path / "r"), "--steps", "1")
    assert r.returncode == 2 and f"{flag}: " in r.stdout and "not a checkpoint directory" in r.stdout
    assert "Traceback" not in r.stderr and not (tmp_path / "r").exists()
