"""KTO alignment (model/train/kto.py, model/train/kto_data.py) on the tiny random checkpoint."""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pytest
import torch

from editserver.model.train.kto import AlignConfig, Aligner, _batch, _trim
from editserver.model.train.kto_data import Example, HeldOutError, read_replay, read_telemetry
from editserver.model.train.kto_objective import class_weights, elbo, kto_loss, shared_masks
from editserver.protocol.prompt import EditPrompt, build_prompt

REGION = "def area(w, h):\n    return w * h\n"
PROMPT = build_prompt(EditPrompt("geo.py", "import math\n\n", REGION, 4, "\nprint(area(2, 3))\n", [], ""))


def examples() -> list[Example]:
    pre, suf = "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"
    return [
        Example("fim", True, "a + b", "test", prefix=pre, suffix=suf),
        Example("edit", True, REGION.replace("w", "width"), "test", prompt=PROMPT),
        Example("fim", False, "zzq qq zzq", "test", prefix=pre, suffix=suf),
        Example("edit", False, "class class class\n", "test", prompt=PROMPT),
    ]


def aligner(tmp_path, ckpt, **kw) -> Aligner:
    cfg = AlignConfig(run_dir=tmp_path / "run", init=ckpt, precision="fp32", progress=False, **kw)
    return Aligner(cfg, examples())


def test_kto_loss_equals_the_formula_on_hand_made_elbos():
    beta, z0, ld, lu = 0.1, 0.05, 1.5, 1.0
    pol = torch.tensor([-10.0, -20.0, -5.0, -8.0])
    ref = torch.tensor([-12.0, -19.0, -5.5, -6.0])
    desirable = torch.tensor([True, False, True, False])
    r = beta * (pol - ref)  # 0.2, -0.1, 0.05, -0.2
    loss, stats = kto_loss(r, desirable, z0, ld, lu)

    def sig(x: float) -> float:
        return 1.0 / (1.0 + math.exp(-x))

    terms = [
        ld - ld * sig(0.2 - z0),
        lu - lu * sig(z0 - (-0.1)),
        ld - ld * sig(0.05 - z0),
        lu - lu * sig(z0 - (-0.2)),
    ]
    assert float(loss) == pytest.approx(sum(terms) / 4, rel=1e-6)
    assert stats["margin"] == pytest.approx((0.2 + 0.05) / 2 - (-0.1 - 0.2) / 2, rel=1e-6)
    assert stats["d_above"] == pytest.approx(0.5)  # 0.2 > z0, 0.05 is not


def test_class_weights_bring_the_balance_into_the_papers_range():
    for n_d, n_u in [(10, 90), (90, 10), (50, 50), (120, 100), (1, 1000)]:
        ld, lu = class_weights(n_d, n_u)
        assert 1.0 - 1e-9 <= ld * n_d / (lu * n_u) <= 4.0 / 3.0 + 1e-9


def test_identical_policy_and_reference_give_zero_rewards(tmp_path, tiny_checkpoint):
    a = aligner(tmp_path, tiny_checkpoint, k=4, batch_size=4)
    assert a.store.n == 4
    with torch.no_grad():
        r, pol = a.rewards(np.arange(4))
    assert torch.isfinite(pol).all() and (pol < 0).all()  # a log-likelihood bound
    assert torch.allclose(r, torch.zeros(4), atol=1e-5)


def test_one_step_raises_desirable_and_lowers_undesirable_relative_to_reference(tmp_path, tiny_checkpoint):
    a = aligner(tmp_path, tiny_checkpoint, k=4, batch_size=4, lr=3e-3, steps=1)
    stats = a.train_step()
    assert math.isfinite(stats["loss"])
    with torch.no_grad():
        r, _ = a.rewards(np.arange(4))  # the same masks as the step's (fixed per example)
    d = torch.as_tensor(a.labels)
    assert float(r[d].mean()) > 0.0 > float(r[~d].mean())
    assert a.step == 1 and (tmp_path / "run" / "data" / "labels.npy").exists()


def test_shared_masks_have_lower_variance_than_independent_ones(tmp_path, tiny_checkpoint):
    a = aligner(tmp_path, tiny_checkpoint, k=2, batch_size=4)
    with torch.no_grad():  # a policy a little away from the reference, as during a run
        g = torch.Generator().manual_seed(0)
        for p in a.policy.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    batch = _trim(_batch(a.store, np.array([1]), "cpu", a.tok))  # the next-edit desirable example
    ids, ctx, lens = batch[0], batch[1], batch[2]
    shared, indep = [], []
    with torch.no_grad():
        for s in range(24):
            n1, w1 = shared_masks(ids, ctx, lens, 2, a.tok.mask_id, [s])
            n2, w2 = shared_masks(ids, ctx, lens, 2, a.tok.mask_id, [10_000 + s])
            pol = float(elbo(a.policy, batch, n1, w1, 2)[0])
            shared.append(pol - float(elbo(a.ref, batch, n1, w1, 2)[0]))
            indep.append(pol - float(elbo(a.ref, batch, n2, w2, 2)[0]))
    ratio = np.var(shared) / np.var(indep)
    assert ratio < 1.0, ratio


