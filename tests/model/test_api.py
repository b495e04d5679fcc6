"""The entry point: FIM and next-edit requests through Engine.complete on a real (tiny) checkpoint."""

from __future__ import annotations

import copy
import dataclasses
import math
import threading

import pytest
import torch

from editserver.model.infer.engine import EditRequest, Engine, FimRequest, SamplingOptions, line_likelihood
from editserver.model.infer.loader import load_checkpoint
from editserver.model.infer.middle_ce import middle_ce
from editserver.model.infer.transformer import ContextTooLongError, Transformer
from editserver.protocol.prompt import EditPrompt, PromptError, build_prompt
from tests.helpers import denoise


@pytest.fixture(scope="module")
def engine(tiny_checkpoint) -> Engine:
    return Engine.load(tiny_checkpoint)


def test_fim_returns_text_and_stats(engine: Engine) -> None:
    c = engine.complete(FimRequest("def add(a, b):\n    return ", "\n", max_tokens=12))
    assert isinstance(c.text, str) and "<|mask|>" not in c.text
    assert 0 < c.completion_tokens <= 12 or c.finish_reason == "stop"
    assert c.steps >= 1 and c.model_calls == c.steps + 1 and len(c.token_confidences) == c.completion_tokens
    assert c.finish_reason in ("stop", "length") and 0.0 <= c.score <= 1.0


def test_sequential_takes_one_step_per_token(engine: Engine) -> None:
    c = engine.complete(FimRequest("x = ", "", max_tokens=8, options=SamplingOptions(sequential=True)))
    assert c.steps >= c.completion_tokens


def test_effort_changes_steps(engine: Engine) -> None:
    fast = engine.complete(FimRequest("x = ", "", max_tokens=16, options=SamplingOptions(threshold=0.0)))
    slow = engine.complete(FimRequest("x = ", "", max_tokens=16, options=SamplingOptions(sequential=True)))
    assert fast.steps < slow.steps
    with pytest.raises(ValueError, match="effort"):
        engine.complete(FimRequest("x", "", options=SamplingOptions(effort="turbo")))


def test_effort_with_gamma_uses_the_joint_rule(engine: Engine) -> None:
    from editserver.model.infer.config import EffortPreset
    from editserver.model.infer.unmasking import JointRule, ThresholdRule

    efforts = {**engine.inference.efforts, "low": EffortPreset(threshold=0.9, block_size=32, gamma=1e6)}
    eng = copy.copy(engine)  # the module's engine keeps its own presets
    eng.inference = dataclasses.replace(engine.inference, efforts=efforts)
    plan = eng.plan(FimRequest("x", options=SamplingOptions(effort="low")))
    assert (plan.rule, plan.block_size) == (JointRule(1e6, 0.9), 32)
    # a request's own threshold still means the threshold rule
    plan = eng.plan(FimRequest("x", options=SamplingOptions(effort="low", threshold=0.5)))
    assert (plan.rule, plan.block_size) == (ThresholdRule(0.5), 32)
    # a bound this loose commits the whole canvas in one step, as threshold 0 does
    req = FimRequest("x = ", "", max_tokens=16, options=SamplingOptions(effort="low"))
    assert eng.complete(req).steps == 1


