"""The drafter (model/drafter.py): lookahead's guesses re-predicted after each guess. Guesses are
verified by real model calls, so a drafter, trained or random, changes calls, never answers."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from model.cache import NoCache
from model.config import PRESETS, ModelConfig
from model.drafter import Drafter
from model.lookahead import Lookahead
from model.sampler import JointRule, TopKRule, denoise
from model.transformer import Transformer

MASK, EOT, V = 1, 0, 300


def _model(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    cfg = {**PRESETS["tiny"].to_dict(), "vocab_size": V}
    return Transformer(ModelConfig.from_dict(cfg)).eval()


def _drafter(m: Transformer, seed: int = 0, trained: bool = True) -> Drafter:
    """A drafter whose output projections are random (as if trained), or as initialized."""
    torch.manual_seed(seed)
    d = Drafter(m.cfg).eval()
    if trained:
        with torch.no_grad():
            d.block.attn.wo.weight.normal_(std=0.5)
            d.block.ffn.w_down.weight.normal_(std=0.5)
    return d


def _run(model, **kw):
    ctx = torch.randint(2, V, (3, 20), generator=torch.Generator().manual_seed(0))
    kw.setdefault("canvas_lens", torch.tensor([24, 11, 19]))
    return denoise(model, ctx, torch.tensor([20, 14, 17]), 24, mask_id=MASK, eot_id=EOT, block_size=8, **kw)


def _same(a, b) -> None:
    assert torch.equal(a.tokens, b.tokens)
    assert torch.allclose(a.confidences, b.confidences, atol=1e-5)
    assert torch.equal(a.lengths, b.lengths) and torch.equal(a.finished, b.finished)


@pytest.mark.parametrize("rule", [TopKRule(1), JointRule(3.0)])
@pytest.mark.parametrize("lookahead", [Lookahead(3), Lookahead(4, nodes=9)])
def test_a_drafter_changes_calls_never_answers(rule, lookahead: Lookahead) -> None:
    m = _model(seed=3)
    plain = _run(m, rule=rule)
    frozen = _run(m, rule=rule, lookahead=lookahead)
    drafted = _run(m, rule=rule, lookahead=lookahead, drafter=_drafter(m))
    _same(plain, drafted)
    assert drafted.steps <= plain.steps
    # a random drafter guesses differently from the frozen predictions: the calls differ
    assert (drafted.steps, drafted.row_steps) != (frozen.steps, frozen.row_steps)


def test_an_untrained_drafter_guesses_what_the_frozen_predictions_do() -> None:
    """Its output projections start at zero, so it is the identity on the call's hidden states."""
    m = _model(seed=4)
    la = Lookahead(4, nodes=8, agree=True)
    frozen = _run(m, rule=TopKRule(1), lookahead=la)
    drafted = _run(m, rule=TopKRule(1), lookahead=la, drafter=_drafter(m, trained=False))
    _same(frozen, drafted)
    assert (drafted.steps, drafted.row_steps) == (frozen.steps, frozen.row_steps)


def test_the_drafter_reads_the_same_hidden_states_without_the_cache() -> None:
    m, d = _model(seed=5), _drafter(_model(seed=5), seed=1)
    la = Lookahead(3, agree=True)
    ctx = torch.randint(2, V, (3, 20), generator=torch.Generator().manual_seed(1))
    lens = torch.full((3,), 20)
    kw = dict(mask_id=MASK, eot_id=EOT, block_size=8, rule=TopKRule(1), lookahead=la, drafter=d)
    cached = denoise(m, ctx, lens, 16, **kw)
    uncached = denoise(m, ctx, lens, 16, cache=NoCache(), **kw)
    _same(cached, uncached)
    assert (cached.steps, cached.row_steps) == (uncached.steps, uncached.row_steps)


def test_a_drafter_needs_lookahead() -> None:
    m = _model()
    with pytest.raises(ValueError, match="lookahead"):
        _run(m, rule=TopKRule(1), drafter=_drafter(m))


def test_the_engine_loads_saves_and_asks_for_a_drafter(tiny_checkpoint, tmp_path) -> None:
    from model.api import Engine, FimRequest, SamplingOptions
    from model.checkpoint import export_checkpoint, load_checkpoint, save_drafter

    o = SamplingOptions(sequential=True, stop=["\n"], lookahead=4, lookahead_draft=True)
    req = FimRequest("def add(a, b):\n    return ", "\n", max_tokens=16, options=o)
    with pytest.raises(ValueError, match="drafter"):
        Engine.load(tiny_checkpoint).complete(req)
    ck = load_checkpoint(tiny_checkpoint)
    assert ck.drafter is None
    d = _drafter(ck.model)
    export_checkpoint(tiny_checkpoint, tmp_path / "with")
    save_drafter(tmp_path / "with", d)
    eng = Engine.load(tmp_path / "with")
    assert eng.ck.drafter is not None
    for k, v in d.state_dict().items():  # stored in bf16
        assert torch.equal(eng.ck.drafter.state_dict()[k], v.to(torch.bfloat16).float())
    plain = eng.complete(
        dataclasses.replace(req, options=dataclasses.replace(o, lookahead=0, lookahead_draft=None))
    )
    drafted = eng.complete(req)
    assert drafted.text == plain.text and drafted.steps <= plain.steps
    with pytest.raises(ValueError, match="needs lookahead"):
        eng.complete(dataclasses.replace(req, options=dataclasses.replace(o, lookahead=0)))
    # an export keeps the drafter; an average of two checkpoints decodes differently and drops it
    assert load_checkpoint(export_checkpoint(tmp_path / "with", tmp_path / "copy")).drafter is not None
    avg = export_checkpoint(tmp_path / "with", tmp_path / "avg", average_with=tiny_checkpoint)
    assert load_checkpoint(avg).drafter is None
