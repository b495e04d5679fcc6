"""Fast-dLLM v2 as a plan of the one decode loop: Qwen2 keys under the block-causal mask, shifted
logits on the exact block cache, the sub-block threshold rule, and the publisher's loop.

The fixture (tests/hf_fast_dllm.py) mirrors Fast_dLLM_v2_7B's files with tiny random weights. The
publisher's loop below is written out plainly from NVlabs/Fast-dLLM ``v2`` (the HF ``generate`` with
``use_block_cache=False``; ``batch_sample`` is the same loop batched) at temperature 0 (argmax, its
default) and without a cache: its stored keys/values are those of the same tokens under the same
mask, so recomputing the window ``x[:, :end of block]`` gives the same logits.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from editserver.model.infer.block_cache import BlockCache
from editserver.model.infer.cache import InPlaceNoCache, Rows
from editserver.model.infer.engine import EditRequest, Engine, FimRequest, SamplingOptions
from editserver.model.infer.hf.families import detect
from editserver.model.infer.plan import DecodePlan
from editserver.model.infer.unmasking import SubBlockThreshold
from tests.editserver.test_server import ZED_PROMPT
from tests.hf_fast_dllm import make_fast_dllm
from tests.model.test_block_diffusion import _decode, _rows, block_mask

BD, SUB = 32, 8


@pytest.fixture(scope="module")
def fast(tmp_path_factory):
    d, ref = make_fast_dllm(tmp_path_factory.mktemp("fast"))
    return d, ref, Engine.load(d)


def test_detected_from_the_published_config(fast):
    d, _, e = fast
    raw = json.loads((d / "config.json").read_text())
    cfg = detect(raw, None)
    assert (cfg.family, cfg.block_size, cfg.mask_id) == ("fast-dllm-v2", 32, 151665)  # no tokenizer
    assert cfg.shift and cfg.qkv_bias and not cfg.qk_norm and not cfg.tie_embeddings
    assert e.family == "fast-dllm-v2" and e.layout.block == 32 and isinstance(e.cache, BlockCache)
    assert e.tok.mask_id == e.model.cfg.mask_id  # its tokenizer's |<MASK>|
    # a converted directory that says qwen2 is still recognised by bd_size or its auto_map
    assert (
        detect({**raw, "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}, 5).family
        == "fast-dllm-v2"
    )
    plain = {k: v for k, v in raw.items() if k not in ("bd_size", "architectures", "model_type")}
    assert detect({**plain, "model_type": "qwen2"}, 5).family == "fast-dllm-v2"  # by auto_map
    assert detect({**plain, "auto_map": {}, "model_type": "qwen2"}, 5).family == "open-dcoder"  # neither


def test_forward_matches_transformers_qwen2_under_the_block_mask(fast):
    _, ref, e = fast
    ids = torch.randint(0, 300, (1, 75))
    with torch.no_grad():
        want = ref(ids, attention_mask=block_mask(75, BD)).logits
    got = e.model(ids)
    assert (got - want).abs().max().item() <= 1e-4


def published_loop(ref, prompt: list[int], mask_id: int, gen: int, thr: float):
    """Fast-dLLM v2's generate at temperature 0, written out plainly; returns each change's canvas."""
    x = torch.tensor([prompt])
    P, trace = len(prompt), []

    def logits_of(x: torch.Tensor) -> torch.Tensor:  # [1, L, V] under the block mask
        with torch.no_grad():
            out = ref(x, attention_mask=block_mask(x.shape[1], BD)).logits
        out[..., mask_id] = float("-inf")  # never proposed, as in our loop
        return out

    def record():
        trace.append(torch.cat([x[0, P:], torch.full((P + gen,), mask_id)])[:gen].clone())

    if P > BD and P % BD == 0:  # prefill of whole blocks; a block-aligned prompt gets its AR token
        x = torch.cat([x, logits_of(x)[:, -1:].argmax(-1)], dim=1)
        record()
    while x.shape[1] < P + gen:
        x = torch.cat([x, torch.full((1, BD - x.shape[1] % BD), mask_id)], dim=1)
        for s in range(BD // SUB):
            lo, hi = x.shape[1] - BD + s * SUB, x.shape[1] - BD + (s + 1) * SUB
            while bool((x[:, lo:hi] == mask_id).any()):
                blk = logits_of(x)[:, -BD:]
                blk = torch.cat([blk[:, :1], blk[:, :-1]], dim=1)[
                    :, lo - x.shape[1] + BD : hi - x.shape[1] + BD
                ]
                p1, x1 = blk.softmax(-1).max(-1)  # [1, SUB]: sample_with_top_p at temperature 0
                masked = x[:, lo:hi] == mask_id
                p1 = torch.where(masked, p1, -torch.inf)
                pick = p1 > thr
                pick[0, p1[0].argmax()] = True
                pick &= masked
                x[:, lo:hi][pick] = x1[pick]
                record()
        if x.shape[1] < P + gen:  # the block is full: its commit forward gives the next block's first token
            x = torch.cat([x, logits_of(x)[:, -1:].argmax(-1)], dim=1)
            record()
    return x[0, P : P + gen], trace


@pytest.mark.parametrize("text", ["Say hi.", "Write a function that adds two numbers in Python."])
def test_published_decode_chooses_the_publishers_tokens_step_by_step(fast, text):
    _, ref, e = fast
    req = FimRequest(prefix="", suffix="", max_tokens=16, options=SamplingOptions(published=True))
    plan = e.plan(req)
    assert plan.rule == SubBlockThreshold(0.9, 8) and isinstance(plan.cache, InPlaceNoCache)
    ctx = e.tok.encode_chat(text)
    lead = len(ctx) % BD
    n = 2 * BD - lead  # two blocks: the second starts with the first's AR token
    rows, _ = _rows(e, [text], n)
    want, trace = published_loop(ref, ctx, e.tok.mask_id, n, 0.9)
    seen = []
    res = _decode(e, rows, lead, n, plan, lambda c: seen.append(c[0].clone()))
    ends = torch.isin(want, torch.tensor(sorted(e.tok.end_ids)))
    stop = int(ends.nonzero()[0]) if bool(ends.any()) else n
    assert len(seen) == len(trace) or stop < n
    upto = -(-(stop + lead) // BD) * BD - lead  # through the block holding the first end
    for ours, theirs in zip(seen, trace):  # one entry per step, the same positions committed
        ours = torch.where(ours == e.tok.mask_id, -1, ours)[:upto]
        theirs = torch.where(theirs == e.tok.mask_id, -1, theirs)[:upto]
        assert torch.equal(ours, theirs)
    assert torch.equal(res.tokens[0, :stop], want[:stop])


def test_a_context_on_the_block_grid_starts_with_the_prefills_ar_token(fast):
    """A context of whole blocks (lead 0): the publisher's prefill appends argmax of its last
    position; ours commits the canvas's first column alone at the first step, from the same logits."""
    _, ref, e = fast
    ctx = (e.tok.encode_chat("Write a short loop in C.") * 4)[: 2 * BD]  # 64 tokens: two whole blocks
    rows = Rows(torch.tensor([ctx]), torch.tensor([len(ctx)]), torch.tensor([BD]))
    plan = e.plan(FimRequest(prefix="", suffix="", options=SamplingOptions(published=True)))
    want, trace = published_loop(ref, ctx, e.tok.mask_id, BD, 0.9)
    for cache in (plan.cache, BlockCache()):
        seen = []
        res = _decode(
            e,
            rows,
            0,
            BD,
            dataclasses.replace(plan, cache=cache),
            lambda c, out=seen: out.append(c[0].clone()),
        )
        assert len(seen) == len(trace) and all(torch.equal(a, b) for a, b in zip(seen, trace))
        assert torch.equal(res.tokens[0], want)


