"""Sampler invariants: monotone unmasking, threshold rule, determinism, early stop, exact cache."""

from __future__ import annotations

import pytest
import torch

from editserver.model.infer.cache import ContextCache, NoCache
from editserver.model.infer.config import PRESETS, ModelConfig
from editserver.model.infer.draft import step_drafts
from editserver.model.infer.transformer import Transformer
from editserver.model.infer.unmasking import JointRule, StepBudget, ThresholdRule, TopKRule, weaker_twin
from tests.helpers import denoise

MASK, EOT, V = 1, 0, 300


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelConfig.from_dict({**PRESETS["tiny"].to_dict(), "vocab_size": V})).eval()


def _run(model, **kw):
    ctx = torch.randint(2, V, (2, 20), generator=torch.Generator().manual_seed(0))
    kw.setdefault("canvas_len", 24)
    return denoise(model, ctx, torch.tensor([20, 20]), mask_id=MASK, eot_id=EOT, block_size=8, **kw)


def test_threshold_rule_commits_confident_and_at_least_one() -> None:
    conf = torch.tensor([[0.95, 0.2, 0.91, 0.5], [0.1, 0.3, 0.2, 0.05]])
    active = torch.tensor([[True, True, True, True], [True, False, True, True]])
    got = ThresholdRule(0.9).select(conf, active)
    assert got.tolist() == [[True, False, True, False], [False, False, True, False]]
    assert TopKRule(1).select(conf, active).sum(1).tolist() == [1, 1]


def test_joint_rule_bounds_the_error_of_all_but_the_least_confident_commit() -> None:
    conf = torch.tensor([[0.99, 0.3, 0.97, 0.5], [0.6, 0.99, 0.2, 0.9], [0.4, 0.3, 0.2, 0.1]])
    active = torch.tensor([[True, True, True, True], [True, True, True, False], [True] * 4])
    # row 0: 0.99 and 0.97 cost 0.01 + 0.03 nats <= 0.1, so the next (0.5) joins; then 0.74 > 0.1
    # row 1: 0.99 (0.01) lets 0.6 join; 0.9 is inactive; 0.2 would need 0.01 + 0.51 nats
    # row 2: nothing is near-certain: only the most confident token, as one token per step
    got = JointRule(0.1).select(conf, active)
    assert got.tolist() == [
        [True, False, True, True],
        [True, True, False, False],
        [True, False, False, False],
    ]
    assert JointRule(0.0).select(conf, active).sum(1).tolist() == [1, 1, 1]
    assert JointRule(float("inf")).select(conf, active).tolist() == active.tolist()
    # with gamma 0 only the threshold adds to each step's most confident token
    both = JointRule(0.0, threshold=0.55).select(conf, active)
    assert both.tolist() == [
        [True, False, True, False],
        [True, True, False, False],
        [True, False, False, False],
    ]


def test_joint_rule_decodes_in_fewer_steps_than_one_per_step(model: Transformer) -> None:
    one = _run(model, rule=TopKRule(1))
    joint = _run(model, rule=JointRule(20.0))  # a random model: ~log V nats a token
    assert joint.steps < one.steps and (joint.tokens != MASK).all()


@pytest.mark.parametrize("rule", [ThresholdRule(0.5), JointRule(20.0), JointRule(20.0, uses_margin=True)])
def test_never_undecodes_and_each_step_progresses(model: Transformer, rule) -> None:
    res = _run(model, rule=rule, record=True)
    prev = None
    for canvas in res.canvases:
        if prev is not None:
            decided = prev != MASK
            assert torch.equal(canvas[decided], prev[decided]), "a committed token changed"
            assert (canvas != MASK).sum() > (prev != MASK).sum(), "a step committed nothing"
        prev = canvas
    assert (res.tokens != MASK).all()
    assert res.model_calls == res.steps + 1


def test_one_token_per_step_baseline(model: Transformer) -> None:
    res = _run(model, rule=TopKRule(1), record=True, canvas_len=16)
    counts = [int((c != MASK).sum()) for c in res.canvases]
    # each step commits exactly one token per row, unless an end-of-text fills the rest of a row
    assert counts[0] >= 2 and all(b > a for a, b in zip(counts, counts[1:]))
    assert res.steps <= 16


