"""Lookahead: the rule's own answer, token for token, in fewer model calls (model/lookahead.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from model.cache import NoCache
from model.config import PRESETS, ModelConfig
from model.draft import step_drafts
from model.lookahead import Lookahead
from model.sampler import JointRule, LeftmostRule, StepBudget, ThresholdRule, TopKRule, denoise
from model.transformer import Transformer

MASK, EOT, V = 1, 0, 300


def _model(canvas_draft: bool = False, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    cfg = {**PRESETS["tiny"].to_dict(), "vocab_size": V, "canvas_draft": canvas_draft}
    return Transformer(ModelConfig.from_dict(cfg)).eval()


def _run(model, rows: int = 3, **kw):
    ctx = torch.randint(2, V, (rows, 20), generator=torch.Generator().manual_seed(0))
    lens = torch.tensor([20, 14, 17][:rows])
    kw.setdefault("canvas_len", 24)
    kw.setdefault("block_size", 8)
    return denoise(model, ctx, lens, mask_id=MASK, eot_id=EOT, **kw)


def _same(a, b) -> None:
    assert torch.equal(a.tokens, b.tokens)
    assert torch.allclose(a.confidences, b.confidences, atol=1e-5)
    assert torch.equal(a.lengths, b.lengths) and torch.equal(a.finished, b.finished)


@pytest.mark.parametrize("rule", [TopKRule(1), LeftmostRule(), JointRule(3.0), ThresholdRule(0.02)])
@pytest.mark.parametrize("depth", [1, 3, 8])
def test_lookahead_gives_the_rules_own_answer(rule, depth: int) -> None:
    m = _model(seed=depth)
    plain = _run(m, rule=rule, canvas_lens=torch.tensor([24, 11, 19]))
    fast = _run(m, rule=rule, canvas_lens=torch.tensor([24, 11, 19]), lookahead=Lookahead(depth))
    _same(plain, fast)
    assert fast.steps <= plain.steps
    assert fast.row_steps >= fast.steps  # each call computed at least the live rows


def test_lookahead_with_a_stop_hook_and_drafts_matches_step_by_step() -> None:
    m = _model(canvas_draft=True)

    def stop_at_seven(canvas, fixed, conf):  # a row ends once its committed start holds token 7
        first_open = torch.where((~fixed).any(1), (~fixed).int().argmax(1), fixed.shape[1])
        return torch.tensor([bool((canvas[b, : int(first_open[b])] == 7).any()) for b in range(len(canvas))])

    regions = [list(range(5, 40)), None, list(range(7, 30))]
    kw = dict(rule=TopKRule(1), done=stop_at_seven, cache=NoCache(), canvas_len=24, canvas_lens=None)
    ctx = torch.randint(2, V, (3, 20), generator=torch.Generator().manual_seed(1))
    lens = torch.full((3,), 20)
    run = lambda **x: denoise(m, ctx, lens, mask_id=MASK, eot_id=EOT, block_size=24, **kw, **x)  # noqa: E731
    plain = run(draft=step_drafts(regions, EOT))
    fast = run(draft=step_drafts(regions, EOT), lookahead=Lookahead(4))
    _same(plain, fast)


def _canvas_blind() -> Transformer:
    """A model whose canvas predictions ignore the canvas (attention and MLP outputs zeroed: every
    masked position predicts the same token)."""
    m = _model()
    with torch.no_grad():
        for layer in m.layers:
            layer.attn.wo.weight.zero_()
            layer.ffn.w_down.weight.zero_()
    return m


def test_predictions_that_never_change_are_all_accepted() -> None:
    """A canvas-blind model: every guess is right, so left to right a block of 24
    takes one call to start the guesses and ceil(23 / (depth + 1)) more."""
    m = _canvas_blind()
    plain = _run(m, rows=1, rule=LeftmostRule(), block_size=24)
    assert plain.steps == 24 and int(plain.lengths[0]) == 24  # one token each step, never end-of-text
    for depth in (1, 3, 5):
        fast = _run(m, rows=1, rule=LeftmostRule(), block_size=24, lookahead=Lookahead(depth))
        _same(plain, fast)
        assert fast.steps == 1 + -(-23 // (depth + 1))
        left, rows = 23, 1  # each later call: the row and its min(depth, left) guessed variants
        while left:
            guessed = min(depth, left)
            rows, left = rows + 1 + guessed, left - min(left, guessed + 1)
        assert fast.row_steps == rows


def test_a_blocks_first_guesses_come_from_the_last_blocks_look_at_it() -> None:
    """The same canvas-blind model in blocks of 8: only the first block's first call has nothing to
    verify; each later block starts from guesses its previous block's calls made (``carry``), so it
    takes ceil(8 / (depth + 1)) calls instead of 1 + ceil(7 / (depth + 1))."""
    m = _canvas_blind()
    plain = _run(m, rows=1, rule=LeftmostRule(), block_size=8)
    for depth in (1, 3, 7):
        fast = _run(m, rows=1, rule=LeftmostRule(), block_size=8, lookahead=Lookahead(depth))
        _same(plain, fast)
        assert fast.steps == 1 + -(-7 // (depth + 1)) + 2 * -(-8 // (depth + 1))


def test_lookahead_refuses_what_it_cannot_verify() -> None:
    m = _model()
    for rule in (StepBudget(TopKRule(1), torch.tensor([3.0, 3.0, 3.0])), JointRule(0.1, stable=0.0)):
        with pytest.raises(ValueError, match="lookahead"):
            _run(m, rule=rule, lookahead=Lookahead(2))
    with pytest.raises(ValueError, match="greedy"):
        _run(m, rule=TopKRule(1), temperature=1.0, lookahead=Lookahead(2))
    with pytest.raises(ValueError, match="depth"):
        Lookahead(0)


def test_engine_one_token_per_step_with_lookahead_answers_the_same(tiny_checkpoint) -> None:
    from model.api import Engine, FimRequest, SamplingOptions

    eng = Engine.load(tiny_checkpoint)
    for prefix, left in (("def add(a, b):\n    return ", False), ("x = [1, 2", True)):
        # a one-line request: its length ensemble, its stop hook, its rows ending at different steps
        o = SamplingOptions(sequential=True, left_to_right=left, stop=["\n"])
        plain = eng.complete(FimRequest(prefix, "\n", max_tokens=16, options=o))
        fast = eng.complete(
            FimRequest(prefix, "\n", max_tokens=16, options=dataclasses.replace(o, lookahead=4))
        )
        assert fast.text == plain.text and fast.completion_tokens == plain.completion_tokens
        assert fast.token_confidences == pytest.approx(plain.token_confidences, abs=1e-5)
        assert fast.steps <= plain.steps and fast.row_steps >= fast.steps
        assert plain.row_steps >= plain.steps  # both ensemble rows, while both decode


def test_an_effort_can_set_lookahead_and_bad_settings_are_refused(tiny_checkpoint) -> None:
    from model.api import Engine, FimRequest, SamplingOptions
    from model.config import EffortPreset, InferenceConfig

    eng = Engine.load(tiny_checkpoint)
    req = FimRequest("def f(x):\n    y = ", "\n    return y\n", max_tokens=16)
    fast_preset = EffortPreset(threshold=0.9, block_size=32, gamma=0.02, lookahead=3)
    effort = eng.resolve_effort(None)
    eng.inference = dataclasses.replace(eng.inference, efforts={**eng.inference.efforts, effort: fast_preset})
    base = dataclasses.replace(fast_preset, lookahead=None)
    ref = Engine.load(tiny_checkpoint)
    ref.inference = dataclasses.replace(ref.inference, efforts={**ref.inference.efforts, effort: base})
    a, b = eng.complete(req), ref.complete(req)
    assert a.text == b.text and a.steps <= b.steps and a.row_steps >= a.steps
    # a request turns it off with 0, and a step budget cannot be verified
    off = eng.complete(dataclasses.replace(req, options=SamplingOptions(lookahead=0)))
    assert off.row_steps == b.row_steps and off.text == b.text
    with pytest.raises(ValueError, match="step budget"):
        eng.complete(FimRequest("x = ", "\n", options=SamplingOptions(stop=["\n"], line_steps=3)))
    with pytest.raises(ValueError, match="at least 0"):
        eng.complete(FimRequest("x = ", "", options=SamplingOptions(lookahead=-1)))
    d = {"efforts": {"low": dataclasses.asdict(fast_preset)}, "default_effort": "low"}
    assert InferenceConfig.from_dict(InferenceConfig.from_dict(d).to_dict()).efforts["low"] == fast_preset
    for bad in ({"stable": 0.3}, {"line_steps": 3}, {"lookahead": 0}):
        with pytest.raises(ValueError, match="lookahead"):
            InferenceConfig.from_dict(
                {"efforts": {"low": {**d["efforts"]["low"], **bad}}, "default_effort": "low"}
            )


@pytest.mark.parametrize("rule", [TopKRule(1), LeftmostRule(), JointRule(3.0)])
def test_a_tree_of_runner_up_tokens_gives_the_rules_own_answer(rule) -> None:
    m = _model(seed=3)
    plain = _run(m, rule=rule)
    for nodes in (4, 9):
        fast = _run(m, rule=rule, lookahead=Lookahead(3, nodes=nodes))
        _same(plain, fast)
        assert fast.steps <= plain.steps


def _commits(m, ctx: torch.Tensor, lookahead: Lookahead) -> tuple[object, list[tuple[int, torch.Tensor]]]:
    """Decode rows of context ``ctx`` [2, 20] one token per step with ``lookahead``; the result, and
    for each row's sub-step (the stop hook sees every one) the token it committed at its first new
    position with the model's probabilities [V] there on the canvas as it was just before (the
    end-of-text fill left out)."""
    states: list[tuple[torch.Tensor, torch.Tensor]] = []

    def watch(canvas, fixed, conf):
        states.append((canvas.clone(), fixed.clone()))
        return torch.zeros(len(canvas), dtype=torch.bool)

    kw = dict(mask_id=MASK, eot_id=EOT, block_size=16, rule=TopKRule(1), done=watch)
    res = denoise(m, ctx, torch.tensor([20, 20]), 16, lookahead=lookahead, **kw)
    before = (torch.full((2, 16), MASK), torch.zeros((2, 16), dtype=torch.bool))
    out = []
    for canvas, fixed in states:
        new = fixed & ~before[1]  # [2, 16]
        ids = torch.cat([ctx, torch.where(before[1], before[0], MASK)], dim=1)
        with torch.no_grad():
            logits = m(ids, context_lens=torch.tensor([20, 20]))[:, 20:].float()
        logits[..., MASK] = float("-inf")
        for b in range(2):
            pos = new[b].nonzero().squeeze(1).tolist()
            if pos and not bool((before[0][b][before[1][b]] == EOT).any()):
                out.append((int(canvas[b, pos[0]]), logits[b, pos[0]].softmax(-1)))
        before = (canvas, fixed)
    return res, out


def test_agree_commits_each_token_as_the_models_choice_given_what_came_before() -> None:
    """With ``agree`` the order may differ from the rule's, but every token committed one at a time
    is the model's argmax on the canvas as it was just before."""
    ctx = torch.randint(2, V, (2, 20), generator=torch.Generator().manual_seed(2))
    res, commits = _commits(_model(seed=5), ctx, Lookahead(4, nodes=8, agree=True))
    assert (res.tokens != MASK).all() and len(commits) >= 8
    for got, p in commits:
        assert got == int(p.argmax())