def test_fim_block_size_applies_to_fim_requests_only(engine: Engine) -> None:
    """An effort's ``fim_block_size`` is FIM's block; next edits keep ``block_size``; a request's
    own block size overrides both."""
    from editserver.model.infer.config import EffortPreset, InferenceConfig

    low = EffortPreset(threshold=0.9, block_size=32, gamma=0.1, fim_block_size=8)
    eng = copy.copy(engine)
    eng.inference = dataclasses.replace(engine.inference, efforts={**engine.inference.efforts, "low": low})
    assert eng.plan(FimRequest("x", options=SamplingOptions(effort="low"))).block_size == 8
    assert eng.plan(EditRequest("", options=SamplingOptions(effort="low"))).block_size == 32
    assert eng.plan(FimRequest("x", options=SamplingOptions(effort="low", block_size=4))).block_size == 4
    # decoded in blocks of 8, an answer is the one an explicit block size of 8 gives
    opts = dict(effort="low", temperature=0.0)
    got = eng.complete(
        FimRequest("def f(x):\n    return ", "\n", max_tokens=24, options=SamplingOptions(**opts))
    )
    ref = eng.complete(
        FimRequest(
            "def f(x):\n    return ", "\n", max_tokens=24, options=SamplingOptions(block_size=8, **opts)
        )
    )
    assert (got.text, got.steps) == (ref.text, ref.steps)
    bad = dataclasses.replace(low, fim_block_size=0)
    eng.inference = dataclasses.replace(engine.inference, efforts={**engine.inference.efforts, "low": bad})
    with pytest.raises(ValueError, match="block_size"):
        eng.complete(FimRequest("x = ", "", options=SamplingOptions(effort="low")))
    assert InferenceConfig.from_dict(eng.inference.to_dict()).efforts["low"] == bad  # config.json round trip


def test_line_steps_budget_single_line_fim_requests_only(engine: Engine) -> None:
    """An effort's ``line_steps`` caps each block of a single-line FIM request (stops hold a
    newline); a multi-line request, a request's own 0 and the one-token baseline keep no budget."""
    from editserver.model.infer.config import EffortPreset, InferenceConfig

    slow = EffortPreset(threshold=1.01, block_size=32, line_steps=2)  # one token a step, 2 steps
    eng = copy.copy(engine)
    eng.inference = dataclasses.replace(
        engine.inference, efforts={**engine.inference.efforts, "low": slow}, line_canvases=()
    )

    def run(stop: list[str], **kw) -> object:
        o = SamplingOptions(effort="low", stop=stop, **kw)
        return eng.complete(FimRequest("def f(x):\n    return ", "\n", max_tokens=24, options=o))

    line, free = run(["\n"]), run([])
    assert line.steps <= 2 < free.steps
    assert run(["\n"], line_steps=0).steps == free.steps
    assert run(["\n"], line_steps=5).steps <= 5
    assert run(["\n"], sequential=True).steps == run(["\n"], sequential=True, line_steps=0).steps > 2
    # they plan apart, so they never share a batch
    with pytest.raises(ValueError, match="one decode plan"):
        eng.complete_batch(
            [
                FimRequest("def f(x):\n    return ", "\n", 24, SamplingOptions(effort="low", stop=s))
                for s in (["\n"], [])
            ]
        )
    with pytest.raises(ValueError, match="line_steps"):
        run(["\n"], line_steps=-1)
    assert InferenceConfig.from_dict(eng.inference.to_dict()).efforts["low"] == slow
    with pytest.raises(ValueError, match="line_steps must be at least 1"):
        InferenceConfig.from_dict({"efforts": {"low": {**dataclasses.asdict(slow), "line_steps": 0}}})


def test_next_edits_default_to_the_edit_effort(engine: Engine) -> None:
    from editserver.model.infer.config import EffortPreset, InferenceConfig

    eng = copy.copy(engine)
    efforts = {**engine.inference.efforts, "instant": EffortPreset(threshold=0.0, block_size=4096)}
    eng.inference = dataclasses.replace(engine.inference, efforts=efforts, edit_effort="instant")
    assert eng.resolve_effort(None, edit=True) == "instant"
    assert eng.resolve_effort(None) == eng.inference.default_effort  # FIM keeps the default
    assert eng.resolve_effort("high", edit=True) == "high"  # a request's own effort wins
    prompt = build_prompt(EditPrompt("a.py", "import os\n", "def f(x):\n    return x\n", 4, "\nf(1)\n"))
    edit = eng.complete(EditRequest(prompt))
    named = eng.complete(EditRequest(prompt, options=SamplingOptions(effort="instant")))
    slow = eng.complete(EditRequest(prompt, options=SamplingOptions(effort="high")))
    assert (edit.text, edit.steps) == (named.text, named.steps) and edit.steps == 1 < slow.steps
    with pytest.raises(ValueError, match="edit_effort 'fast'"):
        InferenceConfig.from_dict({"edit_effort": "fast"})