def test_lower_threshold_takes_fewer_steps(model: Transformer) -> None:
    strict = _run(model, rule=ThresholdRule(1.01))
    loose = _run(model, rule=ThresholdRule(0.0))
    assert loose.steps < strict.steps


def test_deterministic_with_generator(model: Transformer) -> None:
    a = _run(model, temperature=1.0, top_p=0.9, generator=torch.Generator().manual_seed(7))
    b = _run(model, temperature=1.0, top_p=0.9, generator=torch.Generator().manual_seed(7))
    c = _run(model, temperature=1.0, top_p=0.9, generator=torch.Generator().manual_seed(8))
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.confidences, b.confidences)
    assert not torch.equal(a.tokens, c.tokens)


def test_context_cache_matches_recompute(model: Transformer) -> None:
    a = _run(model, cache=ContextCache())
    b = _run(model, cache=NoCache())
    assert torch.equal(a.tokens, b.tokens) and a.steps == b.steps


def test_early_stop_at_end_of_text(model: Transformer) -> None:
    """When end-of-text is certain, one step decodes it and fills the rest: no further blocks run."""
    ctx = torch.randint(2, V, (1, 10))
    everything_but_eot = [i for i in range(V) if i != EOT]
    res = denoise(
        model,
        ctx,
        torch.tensor([10]),
        64,
        mask_id=MASK,
        eot_id=EOT,
        block_size=16,
        rule=ThresholdRule(0.9),
        suppress_ids=everything_but_eot,
    )
    assert bool(res.finished[0]) and int(res.lengths[0]) == 0
    assert (res.tokens[0] == EOT).all()
    assert res.steps == 1  # 4 blocks of 16, yet one step


def test_end_of_text_fills_the_tail(model: Transformer) -> None:
    res = _run(model, rule=TopKRule(1), canvas_len=24)
    for row, n in zip(res.tokens, res.lengths.tolist()):
        assert (row[n:] == EOT).all() and (row[:n] != EOT).all()


def test_cancel_stops_decoding(model: Transformer) -> None:
    calls = []
    res = _run(model, rule=TopKRule(1), should_stop=lambda: len(calls) > 2, on_step=lambda c: calls.append(1))
    assert res.cancelled and res.steps == 3


def test_done_hook_ends_a_row_early(model: Transformer) -> None:
    # end row 0 as soon as its first position is decided; row 1 decodes in full
    res = _run(
        model,
        rule=TopKRule(1),
        record=True,
        done=lambda canvas, fixed, conf: fixed[:, 0] & (torch.arange(2) == 0),
    )
    first = next(i for i, c in enumerate(res.canvases) if c[0, 0] != MASK)
    ended = res.canvases[first][0]
    assert (ended != MASK).all(), "an ended row keeps no undecided position"
    n0 = int(res.lengths[0])
    assert (res.tokens[0, n0:] == EOT).all() and (res.tokens[0, :n0] != EOT).all()
    assert bool(res.finished[0]) or n0 == res.tokens.shape[1]
    assert (res.tokens[1] != MASK).all() and res.steps > first + 1


def test_implied_end_of_text_is_not_a_decision() -> None:
    from editserver.model.infer.unmasking import informative

    tok = torch.tensor([[EOT, EOT, EOT, EOT], [EOT, 7, EOT, EOT]])
    conf = torch.tensor([[0.25, 0.5, 0.75, 1.0], [0.25, 0.5, 0.75, 1.0]])
    active = torch.tensor([[True, True, True, True], [True, True, False, True]])
    got = informative(tok, conf, active, EOT)
    # only the first end-of-text of each undecided run keeps its confidence
    assert got.tolist() == [[0.25, 0.0, 0.0, 0.0], [0.25, 0.5, 0.75, 1.0]]
    # the baseline then commits the run's start (filling the tail), not the canvas's last position
    assert TopKRule(1).select(got, active)[0].tolist() == [True, False, False, False]