def test_resume_continues_from_the_saved_step(tmp_path, tiny_checkpoint):
    a = aligner(tmp_path, tiny_checkpoint, k=2, batch_size=2, steps=3, save_every=1)
    a.train()
    b = aligner(tmp_path, tiny_checkpoint, k=2, batch_size=2, steps=3)
    assert b.step == 3 and not torch.isnan(b.ref_cache).any()
    for x, y in zip(a.policy.parameters(), b.policy.parameters()):
        assert torch.equal(x, y)
    with pytest.raises(ValueError, match="other examples"):
        Aligner(AlignConfig(run_dir=tmp_path / "run", init=tiny_checkpoint), examples()[:3])


def replay_doc(rows: list[dict], tuned: bool) -> dict:
    return {
        "settings": {"tune_records": ["x/acme+shop.jsonl.xz"] if tuned else []},
        "summary": {},
        "suggestions": [r for r in rows if r["phase"] == "eval"],
        "tune_suggestions": [r for r in rows if r["phase"] == "tune"],
        "fim_completions": [],
    }


def edit_row(repo: str, phase: str, label: str, suggestion: str, developer: str | None) -> dict:
    return {
        "kind": "edit",
        "phase": phase,
        "id": "x",
        "repo": repo,
        "label": label,
        "prompt": PROMPT,
        "region": REGION,
        "suggestion": suggestion,
        "developer": developer,
        "error": None,
    }


def test_replay_rows_become_examples_and_held_out_rows_are_refused(tmp_path):
    good = tmp_path / "train.json"
    rows = [
        edit_row("acme/shop", "tune", "rejected", "oops\n", REGION.replace("w", "width")),
        edit_row("acme/shop", "tune", "unchanged", REGION, REGION),  # the developer left it alone
    ]
    good.write_text(json.dumps(replay_doc(rows, tuned=True)))
    got = read_replay(good)
    assert [(e.desirable, e.source) for e in got] == [
        (False, "replay:suggestion"),
        (True, "replay:developer"),
        (True, "replay:unchanged"),
    ]
    shipped_held_out = tmp_path / "click.json"
    shipped_held_out.write_text(
        json.dumps(replay_doc([edit_row("pallets/click", "eval", "rejected", "x", None)], False))
    )
    with pytest.raises(HeldOutError, match="pallets/click"):
        read_replay(shipped_held_out)
    reported = tmp_path / "report.json"  # a tuned run's evaluation rows are what replay reports
    reported.write_text(
        json.dumps(replay_doc(rows + [edit_row("acme/web", "eval", "rejected", "x", None)], True))
    )
    with pytest.raises(HeldOutError, match="acme/web"):
        read_replay(reported)


def test_telemetry_events_become_examples(tmp_path):
    from editserver.lsp.telemetry import Telemetry

    path = tmp_path / "t.sqlite3"
    t = Telemetry(str(path), keep_prompts=True)
    fim = {"prefix": "x = ", "suffix": "\n", "max_tokens": 32, "stop": ["\n"], "raw": "1 + 2"}
    t.suggestion("a", "fim", "file:///a.py", "python", fim, "1 + 2", None)
    t.event("a", "show")
    t.event("a", "accept", None, "word", "1")
    t.suggestion("b", "fim", "file:///a.py", "python", fim, "foo()", None)
    t.event("b", "show")
    t.suggestion("c", "fim", "file:///a.py", "python", fim, "never shown", None)
    edit = [{"region": [0, 1], "rewritten": REGION.replace("w", "width"), "score": 0.9}]
    t.suggestion("d", "next_edit", "file:///geo.py", "python", {"prompts": [PROMPT]}, edit, 0.9)
    t.event("d", "accept", 0)
    t.suggestion("e", "next_edit", "file:///geo.py", "python", {"prompts": [PROMPT]}, edit, 0.9)
    t.event("e", "reject")
    t.close()
    got = read_telemetry(path)
    assert [(e.kind, e.desirable, e.answer, e.source) for e in got] == [
        ("fim", True, "1", "telemetry:partial"),
        ("fim", False, "foo()", "telemetry:reject"),
        ("edit", True, edit[0]["rewritten"], "telemetry:accept"),
        ("edit", False, edit[0]["rewritten"], "telemetry:reject"),
    ]
    # without keepPrompts the same events are stored as sizes and hashes: counted, never examples
    bare = Telemetry(str(tmp_path / "bare.sqlite3"))
    bare.suggestion("a", "fim", "file:///a.py", "python", fim, "1 + 2", None)
    bare.event("a", "accept", None, "word", "1")
    bare.close()
    stats: Counter = Counter()
    assert read_telemetry(tmp_path / "bare.sqlite3", stats) == []
    assert stats["telemetry_without_prompts"] == 1 and not stats["telemetry_malformed"]


def test_an_example_gets_the_same_masks_in_any_batch() -> None:
    """The cached reference ELBO was computed on an example's masks: they must not depend on how wide
    the batch it lands in is (a longer neighbour pads it)."""
    from editserver.model.train.kto_objective import shared_masks

    row = torch.arange(2, 22)  # 20 tokens: 8 of context, 12 of answer
    short = row[None, :]  # [1, 20]
    wide = torch.cat([short, torch.full((1, 9), 0)], dim=1)  # [1, 29]: padded to a wider batch
    ctx, lens = torch.tensor([8]), torch.tensor([20])
    n1, w1 = shared_masks(short, ctx, lens, 4, 1, [7])
    n2, w2 = shared_masks(wide, ctx, lens, 4, 1, [7])
    assert torch.equal(n1, n2[:, :20]) and torch.equal(w1, w2[:, :20]) and not w2[:, 20:].any()