def test_a_stability_threshold_needs_the_joint_rule_and_a_probability() -> None:
    from editserver.model.infer.config import InferenceConfig

    low = {"threshold": 0.9, "block_size": 32, "gamma": 0.15, "stable": 0.3}
    cfg = InferenceConfig.from_dict({"efforts": {"low": low}, "default_effort": "low"})
    assert cfg.efforts["low"].stable == 0.3
    assert InferenceConfig.from_dict(cfg.to_dict()) == cfg  # round-trips through config.json
    for bad in ({**low, "gamma": None}, {**low, "stable": 1.5}):
        with pytest.raises(ValueError, match="stable needs a gamma"):
            InferenceConfig.from_dict({"efforts": {"low": bad}, "default_effort": "low"})


def test_one_copy_is_for_fim_and_needs_the_joint_rule(engine: Engine) -> None:
    from editserver.model.infer.config import EffortPreset, InferenceConfig
    from editserver.model.infer.unmasking import JointRule

    low = EffortPreset(threshold=0.9, block_size=32, gamma=0.1, one_copy=True)
    eng = copy.copy(engine)
    eng.inference = dataclasses.replace(engine.inference, efforts={**engine.inference.efforts, "low": low})
    o = SamplingOptions(effort="low")
    assert eng.plan(FimRequest("x", options=o)).rule == JointRule(0.1, 0.9, one_copy=True)
    # a rewrite copies real doubles (blank lines, brackets) from its draft: next edits never use it
    assert eng.plan(EditRequest("", options=o)).rule == JointRule(0.1, 0.9)
    d = {"efforts": {"low": dataclasses.asdict(low)}, "default_effort": "low"}
    assert InferenceConfig.from_dict(InferenceConfig.from_dict(d).to_dict()).efforts["low"] == low
    with pytest.raises(ValueError, match="one_copy needs a gamma"):
        InferenceConfig.from_dict(
            {"efforts": {"low": {**d["efforts"]["low"], "gamma": None}}, "default_effort": "low"}
        )


def test_block_size_override(engine: Engine) -> None:
    # threshold 0 commits a whole block per step: the block size sets the step count
    wide = SamplingOptions(threshold=0.0, block_size=16)
    narrow = SamplingOptions(threshold=0.0, block_size=1)
    a = engine.complete(FimRequest("x = ", "", max_tokens=16, options=wide))
    b = engine.complete(FimRequest("x = ", "", max_tokens=16, options=narrow))
    assert a.steps == 1 and b.steps >= b.completion_tokens
    with pytest.raises(ValueError, match="block_size"):
        engine.complete(FimRequest("x", "", options=SamplingOptions(block_size=0)))


def test_stop_sequences_cut_text(engine: Engine) -> None:
    full = engine.complete(FimRequest("def f():\n", "", max_tokens=24))
    if len(full.text) > 3:
        stop = full.text[2:4]
        cut = engine.complete(
            FimRequest("def f():\n", "", max_tokens=24, options=SamplingOptions(stop=[stop]))
        )
        assert cut.text == full.text[: full.text.find(stop)] and cut.finish_reason == "stop"
        assert cut.stop_sequence == stop and full.stop_sequence is None


def test_middle_ce_agrees_with_the_sampler(engine: Engine) -> None:
    """The scorer's cross-entropy of the one-token answer the sampler commits is -log of the
    confidence the sampler reported for it (two paths over the same fully masked canvas)."""
    req = FimRequest("def add(a, b):\n    return ", "\n", max_tokens=1)
    c = engine.complete(FimRequest(req.prefix, req.suffix, 1, SamplingOptions(sequential=True)))
    assert c.completion_tokens == 1 and len(engine.tok.encode(c.text)) == 1, c.text
    assert middle_ce(engine, req, c.text) == pytest.approx(-math.log(c.token_confidences[0]), abs=1e-3)
    longer = middle_ce(engine, FimRequest(req.prefix, req.suffix, max_tokens=4), "a + b + c + d + e")
    assert math.isfinite(longer) and longer > 0, "an answer longer than the canvas is cut to it"