def test_accept_commits_the_models_first_or_a_close_second_choice() -> None:
    """With ``accept`` a below 1 a guessed token is also right when the verifying call ranks it second
    at no less than a times its first's probability: each token committed one at a time is the model's
    first or such a second choice on the canvas just before, and some are seconds (fewer calls)."""
    m = _model(seed=7)
    ctx = torch.randint(2, V, (2, 20), generator=torch.Generator().manual_seed(3))
    strict, _ = _commits(m, ctx, Lookahead(4, agree=True))
    loose, commits = _commits(m, ctx, Lookahead(4, agree=True, accept=0.5))
    assert loose.steps <= strict.steps
    firsts = seconds = 0
    for got, p in commits:
        two_p, two_i = p.topk(2)
        if got == int(two_i[0]):
            firsts += 1
        else:
            assert got == int(two_i[1]) and float(two_p[1]) >= 0.5 * float(two_p[0]) - 1e-4
            seconds += 1
    assert firsts >= 4 and seconds >= 1


def test_accept_keeps_a_chain_a_chain() -> None:
    """``accept`` asks each call for runner-up tokens, but without ``nodes`` the guesses stay the
    chain of top tokens: a runner-up likelier than the chain's next guess does not replace it."""
    tok = torch.tensor([[5, 6, 7, 8, 9, 10]])  # [1, 6]
    conf = torch.tensor([[0.9, 0.5, 0.8, 0.7, 0.6, 0.55]])
    alt_p = torch.tensor(
        [[0.05, 0.45, 0.75, 0.2, 0.3, 0.4]]
    )  # position 2's runner-up: 0.9 * 0.75 > 0.9 * 0.8 * 0.7

    def surest(t, c, left):  # one token per step, the most confident
        return left & (c == torch.where(left, c, -1.0).max(dim=1, keepdim=True).values)

    def guess(la: Lookahead):
        left, live = torch.ones((1, 6), dtype=torch.bool), torch.ones(1, dtype=torch.bool)
        return la._guess(surest, tok, conf, conf, tok + 100, alt_p, left, live, EOT)

    chain = guess(Lookahead(3, agree=True, accept=0.5))
    assert chain.parent.tolist() == [[-1, 0, 1]] and chain.depth.tolist() == [[1, 2, 3]]
    assert bool((chain.tok == tok[:, None, :])[chain.own].all())
    tree = guess(Lookahead(3, nodes=3, agree=True, accept=0.5))  # nodes == depth: a chain too
    assert tree.parent.tolist() == [[-1, 0, 1]]
    wide = guess(Lookahead(3, nodes=4, agree=True, accept=0.5))  # a tree takes the likely runner-up
    assert bool((wide.tok != tok[:, None, :])[wide.own].any())


def test_accept_needs_agree_and_a_share() -> None:
    for bad in (dict(accept=0.5), dict(agree=True, accept=0.0), dict(agree=True, accept=1.5)):
        with pytest.raises(ValueError, match="accept"):
            Lookahead(3, **bad)
    from model.config import InferenceConfig

    low = {"threshold": 0.9, "block_size": 32, "gamma": 0.1, "lookahead": 3, "lookahead_accept": 0.5}
    with pytest.raises(ValueError, match="lookahead_accept"):
        InferenceConfig.from_dict({"efforts": {"low": low}, "default_effort": "low"})
    ok = InferenceConfig.from_dict(
        {"efforts": {"low": {**low, "lookahead_agree": True}}, "default_effort": "low"}
    )
    assert ok.efforts["low"].lookahead_accept == 0.5
