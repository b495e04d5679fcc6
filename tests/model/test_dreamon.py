"""DreamOn: detected from its published files, and decoded as its publisher's sampler decodes it.

``publisher_loop`` below is DreamOn's HF sampler (``DreamOnGenerationMixin._sample``, read in a
third-party copy; docs/open-weights.md, DreamOn) written out plainly, for temperature 0, ``alg=
"entropy"``, ``number_transfer_tokens=1`` and the default ``pad_delete_to_right=False``. Every step:
run the model over ``BOS prefix gap suffix EOS``, shift the logits one to the right, bar ``<|expand|>``
when the sequence is at ``max_length`` (prompt + max_new_tokens - masks) or the expand budget
(2 * (max_length - prefix length)) is spent, and commit, at the masked slot whose distribution has
the lowest entropy, its most likely token; an end-of-text there deletes the slot, an ``<|expand|>``
becomes two masks. It stops when no mask is left. As in tests/model/test_hf_published_decode.py both
sides leave out the ids the server never proposes (the mask and layout tags).

The fixture is tests/hf_dreamon.py: random weights with the lm_head rows of ``<|expand|>`` and
end-of-text scaled, so the loop really expands and deletes (each test says how much it saw).
"""

from __future__ import annotations

import json

import pytest
import torch

import editserver.model.infer.sampler as sampler
from editserver.model.infer.canvas_edit import ExpandDelete
from editserver.model.infer.engine import EditRequest, Engine, FimRequest, SamplingOptions
from editserver.model.infer.hf.families import detect, dreamon
from editserver.model.infer.loop_types import Canvas
from editserver.protocol.prompt import EditPrompt, build_prompt
from tests.hf_dreamon import EXPAND, make_dreamon

PRE, SUF = "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"


def publisher_loop(
    engine: Engine, ids: list[int], max_new: int, follow: list[tuple[int, int]] | None = None
) -> tuple[list[int], list[tuple[int, int]]]:
    """(the gap's tokens at the end, (gap position, token) committed at each step); module docstring.
    With ``follow`` (another loop's steps) each step takes that step's slot, after checking that it
    is this loop's choice up to float noise (two forwards of different shapes round differently, and
    a canvas of near-identical expand predictions has near-ties)."""
    mask, expand, eos = engine.tok.mask_id, engine.tok.expand_id, engine.tok.eos_id
    never = [mask, *(i for i in engine.suppressed_ids() if i not in (expand, eos))]
    x = list(ids)
    prefix_len, start = x.index(mask), x.count(mask)
    max_length = max_new + len(x) - start
    budget = 2 * (max_length - prefix_len)
    trace = []
    for _ in range(2 * (max_length - prefix_len) + 2 * budget):
        masked = [j for j, t in enumerate(x) if t == mask]
        if not masked:
            break
        with torch.no_grad():
            logits = engine.model(torch.tensor([x])).float()[0]  # [L, V]
        logits = torch.cat([logits[:1], logits[:-1]])  # position i is predicted from i - 1
        cand = logits[masked]  # [M, V]
        cand[:, never] = float("-inf")
        if len(x) == max_length or budget == 0:
            cand[:, expand] -= 1e9
        p = torch.softmax(cand, dim=-1)
        certainty = (p * torch.log(p + 1e-10)).sum(-1)  # -H(p)
        j = int(certainty.argmax())
        if follow is not None:
            k = masked.index(prefix_len + follow[len(trace)][0])
            assert float(certainty[k]) >= float(certainty[j]) - 1e-5, (
                f"step {len(trace)}: not the loop's slot"
            )
            j = k
        pos, tok = masked[j], int(p[j].argmax())
        trace.append((pos - prefix_len, tok))
        x[pos] = tok
        if tok == eos:  # the slot is deleted
            del x[pos]
        elif tok == expand:  # the slot becomes two masks
            x[pos : pos + 1] = [mask, mask]
            budget -= 1
    gap = len(x) - (len(ids) - start)
    return x[prefix_len : prefix_len + gap], trace


def ours(engine: Engine, req: FimRequest) -> tuple[list[int], list[tuple[int, int]], object]:
    """The engine's answer tokens, its (canvas position, token) per step, and the completion."""
    trace, canvas = [], []
    real = sampler._apply

    def spy(c, blk, commit, tok, conf, hooks, eot, edit=None, rewrite=None):
        for pos in commit[0].nonzero()[:, 0].tolist():
            trace.append((blk.start + pos, int(tok[0, pos])))
        real(c, blk, commit, tok, conf, hooks, eot, edit, rewrite)
        canvas[:] = c.tokens[0].tolist()

    sampler._apply = spy
    try:
        out = engine.complete(req)
    finally:
        sampler._apply = real
    return canvas[: out.completion_tokens], trace, out


@pytest.fixture(scope="module")
def directory(tmp_path_factory):
    return make_dreamon(tmp_path_factory.mktemp("dreamon"))


@pytest.fixture(scope="module")
def engine(directory):
    return Engine.load(directory)


def test_detected_from_its_files_never_from_model_type(engine, directory):
    tok = engine.tok
    assert engine.family == "dreamon" and tok.expand_id == tok.mask_id + 1
    assert engine.layout.canvas_edit == ExpandDelete(tok.expand_id, tok.eos_id)
    raw = json.loads((directory / "config.json").read_text())
    assert raw["model_type"] == "Dream" and raw["expand_token_id"] == tok.expand_id
    dream = detect(raw, tok.mask_id)
    assert dream.family == "dream", "model_type says Dream, as every Dream checkpoint's does"
    without = {k: v for k, v in raw.items() if k != "expand_token_id"}
    assert dreamon(detect(without, tok.mask_id), without, tok.expand_id)[0].family == "dreamon"
    assert dreamon(detect(without, tok.mask_id), without, None) == (dream, None)