def test_left_to_right_ce_agrees_with_a_left_to_right_decode(engine: Engine) -> None:
    """Decoded with blocks of one token (strictly left to right), each committed token was the
    argmax of the state the left-to-right scorer builds for it, so the scorer's cross-entropy of
    that answer is the mean -log confidence the sampler reported (its end-of-text included)."""
    req = FimRequest("def add(a, b):\n    return ", "\n", max_tokens=6)
    opts = SamplingOptions(sequential=True, block_size=1)
    c = engine.complete(FimRequest(req.prefix, req.suffix, 6, opts))
    assert len(engine.tok.encode(c.text)) == c.completion_tokens, "the answer re-encodes to its tokens"
    confs = c.scored_confidences
    want = sum(-math.log(p) for p in confs) / len(confs)
    assert middle_ce(engine, req, c.text, left_to_right=True) == pytest.approx(want, abs=1e-3)
    # another answer is scored on its own tokens
    assert middle_ce(engine, req, "a", left_to_right=True) != pytest.approx(want, abs=1e-3)


def test_context_window_is_enforced(engine: Engine) -> None:
    engine.context_length = 50
    try:
        with pytest.raises(ContextTooLongError, match="context window"):
            engine.complete(FimRequest("x = 1\n" * 40, "", max_tokens=8))
    finally:
        engine.context_length = engine.model.cfg.max_seq_len


def test_edit_request_reports_region_and_score(engine: Engine) -> None:
    p = build_prompt(EditPrompt("a.py", "import os\n", "def f(x):\n    return x\n", 4, "\nf(1)\n"))
    c = engine.complete(EditRequest(p))
    assert c.region == "def f(x):\n    return x\n"
    assert c.unchanged == (c.text == c.region)
    assert c.above_threshold == (not c.unchanged and c.score >= engine.inference.selectivity_threshold)
    with pytest.raises(PromptError, match="code_to_edit"):
        engine.complete(EditRequest("<|current_file_content|>\nx\n<|/current_file_content|>"))


def test_draft_bias_reaches_the_copy_logit_of_edits(tiny_checkpoint) -> None:
    """``inference.draft_bias`` is added to the learned copy bonus: with the gate shut (-100) no
    region token is copied, and a bias of +200 opens it again, so the rewrite starts with the region."""
    ck = load_checkpoint(tiny_checkpoint)
    torch.manual_seed(0)
    m = Transformer(dataclasses.replace(ck.model.cfg, canvas_draft=True)).eval()
    with torch.no_grad():
        m.copy_gate.bias.fill_(-100.0)
    region = "def f(x):\n    return x\n"
    p = build_prompt(EditPrompt("a.py", "import os\n", region, 4, "\nf(1)\n"))
    text = {}
    for bias in (0.0, 200.0):
        inference = dataclasses.replace(ck.inference, draft_bias=bias)
        text[bias] = (
            Engine(dataclasses.replace(ck, model=m, inference=inference)).complete(EditRequest(p)).text
        )
    assert text[200.0].startswith(region)
    assert not text[0.0].startswith(region)
    # an engine whose settings are replaced after load (the server's overrides) decodes with the new bias
    eng = Engine(dataclasses.replace(ck, model=m))
    eng.inference = dataclasses.replace(ck.inference, draft_bias=200.0)
    assert eng.complete(EditRequest(p)).text.startswith(region)


def test_diffusing_drafts_and_cancel(engine: Engine) -> None:
    drafts: list[str] = []
    c = engine.complete(
        FimRequest(
            "x = ",
            "",
            max_tokens=16,
            options=SamplingOptions(sequential=True, on_step=drafts.append),
        )
    )
    assert len(drafts) == c.steps and drafts[-1] == c.text
    ev = threading.Event()
    seen: list[str] = []

    def on_step(d: str) -> None:
        seen.append(d)
        if len(seen) == 2:
            ev.set()

    c = engine.complete(
        FimRequest(
            "x = ", "", max_tokens=16, options=SamplingOptions(sequential=True, on_step=on_step, cancel=ev)
        )
    )
    assert c.finish_reason == "cancelled" and c.steps == 2


