"""Stable-DiffCoder as a plan of the one decode loop: Llama keys under the block-causal mask, FIM in
Seed-Coder's suffix-prefix-middle order on the exact block cache, its threshold rule, and the
publisher's loop.

The fixture (tests/hf_stable_diffcoder.py) mirrors Stable-DiffCoder-8B's published files with tiny
random weights. The publisher's loop below is written out plainly from ``generate_block`` in
ByteDance-Seed/Stable-DiffCoder-8B-Instruct ``modeling_stable_diffcoder.py`` as the README calls it
(``steps == gen_length``, ``block_length=4``, ``temperature=0``, ``remasking="low_confidence"``,
``threshold=None``, ``shift=False``, ``eos_id``) and without a cache: its cached keys/values are those
of the same tokens under the same mask, so recomputing the window ``x[:, :block_end]`` gives the same
logits. Its blocks: the prompt's whole blocks are prefilled; the first decode block holds the prompt's
last ``P mod 4`` tokens and ``4 - P mod 4`` masks, each later one 4 masks; a block's masks are
committed ``mask_count / steps`` per step, the most confident first; after a finished block holding
an eos it stops.
"""

from __future__ import annotations

import json

import pytest
import torch

from editserver.model.infer.block_cache import BlockCache
from editserver.model.infer.cache import InPlaceNoCache, Rows
from editserver.model.infer.engine import EditRequest, Engine, FimRequest, SamplingOptions
from editserver.model.infer.hf.families import UnsupportedModelError, detect
from editserver.model.infer.layout import BlockLayout, SpmBlockLayout
from editserver.model.infer.plan import DecodePlan
from editserver.model.infer.unmasking import BlockSchedule
from tests.editserver.test_server import ZED_PROMPT
from tests.hf_stable_diffcoder import FIM, make_stable_diffcoder
from tests.model.test_block_diffusion import _decode, assert_served, block_mask

B = 4


@pytest.fixture(scope="module")
def sdc(tmp_path_factory):
    d, ref = make_stable_diffcoder(tmp_path_factory.mktemp("sdc"))
    return d, ref, Engine.load(d)


def test_detected_from_the_published_config_not_from_model_type(sdc):
    d, _, e = sdc
    raw = json.loads((d / "config.json").read_text())
    cfg = detect(raw, None)
    assert (cfg.family, cfg.block_size, cfg.mask_id, cfg.rope_theta) == ("stable-diffcoder", 4, 5, 500000.0)
    assert not (cfg.shift or cfg.qkv_bias or cfg.qk_norm or cfg.tie_embeddings)
    assert cfg.max_position_embeddings == 8192
    assert e.family == "stable-diffcoder" and e.layout.block == 4 and isinstance(e.cache, BlockCache)
    assert e.tok.mask_id == 5 and e.tok.eot_id == e.tok.eos_id == 2  # <[MASK_TOKEN]>; eos fills
    assert 2 not in e.suppressed_ids() and 1 in e.suppressed_ids()  # eos written, the pad never
    older = {**raw, "architectures": ["LlamaForCausalLM"]}  # the transformers-4.46 revision
    older["auto_map"] = {"AutoModelForCausalLM": "modeling_seed_diffcoder.SeedDiffcoderForCausalLM"}
    assert detect(older, None).family == "stable-diffcoder"
    plain = {k: v for k, v in raw.items() if k != "auto_map"} | {"architectures": ["LlamaForCausalLM"]}
    for mask in (None, 5):  # model_type "llama" alone: a plain Llama, refused as autoregressive
        with pytest.raises(UnsupportedModelError, match="autoregressive"):
            detect(plain, mask)
    for bad in ({"mlp_bias": True}, {"hidden_act": "gelu"}):
        with pytest.raises(UnsupportedModelError, match="MLP biases or an activation"):
            detect({**raw, **bad}, None)


def test_forward_matches_transformers_llama_under_the_block_mask(sdc):
    _, ref, e = sdc
    ids = torch.randint(0, 300, (1, 23))
    with torch.no_grad():
        want = ref(ids, attention_mask=block_mask(23, B)).logits
    got = e.model(ids)
    assert (got - want).abs().max().item() <= 1e-4