def test_draft_is_exact_through_the_cache() -> None:
    torch.manual_seed(0)
    m = Transformer(
        ModelConfig.from_dict({**PRESETS["tiny"].to_dict(), "vocab_size": V, "canvas_draft": True})
    )
    with torch.no_grad():
        m.draft_gain.fill_(2.0)
    regions = [torch.randint(2, V, (18,), generator=torch.Generator().manual_seed(3)).tolist(), None]
    seen = []

    def hook(canvas, fixed):
        seen.append(fixed.sum().item())
        return step_drafts(regions, EOT)(canvas, fixed)

    a = _run(m.eval(), cache=ContextCache(), draft=hook)
    b = _run(m, cache=NoCache(), draft=step_drafts(regions, EOT))
    c = _run(m, cache=ContextCache())
    assert torch.equal(a.tokens, b.tokens) and a.steps == b.steps
    assert len(seen) == a.steps and seen == sorted(seen), "asked before every step, as tokens commit"
    assert a.tokens[0, :18].tolist() == regions[0], "the copy gate's +4 on a random model: the region"
    assert not torch.equal(a.tokens[0], c.tokens[0]) and torch.equal(a.tokens[1], c.tokens[1])


@pytest.mark.parametrize("cache", [ContextCache(), NoCache()])
def test_rows_of_unequal_canvases_decode_as_alone(model: Transformer, cache) -> None:
    """A batch pads a shorter canvas to the longest; the padded row decodes exactly as it does alone
    (its padding is committed end-of-text that no position attends to)."""
    ctx = torch.randint(2, V, (2, 20), generator=torch.Generator().manual_seed(0))
    kw = dict(mask_id=MASK, eot_id=EOT, block_size=8, rule=ThresholdRule(0.5), cache=cache)
    both = denoise(model, ctx, torch.tensor([20, 20]), 24, canvas_lens=torch.tensor([11, 24]), **kw)
    short = denoise(model, ctx[:1], torch.tensor([20]), 11, **kw)
    long = denoise(model, ctx[1:], torch.tensor([20]), 24, **kw)
    assert torch.equal(both.tokens[0, :11], short.tokens[0]) and (both.tokens[0, 11:] == EOT).all()
    assert torch.equal(both.tokens[1], long.tokens[0])
    assert torch.allclose(both.confidences[0, :11], short.confidences[0], atol=1e-5)
    assert both.lengths.tolist() == [int(short.lengths[0]), int(long.lengths[0])]
    assert both.finished.tolist() == [bool(short.finished[0]), bool(long.finished[0])]
    padded = denoise(model, ctx, torch.tensor([20, 20]), 24, **kw)  # the old way: one canvas for all
    assert not torch.equal(padded.tokens[0, :11], short.tokens[0]), "padding would change the answer"
    with pytest.raises(ValueError, match="canvas_lens"):
        denoise(model, ctx, torch.tensor([20, 20]), 24, canvas_lens=torch.tensor([0, 24]), **kw)


class _Counting:
    """A cache policy that records how many rows each step computes."""

    def __init__(self, inner) -> None:
        self.inner, self.batches = inner, []

    def prepare(self, *args):
        return self.inner.prepare(*args)

    def logits(self, model, state, canvas, only, draft, want):
        self.batches.append(canvas.shape[0])
        return self.inner.logits(model, state, canvas, only, draft, want)

    def rows(self, state, idx):
        return self.inner.rows(state, idx)


@pytest.mark.parametrize("inner", [ContextCache(), NoCache()])
def test_rows_with_nothing_left_to_decide_are_not_computed(model: Transformer, inner) -> None:
    """Once a row has ended, steps run on the other rows alone, and they decode exactly as alone
    (with the context cache, also once the longest context's row has ended and its padding is cut)."""
    lens = [20, 12, 16] if isinstance(inner, ContextCache) else [20, 20, 20]
    ctx = torch.randint(2, V, (3, 20), generator=torch.Generator().manual_seed(3))
    kw = dict(mask_id=MASK, eot_id=EOT, block_size=8, rule=TopKRule(1))
    count = _Counting(inner)
    first_row = torch.tensor([True, False, False])
    res = denoise(
        model, ctx, torch.tensor(lens), 24, cache=count, done=lambda c, f, p: first_row & f.any(dim=1), **kw
    )
    assert count.batches[0] == 3 and count.batches[1] == 2, "row 0 ended after the first step"
    assert len(count.batches) == res.steps and max(count.batches[1:]) == 2
    for b in (1, 2):
        alone = denoise(
            model, ctx[b : b + 1, : lens[b]], torch.tensor(lens[b : b + 1]), 24, cache=inner, **kw
        )
        assert torch.equal(res.tokens[b], alone.tokens[0])
        assert torch.allclose(res.confidences[b], alone.confidences[0], atol=1e-5)