def test_batch_matches_single(engine: Engine) -> None:
    reqs = [FimRequest("def f():\n    return ", "\n", max_tokens=8), FimRequest("import ", "", max_tokens=8)]
    batch = engine.complete_batch(reqs)
    assert [b.text for b in batch] == [engine.complete(r).text for r in reqs]


def _same(a, b) -> bool:
    return (a.text, a.finish_reason, a.completion_tokens) == (b.text, b.finish_reason, b.completion_tokens)


def test_batch_of_unequal_canvases_matches_single(shipped_checkpoint) -> None:
    """A request's answer does not depend on what it was batched with: a 48-token line beside a
    64-token block, a two-line region beside a twelve-line one (the server batches both). The shipped
    model, because the tiny random one's confidences tie, so float rounding alone reorders its steps."""
    engine = Engine.load(shipped_checkpoint)
    fims = [
        FimRequest("def f():\n    return ", "\n", max_tokens=48),
        FimRequest("import ", "", max_tokens=64),
    ]
    alone = [engine.complete(r) for r in fims]
    assert all(_same(a, b) for a, b in zip(engine.complete_batch(fims), alone))
    body = "".join(f"    y{i} = x + {i}\n" for i in range(12))
    edits = [
        EditRequest(build_prompt(EditPrompt("a.py", "import os\n", "def f(x):\n    return x\n", 4, "\n"))),
        EditRequest(build_prompt(EditPrompt("b.py", "", f"def g(x):\n{body}", 4, "\n"))),
    ]
    alone = [engine.complete(r) for r in edits]
    batch = engine.complete_batch(edits)
    assert all(_same(a, b) and a.score == pytest.approx(b.score, abs=1e-4) for a, b in zip(batch, alone))


def test_single_line_request_also_tries_shorter_canvases(shipped_checkpoint) -> None:
    """With ``line_canvases`` a one-line request gets whichever of its own canvas and the shorter
    ones the model finds likelier, from one batch, exactly as decoding each alone would give. The
    prompts and the 8-token short canvas were picked (for the model shipped on 2026-11-27) so that each way
    wins at least once with a different line."""
    engine = Engine.load(shipped_checkpoint)
    with_short = dataclasses.replace(engine.inference, line_canvases=(8,))
    plain = dataclasses.replace(engine.inference, line_canvases=())
    line = SamplingOptions(stop=["\n"])
    prefixes = ["return ", "from collections import "]
    reqs = [FimRequest(p, "\n", max_tokens=32, options=line) for p in prefixes]
    engine.inference = with_short
    got = engine.complete_batch(reqs)
    engine.inference = plain
    winners = []
    for r, g in zip(reqs, got):
        own, short = engine.complete(r), engine.complete(dataclasses.replace(r, max_tokens=8))
        assert own.text != short.text
        want = short if line_likelihood(short) > line_likelihood(own) else own
        assert _same(g, want)
        winners.append(want is short)
    assert True in winners and False in winners
    # a request that may run past its line keeps its own canvas
    block = FimRequest(prefixes[1], "\n", max_tokens=32)
    alone = engine.complete(block)
    engine.inference = with_short
    assert _same(engine.complete(block), alone)


def test_score_counts_the_decision_to_stop() -> None:
    import torch

    from editserver.model.infer.loop_types import SampleResult

    res = SampleResult(
        tokens=torch.tensor([[0, 0, 0]]),
        confidences=torch.tensor([[0.3, 1.0, 1.0]]),
        lengths=torch.tensor([0]),
        steps=1,
        model_calls=2,
        finished=torch.tensor([True]),
    )
    assert Engine._scored(res, 0, 0, []) == [pytest.approx(0.3)]  # an empty answer is not a sure one
    res.finished[0] = False
    assert Engine._scored(res, 0, 3, [0.5, 0.5, 0.5]) == [0.5, 0.5, 0.5]