def test_fim_prompt_is_suffix_prefix_middle(sdc):
    _, _, e = sdc
    assert isinstance(e.layout, SpmBlockLayout) and e.layout.route == "fim" and e.fim_route == "fim"
    s, p, m = (e.tok.hf.token_to_id(t) for t in FIM)
    pre, suf = e.tok.encode("def add(a, b):\n    return "), e.tok.encode("\n\nprint(add(1, 2))\n")
    ctx, after, dropped = e.layout.fim(pre, suf, 8, None)
    assert ctx == [s, *suf, p, *pre, m] and after is None and dropped == 0  # no suffix rows
    ctx, _, dropped = e.layout.fim(pre, suf, 8, 8 + 3 + 10)  # a window: prefix end, suffix start kept
    assert ctx[0] == s and ctx[-1] == m and dropped == len(pre) + len(suf) - 10
    assert ctx[1 : ctx.index(p)] == suf[: ctx.index(p) - 1] and ctx[-2] == pre[-1]
    assert e.layout.fim_answer("```\nx\n```") == "```\nx\n```"  # the middle as written, no fence


def published_loop(ref, prompt: list[int], mask_id: int, gen: int, eos: int):
    """generate_block as the README calls it, written out plainly; returns each step's canvas."""
    P = len(prompt)
    x = torch.cat([torch.tensor([prompt]), torch.full((1, gen), mask_id)], dim=1)
    mask = block_mask(P + gen, B)
    steps = B  # steps // (gen // block_length) with steps == gen_length
    sizes = [B] * (gen // B)
    if P % B:  # the first block completes the prompt's last one; the last block is shorter by as much
        sizes = [B - P % B, *sizes]
        sizes[-1] = P % B
    trace, start = [], P // B * B
    for k in range(len(sizes)):
        end = P + sum(sizes[: k + 1])
        count = int((x[:, start:end] == mask_id).sum())
        owed = [count // steps + int(s < count % steps) for s in range(steps)]
        for n in owed:
            if n == 0:
                continue
            masked = x[:, start:end] == mask_id
            with torch.no_grad():
                logits = ref(x[:, :end], attention_mask=mask[:, :, :end, :end]).logits[:, start:end].clone()
            logits[..., mask_id] = float("-inf")  # never proposed, as in our loop
            p = logits.double().softmax(-1)
            x0 = p.argmax(-1)  # [1, n]: temperature 0
            conf = torch.where(masked, p.gather(-1, x0[..., None])[..., 0], -torch.inf)
            pick = torch.zeros_like(masked)
            pick[0, conf[0].topk(n).indices] = True
            x[:, start:end][pick] = x0[pick]
            trace.append(x[0, P:].clone())
        if bool((x[0, max(start, P) : end] == eos).any()):
            break
        start = end
    return x[0, P:], trace


def _check_steps(e, ref, ctx: list[int]):
    plan = e.plan(FimRequest(prefix="", suffix="", options=SamplingOptions(published=True)))
    assert plan.rule == BlockSchedule(1.0, 4) and isinstance(plan.cache, InPlaceNoCache)
    lead = len(ctx) % B
    n = 16  # gen_length: a multiple of the block, the publisher asserts; its last block has ``lead`` masks
    rows = Rows(torch.tensor([ctx]), torch.tensor([len(ctx)]), torch.tensor([n]))
    want, trace = published_loop(ref, ctx, e.tok.mask_id, n, e.tok.eos_id)
    seen = []
    res = _decode(e, rows, lead, n, plan, lambda c: seen.append(c[0].clone()))
    ends = want == e.tok.eos_id
    stop = int(ends.nonzero()[0]) if bool(ends.any()) else n
    assert len(seen) == len(trace) or stop < n
    upto = -(-(stop + lead) // B) * B - lead  # through the block holding the first eos
    for ours, theirs in zip(seen, trace):  # one entry per step, the same positions committed
        ours = torch.where(ours == e.tok.mask_id, -1, ours)[:upto]
        theirs = torch.where(theirs == e.tok.mask_id, -1, theirs)[:upto]
        assert torch.equal(ours, theirs)
    assert torch.equal(res.tokens[0, :stop], want[:stop])


@pytest.mark.parametrize("text", ["Say hi.", "Write a function that adds two numbers in Python."])
def test_published_decode_chooses_the_publishers_tokens_step_by_step(sdc, text):
    _, ref, e = sdc
    _check_steps(e, ref, e.tok.encode_chat(text))


@pytest.mark.parametrize("pre", ["def add(a, b):\n    return ", "x = 1\n"])
def test_published_decode_of_a_fim_prompt(sdc, pre):
    _, ref, e = sdc
    ctx, _, _ = e.layout.fim(e.tok.encode(pre), e.tok.encode("\n"), 16, None)
    _check_steps(e, ref, ctx)


def test_bench_takes_its_published_loop():
    from editserver.bench.fim import parse_decodes

    assert parse_decodes("published,default", "stable-diffcoder") == ("published", "default")
    assert "no published decoding loop" in parse_decodes("published", "editserver")


def test_block_cache_equals_recomputing_everything(sdc):
    """Contexts ending at different places in a block decode on the block cache exactly as on the
    exact reference, token for token; a threshold low enough that steps commit several tokens."""
    _, _, e = sdc
    texts = ["a", "def f(x):", "Write a short loop in C."]
    for thr in (0.95, 0.004):
        outs = []
        for cache in (BlockCache(), InPlaceNoCache()):
            plan = DecodePlan("fim", "t", BlockSchedule(thr, B), B, cache, fixed_canvas=True)
            got = []
            for t in texts:
                ctx = e.tok.encode_chat(t)
                rows = Rows(torch.tensor([ctx]), torch.tensor([len(ctx)]), torch.tensor([21]))
                got.append(_decode(e, rows, len(ctx) % B, 21, plan).tokens)
            outs.append(got)
        for a, b in zip(*outs):
            assert torch.equal(a, b)


def test_engine_answers_fim_and_edit(sdc):
    _, _, e = sdc
    fim = e.complete(FimRequest(prefix="def add(a, b):\n    return ", suffix="\n", max_tokens=12))
    assert fim.steps >= 1 and fim.canvas_tokens == 12
    edit = e.complete(EditRequest(prompt=ZED_PROMPT, max_tokens=8))
    assert edit.steps >= 1
    with pytest.raises(ValueError, match="4-token blocks"):
        e.plan(FimRequest(prefix="", suffix="", options=SamplingOptions(block_size=8)))
    assert e.plan(FimRequest(prefix="", suffix="")).rule == BlockSchedule(0.95, 4)


def test_base_without_a_template_and_a_tokenizer_without_fim_tags(tmp_path):
    """The Base has no chat template and still takes FIM by its tags; a tokenizer without the tags
    falls back to the chat route."""
    d, _ = make_stable_diffcoder(tmp_path / "a", "Stable-DiffCoder-8B-Base", dim=32, layers=1, ffn=48)
    e = Engine.load(d)
    assert e.tok.chat_template is None and e.fim_route == "fim"
    assert e.complete(EditRequest(prompt=ZED_PROMPT, max_tokens=8)).steps >= 1
    d, _ = make_stable_diffcoder(tmp_path / "b", fim=False, dim=32, layers=1, ffn=48)
    e = Engine.load(d)
    assert type(e.layout) is BlockLayout and e.fim_route == "chat"
    assert e.complete(FimRequest(prefix="x = ", suffix="\n", max_tokens=8)).steps >= 1


def test_served_over_http_with_its_block_and_fim_route(tmp_path):
    """The Stable-DiffCoder directory served: its 4-token block and the FIM route reported."""
    d, _ = make_stable_diffcoder(tmp_path / "model")
    assert_served(d, tmp_path, "stable-diffcoder", 4, route="fim")