def _canvas(tokens: list[int], fixed: list[bool]) -> Canvas:
    t = torch.tensor([tokens])
    f = torch.tensor([fixed])
    return Canvas(t, f, f.float(), torch.full_like(t, -1), torch.ones_like(f))


def test_expand_makes_two_masks_and_end_of_text_deletes():
    M, X, E = 9, 7, 0  # mask, expand, end-of-text; the canvas bound is 6
    edit = ExpandDelete(X, E)
    c = _canvas([5, X, E, M, E, E], [True, True, True, False, True, True])
    done = torch.tensor([[False, True, True, False, False, False]])  # this step's commits
    w, budget = edit.apply(c, done, torch.tensor([4]), torch.tensor([6]), torch.tensor([3]), M, E)
    assert c.tokens[0].tolist() == [5, M, M, M, E, E] and int(w[0]) == 4 and int(budget[0]) == 2
    assert c.fixed[0].tolist() == [True, False, False, False, True, True]
    full = _canvas([X, X, M, 5], [True, True, False, True])  # no room left for a second expand
    w, budget = edit.apply(full, torch.tensor([[True, True, False, False]]), torch.tensor([3]),
                           torch.tensor([4]), torch.tensor([9]), M, E)  # fmt: skip
    assert full.tokens[0].tolist() == [M, M, M, M] and int(w[0]) == 4 and int(budget[0]) == 8
    right = ExpandDelete(X, E, delete_right=True)  # the eval sampler's pad_eos_to_right
    c = _canvas([5, E, M, 6, M, E], [True, True, False, True, False, True])
    w, _ = right.apply(c, torch.tensor([[False, True] + [False] * 4]), torch.tensor([5]),
                       torch.tensor([6]), torch.tensor([9]), M, E)  # fmt: skip
    assert c.tokens[0].tolist()[: int(w[0])] == [5, 6]


def test_bias_bars_expand_at_the_bound_or_without_budget():
    edit = ExpandDelete(3, 0)
    bias = edit.bias(
        torch.zeros(5), torch.tensor([2, 4, 2]), torch.tensor([4, 4, 4]), torch.tensor([1, 1, 0])
    )
    assert torch.isinf(bias[:, 3]).tolist() == [False, True, True] and not bias[:, :3].isinf().any()


@pytest.mark.parametrize(
    "scales, max_new",
    # grows to its bound; shrinks below its 4-mask start; spends the whole expand budget
    [((3.0, 1.5), 12), ((3.0, 1.4), 12), ((5.0, 1.5), 12)],
)
def test_published_plan_is_the_publishers_loop_step_by_step(tmp_path, scales, max_new):
    engine = Engine.load(make_dreamon(tmp_path, *scales))
    req = FimRequest(PRE, SUF, max_tokens=max_new, options=SamplingOptions(published=True))
    plan = engine.plan(req)
    assert plan.cache is engine.layout.exact_cache and plan.rule.entropy and plan.rule.k == 1
    ctx, suf, _ = engine.fim_layout(req, max_new)
    assert ctx[0] == engine.tok.bos_id and suf[-1] == engine.tok.eos_id  # BOS prefix masks suffix EOS
    got, got_trace, out = ours(engine, req)
    want, want_trace = publisher_loop(engine, ctx + [engine.tok.mask_id] * 4 + suf, max_new, got_trace)
    assert got_trace == want_trace and out.steps == len(want_trace)
    assert got == want and out.completion_tokens == len(want)
    kinds = [t for _, t in want_trace]
    expands, deletes = kinds.count(engine.tok.expand_id), kinds.count(engine.tok.eos_id)
    assert deletes > 0, "the fixture exercises deletes"
    if scales[0] == 5.0:
        assert expands == 2 * (max_new + len(suf)), "the whole expand budget is spent"
    elif scales[1] == 1.5:
        assert expands > 0 and len(want) == max_new, "the gap grew to its bound"
    else:
        assert len(want) < 4, "the gap shrank below its start"


def test_the_model_chooses_the_length(engine):
    """Our default decode, from a 4-mask start: shorter for one text and as long as max_tokens allows
    for another (the published loop's lengths: the step-by-step test)."""
    opts = SamplingOptions()
    short = engine.complete(FimRequest("x = ", "\n", max_tokens=16, options=opts))
    assert short.completion_tokens < 4 and short.finish_reason == "stop"
    long = engine.complete(FimRequest("def add(a, b):\n    return ", "\n", max_tokens=16, options=opts))
    assert 4 < long.completion_tokens <= 16 and long.canvas_tokens == 16
    assert EXPAND not in long.text


def test_next_edit_never_proposes_expand(engine):
    p = EditPrompt("m.py", "x = 1\n", "y = x\n", 0, "", [], "")
    plan = engine.plan(EditRequest(build_prompt(p), max_tokens=8))
    assert plan.edit is None and engine.tok.expand_id in engine.suppressed_ids()
    out = engine.complete(EditRequest(build_prompt(p), max_tokens=8))
    assert out.region == "y = x\n" and EXPAND not in out.text