def test_tiny_top_p_keeps_the_top_token(engine: Engine) -> None:
    t = engine.complete(
        FimRequest("x = ", "", max_tokens=4, options=SamplingOptions(temperature=1.0, top_p=1e-46))
    )
    assert "<|mask|>" not in t.text


def test_stop_ends_decoding_early_with_the_same_text(engine: Engine) -> None:
    seq = SamplingOptions(sequential=True)
    full = engine.complete(FimRequest("def f():\n", "", max_tokens=48, options=seq))
    assert len(full.text) > 3, "the tiny random model writes text here"
    stop = full.text[1:3]
    early = engine.complete(
        FimRequest("def f():\n", "", max_tokens=48, options=SamplingOptions(sequential=True, stop=[stop]))
    )
    assert early.text == full.text[: full.text.find(stop)] and early.finish_reason == "stop"
    assert early.steps < full.steps and early.stop_sequence == stop
    absent = engine.complete(
        FimRequest("def f():\n", "", max_tokens=48, options=SamplingOptions(sequential=True, stop=["\x00"]))
    )
    # a stop that never occurs: the answer ends as without it, and no stop sequence is reported
    assert absent.text == full.text and absent.finish_reason == full.finish_reason
    assert absent.stop_sequence is None


def test_fim_window_keeps_the_nearest_context(tiny_checkpoint) -> None:
    from editserver.protocol.prompt import fim_window

    assert fim_window(500, 500, 100) == (75, 25)  # long prefix: the suffix keeps a quarter
    assert fim_window(50, 500, 100) == (50, 50)  # short prefix: the suffix takes the rest
    assert fim_window(10, 5, 100) == (10, 5)
    eng = Engine.load(tiny_checkpoint)
    eng.inference.window_tokens = 40
    prefix, suffix = "".join(f"x{i} = {i}\n" for i in range(200)), "y = 1\n" * 50
    ctx, dropped = eng.fim_context(FimRequest(prefix, suffix), canvas=8)
    assert dropped == len(eng.tok.encode(prefix)) + len(eng.tok.encode(suffix)) + 3 - len(ctx)
    t = eng.tok
    assert len(ctx) <= 40 - 8 and ctx[0] == t.fim_prefix_id and ctx[-1] == t.fim_middle_id
    pre = ctx[1 : ctx.index(t.fim_suffix_id)]
    assert t.decode(pre) and prefix.endswith(t.decode(pre)), "the prefix tokens nearest the cursor stay"
    # the 32k window stays a hard error however much the FIM window would keep
    eng.context_length = 100
    with pytest.raises(ContextTooLongError, match="context window"):
        eng.complete(FimRequest(prefix, suffix, max_tokens=8))


def test_edit_prompts_are_cut_to_the_training_window(tiny_checkpoint) -> None:
    from editserver.protocol.prompt import EditPrompt, build_prompt, unified_diff

    eng = Engine.load(tiny_checkpoint)
    above = "".join(f"a{i} = {i}\n" for i in range(300))
    hist = unified_diff("m.py", "x = 1\n", "x = 2\n")
    prompt = build_prompt(EditPrompt("m.py", above, "y = 1\n", 0, "", [], hist))
    full, _, _, none = eng._edit_context(EditRequest(prompt))
    eng.inference.window_tokens = 200
    cut, parsed, canvas, dropped = eng._edit_context(EditRequest(prompt))
    assert len(full) > 200 >= len(cut) + canvas
    assert none == 0 and dropped == len(full) - len(cut)  # the completion reports what the cut left out
    assert eng.complete(EditRequest(prompt)).dropped_tokens == dropped
    assert cut[-1] == eng.tok.rewrite_id and "y = 1" in eng.tok.decode(cut)
    assert parsed.region == "y = 1\n"
    assert eng.complete(EditRequest(prompt)).finish_reason in ("stop", "length")