class _Recorder:
    """One token per step, recording the certainty the sampler hands the rule."""

    def __init__(self, uses_margin: bool):
        self.uses_margin, self.seen, self.repeated, self.tok = uses_margin, [], [], []

    def select(
        self,
        conf: torch.Tensor,
        active: torch.Tensor,
        repeated: torch.Tensor,
        step: int = 0,
        tok: torch.Tensor | None = None,
    ) -> torch.Tensor:
        self.seen.append(conf.clone())
        self.repeated.append(repeated.clone())
        self.tok.append(tok.clone())
        return TopKRule(1).select(conf, active)


def test_a_margin_rule_reads_the_gap_to_the_runner_up(model: Transformer) -> None:
    ctx = torch.randint(2, V, (2, 20), generator=torch.Generator().manual_seed(0))
    ids = torch.cat([ctx, torch.full((2, 24), MASK)], dim=1)
    logits = model(ids, context_lens=torch.tensor([20, 20]))[:, 20:28].float()  # [2, 8, V] block 0
    logits[..., MASK] = float("-inf")  # never proposed
    two = logits.softmax(-1).topk(2, dim=-1).values  # [2, 8, 2]
    rules = {m: _Recorder(m) for m in (False, True)}
    runs = {m: _run(model, rule=r) for m, r in rules.items()}
    p1, gap = rules[False].seen[0], rules[True].seen[0]  # [2, 8] at the first step
    # implied end-of-text positions enter as 0 (informative); every other one is p1 or p1 - p2
    real = p1 > 0
    assert torch.allclose(p1[real], two[..., 0][real], atol=1e-5)
    assert torch.allclose(gap[real], (two[..., 0] - two[..., 1])[real], atol=1e-5)
    assert bool((gap[real] < p1[real]).all())
    # scores stay p1: every committed token's confidence is its probability under either rule
    for res in runs.values():
        assert bool(((res.confidences > 0) & (res.confidences <= 1)).all())


def test_a_stable_joint_rule_adds_tokens_predicted_the_same_twice() -> None:
    conf = torch.tensor([[0.9, 0.6, 0.4, 0.2], [0.5, 0.45, 0.3, 0.8]])
    active = torch.tensor([[True, True, True, True], [True, True, True, False]])
    repeated = torch.tensor([[False, True, True, True], [False, True, False, True]])
    plain = JointRule(0.0).select(conf, active)  # the most confident token alone
    assert plain.tolist() == [[True, False, False, False], [True, False, False, False]]
    assert torch.equal(JointRule(0.0).select(conf, active, repeated), plain)  # stable = inf: never
    got = JointRule(0.0, stable=0.3).select(conf, active, repeated)
    # repeated and at least 0.3 certain joins; 0.2 is too unsure; an inactive position never commits
    assert got.tolist() == [[True, True, True, False], [True, True, False, False]]
    # stable 0 (the shipped instant): any repeat joins, even a certainty read as 0 (implied end-of-text)
    conf[0, 3] = 0.0
    got = JointRule(0.0, stable=0.0).select(conf, active, repeated)
    assert got.tolist() == [[True, True, True, True], [True, True, False, False]]


