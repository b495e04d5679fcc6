"""KTO on open-weight families through LoRA: the adapters, the in-place ELBO against a brute-force
reading of the logits, one optimizer step, the export's round trip, and ``editserver align`` as a
user runs it on a tiny Dream directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from editserver.model.infer.engine import Engine, FimRequest
from editserver.model.infer.layout import layout_for
from editserver.model.infer.loader import load_checkpoint
from editserver.model.train.kto_data import Example
from editserver.model.train.kto_open import OpenAlignConfig, OpenAligner, open_elbo, open_masks, open_row
from editserver.model.train.lora import LoRA
from editserver.protocol.prompt import EditPrompt, build_prompt
from tests.hf_models import make_dream, make_llada

REGION = "def area(w, h):\n    return w * h\n"
PROMPT = build_prompt(EditPrompt("geo.py", "import math\n\n", REGION, 4, "\nprint(area(2, 3))\n", [], ""))
PRE, SUF = "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"


@pytest.fixture(scope="module")
def dream(tmp_path_factory) -> Path:
    return make_dream(tmp_path_factory.mktemp("dream") / "m")[0]


@pytest.fixture(scope="module")
def llada(tmp_path_factory) -> Path:
    return make_llada(tmp_path_factory.mktemp("llada") / "m")[0]


def examples() -> list[Example]:
    return [
        Example("fim", True, "a + b", "t:accept", prefix=PRE, suffix=SUF),
        Example("fim", False, "a - b - b", "t:reject", prefix=PRE, suffix=SUF),
        Example("fim", True, "print(x)", "t:accept", prefix="for x in range(3):\n    ", suffix="\n"),
        Example("fim", False, "x = x", "t:reject", prefix="for x in range(3):\n    ", suffix="\n"),
        Example("edit", True, REGION.replace("w * h", "h * w"), "t:accept", prompt=PROMPT),
        Example("edit", False, "pass\n", "t:reject", prompt=PROMPT),
    ]


def test_lora_starts_at_base_switches_off_and_merges(dream):
    model = load_checkpoint(dream, "cpu", torch.float32).model
    ids = torch.randint(0, 300, (2, 12))
    base = model(ids)
    lora = LoRA(model, 4)
    assert len(lora.names) == 7 * model.cfg.n_layers
    assert torch.equal(model(ids), base)  # B = 0: the adapted model starts as the base
    with torch.no_grad():
        for b in lora.b.values():
            b.normal_(0, 0.05)
    adapted = model(ids)
    assert (adapted - base).abs().max() > 1e-3
    with lora.disabled():
        assert torch.equal(model(ids), base)  # the reference: the same module, adapters off
    lora.merge_(model)
    assert torch.allclose(model(ids), adapted, atol=1e-5)  # merged (adapters zeroed, still hooked)
    lora.remove()
    assert torch.allclose(model(ids), adapted, atol=1e-5)
    assert all(not p.requires_grad for p in model.parameters())


@pytest.mark.parametrize("family,shift", [("dream", 1), ("llada", 0)])
def test_in_place_elbo_equals_brute_force(family, shift, request):
    ck = load_checkpoint(request.getfixturevalue(family), "cpu", torch.float32)
    layout = layout_for(ck)
    assert layout.shift == bool(shift)
    exs = examples()[:1] + examples()[4:5]  # a FIM row and a next-edit row of different lengths
    rows = [open_row(layout, ex, 512) for ex in exs]
    assert rows[0].suf and rows[1].suf is None
    noisy, weight, answer = open_masks(rows, 1, ck.tokenizer.mask_id, [11, 12])
    got = open_elbo(ck.model, layout, rows, noisy, weight, answer, 1)
    for b, row in enumerate(rows):
        n = len(row.ans)
        seq = torch.tensor([[*row.ctx, *noisy[b, :n].tolist(), *(row.suf or [])]])
        with torch.no_grad():
            logp = ck.model(seq)[0].log_softmax(-1)  # [L, V] raw logits, no shift applied
        masked = (noisy[b, :n] == ck.tokenizer.mask_id).nonzero().flatten().tolist()
        assert masked and torch.allclose(weight[b, masked], weight[b, masked[0]])
        want = sum(float(logp[len(row.ctx) + j - shift, row.ans[j]]) for j in masked)
        assert float(got[b]) == pytest.approx(float(weight[b, masked[0]]) * want, rel=1e-4, abs=1e-4)


def aligner(path: Path, run: Path, exs: list[Example] | None = None, **kw) -> OpenAligner:
    exs = exs or examples()
    cfg = OpenAlignConfig(
        run_dir=run, init=path, k=2, batch_size=len(exs), precision="fp32", progress=False, **kw
    )
    return OpenAligner(cfg, exs)


def test_rewards_are_zero_at_start_and_one_step_separates_them(dream, tmp_path):
    al = aligner(dream, tmp_path / "run", lora_r=4, lr=5e-4, steps=1)
    idx = np.arange(len(al.rows))
    rewards, _ = al.rewards(idx)
    assert torch.equal(rewards, torch.zeros_like(rewards))  # policy == reference, same masks
    al.train_step()
    with torch.no_grad():
        rewards, _ = al.rewards(idx)
    # examples come in (desirable, undesirable) pairs on one prompt: each pair moves apart
    assert al.labels.tolist() == [True, False] * 3
    assert all(float(rewards[i]) > float(rewards[i + 1]) for i in (0, 2, 4))


@pytest.mark.parametrize("desirable", [True, False])
def test_one_step_raises_desirable_and_lowers_undesirable_elbo(dream, tmp_path, desirable):
    """Each class alone (answers of both classes share their padding, so in a mixed batch the
    shared part may move every ELBO one way while the pairs still move apart)."""
    exs = [e for e in examples() if e.desirable == desirable]
    al = aligner(dream, tmp_path / "run", exs, lora_r=4, lr=5e-4, steps=1)
    idx = np.arange(len(al.rows))
    al.train_step()
    with torch.no_grad():
        rewards, pol = al.rewards(idx)  # rewards = beta * (policy ELBO - reference ELBO), same masks
    assert torch.allclose(pol - al.ref_cache, rewards / al.cfg.beta)
    assert (float(rewards.mean()) > 0) == desirable and float(rewards.mean()) != 0


@pytest.mark.parametrize("family", ["dream", "llada"])
def test_export_holds_merged_weights_under_the_input_names(family, request, tmp_path):
    src = request.getfixturevalue(family)
    al = aligner(src, tmp_path / "run", lora_r=2, lr=1e-2, steps=2)
    al.train()
    out = al.export(tmp_path / "out", {"method": "kto"})
    names = {}
    for d in (src, out):
        with safe_open(str(d / "model.safetensors"), framework="pt") as f:
            names[d] = {k: f.get_slice(k).get_dtype() for k in f.keys()}
    assert names[src] == names[out]
    assert (out / "tokenizer.json").read_bytes() == (src / "tokenizer.json").read_bytes()
    assert json.loads((out / "config.json").read_text())["editserver_aligned"] == {"method": "kto"}
    ids = torch.randint(0, 300, (1, 10))
    exported = load_checkpoint(out, "cpu", torch.float32)
    assert exported.family == al.ck.family
    with torch.no_grad():
        adapted = al.model(ids)
        assert torch.allclose(exported.model(ids), adapted, atol=1e-5)
        with al.lora.disabled():
            assert (al.model(ids) - adapted).abs().max() > 1e-4  # the steps did move the model


def test_resume_keeps_adapters_and_refuses_another_rank(dream, tmp_path):
    al = aligner(dream, tmp_path / "run", lora_r=2, lr=1e-2, steps=2)
    al.train()
    again = aligner(dream, tmp_path / "run", lora_r=2, lr=1e-2, steps=2)
    assert again.step == 2 and torch.equal(again.ref_cache, al.ref_cache)
    for k, v in al.lora.state_dict().items():
        assert torch.equal(again.lora.state_dict()[k], v)
    with pytest.raises(ValueError, match="rank 2"):
        aligner(dream, tmp_path / "run", lora_r=4, steps=2)


def replay_file(path: Path) -> Path:
    """A replay ``--json`` document (editserver/replay's output) with labelled FIM rows."""
    fims = []
    for i in range(6):
        pre = f"def f{i}(width, height):\n    return "
        good = i % 2 == 0
        fims.append(
            {
                "kind": "fim", "repo": "acme/geometry", "prefix": pre, "suffix": "\n",
                "label": "accepted" if good else "rejected",
                "completion": "width * height" if good else "width - height", "expected": "width * height",
            }
        )  # fmt: skip
    path.write_text(json.dumps({"settings": {}, "suggestions": [], "fim_completions": fims}))
    return path


def test_align_cli_on_a_tiny_dream_exports_a_model_the_engine_serves(dream, tmp_path):
    replay, out = replay_file(tmp_path / "replay.json"), tmp_path / "aligned"
    cmd = [
        sys.executable, "-m", "editserver.cli", "align", "--init", str(dream), "--replay", str(replay),
        "--lora", "4", "--steps", "3", "--k", "2", "--batch-size", "4", "--precision", "fp32",
        "--export", str(out), "--run", str(tmp_path / "run"), "--no-progress",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "engine's defaults" in p.stdout
    rec = json.loads((out / "config.json").read_text())["editserver_aligned"]
    assert rec["method"] == "kto" and rec["lora_r"] == 4 and rec["steps"] == 3 and rec["k"] == 2
    assert rec["desirable"] > 0 and rec["undesirable"] > 0 and rec["sources"] == [str(replay)]
    engine = Engine.load(out)
    assert engine.layout.family == "dream"
    c = engine.complete(FimRequest("def area(width, height):\n    return ", "\n", max_tokens=8))
    assert isinstance(c.text, str) and c.canvas_tokens > 0