def test_edit_canvas_at_region_matches_the_uncached_model(tiny_checkpoint) -> None:
    from editserver.model.infer.cache import NoCache
    from editserver.model.infer.unmasking import TopKRule
    from editserver.protocol.prompt import EDIT_OPEN, EditPrompt, build_prompt, edit_canvas_pos

    eng = Engine.load(tiny_checkpoint)
    eng.inference.edit_canvas_at_region = True
    prompt = build_prompt(EditPrompt("m.py", "x = 1\n", "y = x\n", 0, "", [], ""))
    got = eng.complete(EditRequest(prompt, options=SamplingOptions(sequential=True)))
    ctx, _, n, _ = eng._edit_context(EditRequest(prompt))
    pos = edit_canvas_pos(ctx, eng.tok.rewrite_id, eng.tok.special_ids[EDIT_OPEN])
    assert pos < len(ctx) - 3, "the canvas starts back at the region"
    ids = torch.tensor([ctx])
    kw = dict(
        mask_id=eng.tok.mask_id, eot_id=eng.tok.eot_id, rule=TopKRule(1), canvas_pos=torch.tensor([pos])
    )
    kw["suppress_ids"] = [i for i in eng.tok.special_ids.values() if i != eng.tok.eot_id]
    ref = denoise(eng.model, ids, torch.tensor([len(ctx)]), n, cache=NoCache(), **kw)
    m = int(ref.lengths[0])
    assert got.text == eng.tok.decode(ref.tokens[0, :m].tolist())


def test_a_draft_model_gets_the_region_as_its_edit_canvas_draft(tiny_checkpoint) -> None:
    """The engine hands a ``canvas_draft`` model the region's tokens (prompt.edit_draft): with a
    large copy bonus, a tiny random model's rewrite is the draft; FIM requests get no draft."""
    from editserver.model.infer.config import ModelConfig
    from editserver.model.infer.transformer import Transformer
    from editserver.protocol.prompt import EditPrompt, build_prompt

    eng = Engine.load(tiny_checkpoint)
    base = eng.model
    cfg = ModelConfig.from_dict({**base.cfg.to_dict(), "canvas_draft": True})
    drafted = Transformer(cfg).eval()
    zero = {"draft_gain": torch.zeros(cfg.dim), "copy_gate.weight": torch.zeros(1, cfg.dim)}
    drafted.load_state_dict({**base.state_dict(), **zero, "copy_gate.bias": torch.zeros(1)})  # no draft
    region = "total = count + 1\n"
    prompt = build_prompt(EditPrompt("m.py", "count = 0\n", region, 0, "", [], ""))
    fim = FimRequest("def f(x):\n    return ", "\n")
    before = eng.complete(EditRequest(prompt)).text, eng.complete(fim).text
    eng.model = drafted
    assert (eng.complete(EditRequest(prompt)).text, eng.complete(fim).text) == before, "gain 0: unchanged"
    with torch.no_grad():
        drafted.copy_gate.bias.fill_(1000.0)  # copy, whatever the network says
    assert eng.complete(EditRequest(prompt)).text == region
    assert eng.complete(fim).text == before[1], "FIM rows have no draft"


# ---- the FIM threshold -------------------------------------------------------------------------
FIM_REQ = ("class Point:\n    def __init__(self, x, y):\n", "")
EDIT_PROMPT = build_prompt(EditPrompt("a.py", "import os\n", "def f(x):\n    return x\n", 4, "\nf(1)\n"))


def with_inference(tiny_checkpoint, tmp_path, **changes) -> Engine:
    """An engine on a copy of the tiny checkpoint whose config.json carries ``changes``."""
    import shutil

    from editserver.model.infer.checkpoint import update_inference_config

    ck = tmp_path / "ck"
    shutil.copytree(tiny_checkpoint, ck, dirs_exist_ok=True)
    update_inference_config(ck, **changes)
    return Engine.load(ck)