def test_one_copy_commits_the_surer_of_two_adjacent_same_token_predictions() -> None:
    conf = torch.tensor([[0.95, 0.9, 0.97, 0.2], [0.99, 0.98, 0.97, 0.96]])
    active = torch.ones(2, 4, dtype=torch.bool)
    tok = torch.tensor([[5, 7, 7, 9], [4, 4, 4, 8]])  # [B, n] row 0: a pair at 1-2; row 1: a run of 3
    loose = JointRule(float("inf"))  # the bound alone takes every active position
    assert loose.select(conf, active, tok=tok).all()
    got = JointRule(float("inf"), one_copy=True).select(conf, active, tok=tok)
    # row 0: 0.9 waits beside the same token at 0.97; row 1: each pair of the run loses its weaker
    # member, so only the surest of the three commits now
    assert got.tolist() == [[True, False, True, True], [True, False, False, True]]
    assert torch.equal(
        JointRule(float("inf"), one_copy=True).select(conf, active), loose.select(conf, active)
    )
    # never empty: every pair keeps a member (a tie keeps the left one)
    tie = torch.full((1, 3), 0.5)
    same = torch.tensor([[3, 3, 3]])
    assert weaker_twin(torch.ones(1, 3, dtype=torch.bool), same, tie).tolist() == [[False, True, True]]
    one = JointRule(0.0, one_copy=True).select(tie, torch.ones(1, 3, dtype=torch.bool), tok=same)
    assert int(one.sum()) == 1
    # pairs are of chosen positions only: a same token beside an uncommitted one is no pair
    only = torch.tensor([[True, False, True, False]])
    assert not weaker_twin(only, tok[:1], conf[:1]).any()


def test_repeated_marks_positions_predicted_the_same_at_the_previous_step(model: Transformer) -> None:
    """The loop's record of each position's last prediction, checked against full forward passes
    over the canvas before every step (block 0 of 8 positions: one token per step, 8 steps)."""
    rule = _Recorder(False)
    res = _run(model, rule=rule, record=True, canvas_len=8)
    ctx = torch.randint(2, V, (2, 20), generator=torch.Generator().manual_seed(0))  # _run's context
    before = [torch.full((2, 8), MASK), *res.canvases[:-1]]
    prev = torch.full((2, 8), -1)
    for step, (canvas, after) in enumerate(zip(before, res.canvases)):
        logits = model(torch.cat([ctx, canvas], 1), context_lens=torch.tensor([20, 20]))[:, 20:].float()
        logits[..., MASK] = float("-inf")
        pred, masked = logits.argmax(-1), canvas == MASK  # [2, 8]
        assert torch.equal(rule.repeated[step], (pred == prev) & masked), f"step {step}"
        assert torch.equal(rule.tok[step][masked], pred[masked])  # the rule sees each prediction
        prev = torch.where(masked & (after == MASK), pred, -1)
    assert not rule.repeated[0].any() and any(r.any() for r in rule.repeated[1:])


def test_a_step_budget_commits_what_is_left_at_its_last_step(model: Transformer) -> None:
    """A block takes at most the budget's steps; the last commits every masked position at its own
    prediction, so a budget of 1 is the whole block at once (threshold 0)."""
    at_once = _run(model, rule=ThresholdRule(0.0))
    one = _run(model, rule=StepBudget(TopKRule(1), 1))
    assert torch.equal(one.tokens, at_once.tokens) and one.steps == at_once.steps
    # 3 steps a block: the first block is written after 3 steps, one token per step for 2 steps
    # and then the rest
    free = _run(model, rule=TopKRule(1), record=True)
    res = _run(model, rule=StepBudget(TopKRule(1), 3), record=True)
    assert not bool((res.canvases[2][0, :8] == MASK).any())
    assert int((res.canvases[1][0, :8] == MASK).sum()) == 6
    assert torch.equal(res.canvases[1][0], free.canvases[1][0])  # the inner rule's while it lasts
    # the remaining positions get the predictions of the budget's last step, one pass over the block
    ctx = torch.randint(2, V, (2, 20), generator=torch.Generator().manual_seed(0))
    ids = torch.cat([ctx, res.canvases[1]], dim=1)
    logits = model(ids, context_lens=torch.tensor([20, 20]))[0, 20:28].float()  # [8, V]
    logits[:, MASK] = float("-inf")
    open_ = res.canvases[1][0, :8] == MASK  # [8]
    want = logits.argmax(-1)[open_]
    got = res.canvases[2][0, :8][open_]
    eot_at = (res.canvases[2][0, :8] == EOT).nonzero()
    if len(eot_at):  # after an end-of-text the tail is end-of-text whatever was predicted there
        cut = int(open_[: int(eot_at[0])].sum()) + 1
        want, got = want[:cut], got[:cut]
    assert torch.equal(got, want)