def test_block_cache_equals_recomputing_everything(fast):
    """Contexts ending at different places in a block (different leads) decode on the block cache
    exactly as on the exact reference, token for token, shifted logits included; a threshold low
    enough that steps commit several tokens."""
    _, _, e = fast
    texts = ["a", "def f(x):", "Write a short loop in C."]
    for thr in (0.9, 0.004):
        outs = []
        for cache in (BlockCache(), InPlaceNoCache()):
            plan = DecodePlan("fim", "t", SubBlockThreshold(thr, SUB), BD, cache, fixed_canvas=True)
            outs.append([_decode(e, *_one(e, t), plan).tokens for t in texts])
        for a, b in zip(*outs):
            assert torch.equal(a, b)


def _one(e, text: str, canvas: int = 70):
    rows, ctx = _rows(e, [text], canvas)
    return rows, len(ctx[0]) % BD, canvas


def test_engine_answers_fim_and_edit_through_the_chat_template(fast):
    _, _, e = fast
    fim = e.complete(FimRequest(prefix="def add(a, b):\n    return ", suffix="\n", max_tokens=12))
    assert fim.steps >= 1 and fim.canvas_tokens == 12
    assert e.layout.route == "chat"
    edit = e.complete(EditRequest(prompt=ZED_PROMPT, max_tokens=8))
    assert edit.steps >= 1
    with pytest.raises(ValueError, match="32-token blocks"):
        e.plan(FimRequest(prefix="", suffix="", options=SamplingOptions(block_size=8)))


def test_served_over_http(tmp_path):
    """The Fast-dLLM v2 directory served: its 32-token block and the chat route reported."""
    from tests.model.test_block_diffusion import assert_served

    d, _ = make_fast_dllm(tmp_path / "model")
    assert_served(d, tmp_path, "fast-dllm-v2", 32)