def test_fim_threshold_decides_above_threshold_and_leaves_edits_alone(tiny_checkpoint, tmp_path) -> None:
    base = Engine.load(tiny_checkpoint)
    assert base.inference.fim_threshold == 0.0
    c = base.complete(FimRequest(*FIM_REQ, max_tokens=16))
    assert c.text.strip() and c.score < 1.0 and c.above_threshold
    from editserver.model.infer.scoring import aggregate

    assert aggregate(c.scored_confidences, base.inference.score_aggregate) == c.score
    edit = base.complete(EditRequest(EDIT_PROMPT))
    at = with_inference(tiny_checkpoint, tmp_path, fim_threshold=c.score)
    same = at.complete(FimRequest(*FIM_REQ, max_tokens=16))
    assert (same.text, same.score, same.above_threshold) == (c.text, c.score, True)  # >= clears it
    above = with_inference(tiny_checkpoint, tmp_path, fim_threshold=math.nextafter(c.score, 1.0))
    below = above.complete(FimRequest(*FIM_REQ, max_tokens=16))
    # the text is still the model's (the server decides what to send), only the verdict changes
    assert (below.text, below.score, below.above_threshold) == (c.text, c.score, False)
    e = above.complete(EditRequest(EDIT_PROMPT))
    assert (e.text, e.score, e.above_threshold, e.unchanged) == (
        edit.text,
        edit.score,
        edit.above_threshold,
        edit.unchanged,
    )


def test_a_blank_fim_answer_is_never_above_the_threshold(engine: Engine) -> None:
    full = engine.complete(FimRequest(*FIM_REQ, max_tokens=16))
    assert engine.inference.fim_threshold == 0.0 and full.text.strip()
    cut = engine.complete(FimRequest(*FIM_REQ, max_tokens=16, options=SamplingOptions(stop=[full.text[0]])))
    assert cut.text == "" and cut.above_threshold is False


def test_old_config_without_fim_threshold_loads_with_zero(tiny_checkpoint, tmp_path) -> None:
    import json
    import shutil

    from editserver.model.infer.config import InferenceConfig
    from editserver.model.infer.loader import load_checkpoint

    assert InferenceConfig.from_dict({}).fim_threshold == 0.0
    assert InferenceConfig.from_dict({"fim_threshold": 0.4}).fim_threshold == 0.4
    assert InferenceConfig(fim_threshold=0.3).to_dict()["fim_threshold"] == 0.3
    ck = tmp_path / "old"
    shutil.copytree(tiny_checkpoint, ck)
    cfg = json.loads((ck / "config.json").read_text())
    cfg["inference"].pop("fim_threshold")
    (ck / "config.json").write_text(json.dumps(cfg))
    assert load_checkpoint(ck).inference.fim_threshold == 0.0


def test_line_canvases_load_from_json_and_reject_nonsense(tiny_checkpoint, tmp_path) -> None:
    import json
    import shutil

    from editserver.model.infer.config import InferenceConfig
    from editserver.model.infer.loader import load_checkpoint

    assert InferenceConfig.from_dict({}).line_canvases == ()
    ck = tmp_path / "ck"
    shutil.copytree(tiny_checkpoint, ck)
    cfg = json.loads((ck / "config.json").read_text())
    cfg["inference"]["line_canvases"] = [24, 16]
    (ck / "config.json").write_text(json.dumps(cfg))
    assert load_checkpoint(ck).inference.line_canvases == (24, 16)
    with pytest.raises(ValueError, match="line_canvases"):
        InferenceConfig.from_dict({"line_canvases": [0]})


def test_a_runaway_fim_answer_ends_where_the_trimming_cuts_it(shipped_checkpoint) -> None:
    """Without a stop sequence the shipped model runs past this hole into a repeating line; the row
    ends once the shared trimming has cut it for good, so a large max_tokens costs nothing more."""
    from editserver.protocol.postprocess import settled, trim

    eng = Engine.load(shipped_checkpoint)
    prefix, suffix = "def add(a, b):\n    return ", "\n"
    small = eng.complete(FimRequest(prefix, suffix, max_tokens=64))
    big = eng.complete(FimRequest(prefix, suffix, max_tokens=1024))
    assert big.completion_tokens == small.completion_tokens < 64 and big.text == small.text
    assert settled(big.text, prefix, suffix) and trim(big.text, prefix, suffix).text.strip()
