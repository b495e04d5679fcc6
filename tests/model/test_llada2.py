"""LLaDA2.0 / LLaDA2.1: detected from the published config.json, loaded from the publisher's tensor
names (the fused q/k/v split at load), equal to a plain reference of the publisher's forward, and
decoded by the one loop as the publisher's ``generate`` decodes, LLaDA2.1's token editing included.

The reference forward is written from inclusionAI/dFactory @92b6890
``models/llada2_moe/modeling_llada2_moe.py`` (nothing copied): RMSNorm in fp32, the weight after the
cast back; ``query_key_value`` viewed as (H + 2 Hkv) heads and split q | k | v; each head's q and k
RMS-normalised; rotate-half on the first ``head_dim * partial_rotary_factor`` dims (frequencies over
those dims), the rest passed through; the additive block-causal mask ``tril(ones(nb, nb))`` tiled
32 x 32; softmax in fp32; ``dense``; the gate's logits in fp32, sigmoid scores, the expert bias for
the choice only, groups scored by their two best, the kept groups' top-k, the unbiased scores
renormalised and times ``routed_scaling_factor``; a shared expert; an untied head.

The publisher's loop (``published_loop``) is dFactory's ``generate`` in its greedy limit (its
``torch.multinomial`` draw replaced by the argmax, the mask id never proposed, as in our loop),
recomputing the window ``x[:, :(k + 1) * 32]`` every step: the keys a cache would keep are those of
the same tokens under the same mask. Its forward is our module's full forward, which the parity test
holds to the reference above (the reference is 4x slower, and the loop is what is under test there). With ``edit`` it adds LLaDA2.1's token editing
(model/infer/token_edit.py: its sources and what is unchecked).
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from editserver.model.infer.block_cache import BlockCache
from editserver.model.infer.cache import InPlaceNoCache
from editserver.model.infer.engine import EditRequest, Engine, FimRequest, SamplingOptions
from editserver.model.infer.hf.families import UnsupportedModelError, detect
from editserver.model.infer.hf.moe import Sigmoid
from editserver.model.infer.plan import DecodePlan
from editserver.model.infer.token_edit import TokenEdit
from editserver.model.infer.unmasking import BlockSchedule
from tests.editserver.test_server import ZED_PROMPT
from tests.hf_llada2 import make_llada2
from tests.model.test_block_diffusion import _decode, _rows, assert_served, block_mask


# ---- the reference --------------------------------------------------------------------------------
def _norm(x, w, eps):
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def _swiglu(x, p, sd):
    gate = x @ sd[p + "gate_proj.weight"].T
    return (torch.nn.functional.silu(gate) * (x @ sd[p + "up_proj.weight"].T)) @ sd[p + "down_proj.weight"].T


def _moe(x, p, sd, cfg):
    T, E, G = x.shape[0], cfg["num_experts"], cfg["n_group"]
    scores = torch.sigmoid(x.float() @ sd[p + "mlp.gate.weight"].float().T)  # [T, E]
    routing = scores + sd[p + "mlp.gate.expert_bias"]
    group = routing.view(T, G, -1).topk(2, dim=-1).values.sum(-1)  # [T, G]
    keep = torch.zeros(T, G).scatter_(1, group.topk(cfg["topk_group"], dim=-1).indices, 1.0)
    allowed = keep[:, :, None].expand(T, G, E // G).reshape(T, E).bool()
    sel = routing.masked_fill(~allowed, float("-inf")).topk(cfg["num_experts_per_tok"], dim=-1).indices
    w = scores.gather(1, sel)
    w = w / (w.sum(-1, keepdim=True) + 1e-20) * cfg["routed_scaling_factor"]
    out = torch.zeros_like(x)
    for e in range(E):
        coef = (w * (sel == e)).sum(-1, keepdim=True)  # [T, 1]: zero where e was not chosen
        out += _swiglu(x, p + f"mlp.experts.{e}.", sd) * coef
    return out + _swiglu(x, p + "mlp.shared_experts.", sd)


def reference_logits(sd: dict, cfg: dict, ids: torch.Tensor) -> torch.Tensor:
    """Logits [L, V] of one row ids [L] on the absolute block grid from 0."""
    H, Hkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps, L = cfg["rms_norm_eps"], ids.shape[0]
    rot = int(hd * cfg["partial_rotary_factor"])
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, rot, 2).float() / rot))
    freqs = torch.arange(L).float()[:, None] * inv[None, :]
    cos, sin = torch.cat([freqs, freqs], -1).cos(), torch.cat([freqs, freqs], -1).sin()  # [L, rot]
    mask = block_mask(L, 32)[0]  # [1, L, L] additive
    x = sd["model.word_embeddings.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = _norm(x, sd[p + "input_layernorm.weight"], eps)
        qkv = (h @ sd[p + "attention.query_key_value.weight"].T).view(L, H + 2 * Hkv, hd)
        q, k, v = (t.transpose(0, 1) for t in qkv.split([H, Hkv, Hkv], dim=1))  # [heads, L, hd]
        q = _norm(q, sd[p + "attention.query_layernorm.weight"], eps)
        k = _norm(k, sd[p + "attention.key_layernorm.weight"], eps)
        q = torch.cat([q[..., :rot] * cos + _rotate_half(q[..., :rot]) * sin, q[..., rot:]], -1)
        k = torch.cat([k[..., :rot] * cos + _rotate_half(k[..., :rot]) * sin, k[..., rot:]], -1)
        k, v = k.repeat_interleave(H // Hkv, 0), v.repeat_interleave(H // Hkv, 0)
        att = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(hd) + mask, dim=-1, dtype=torch.float32)
        x = x + (att @ v).transpose(0, 1).reshape(L, -1) @ sd[p + "attention.dense.weight"].T
        h = _norm(x, sd[p + "post_attention_layernorm.weight"], eps)
        dense = i < cfg["first_k_dense_replace"]
        x = x + (_swiglu(h, p + "mlp.", sd) if dense else _moe(h, p, sd, cfg))
    return _norm(x, sd["model.norm.weight"], eps) @ sd["lm_head.weight"].T


def published_loop(forward, prompt, mask_id, eos, gen, thr, edit=None, b=32, steps=32):
    """dFactory's ``generate`` (greedy limit, module docstring); ``edit`` (tau_edit, max_post_steps)
    adds LLaDA2.1's editing. Returns (the answer [gen], the answer after every step)."""
    P = len(prompt)
    nb = -(-(P + gen) // b)
    x = torch.full((nb * b,), mask_id)
    x[:P] = torch.tensor(prompt)
    steps = min(steps, gen)  # generate: min(steps, gen_length // minimal_topk)
    base, extra = divmod(b, steps)
    owed = [base + int(s < extra) for s in range(steps)]
    trace = []
    for k in range(P // b, nb):
        lo, hi, s, post = k * b, (k + 1) * b, 0, 0
        while True:
            blk = x[lo:hi]  # a view: writes land in x
            masked = blk == mask_id
            if not masked.any():
                if edit is None:
                    break
                post += 1
                if post > edit[1]:
                    break
            with torch.no_grad():
                logits = forward(x[:hi])[lo:hi].clone()
            logits[:, mask_id] = float("-inf")
            p, x0 = logits.softmax(-1).max(-1)  # [b]
            pick = torch.zeros(b, dtype=torch.bool)
            if masked.any():
                conf = torch.where(masked, p, -torch.inf)
                high = conf > thr
                if high.sum() >= owed[s]:
                    pick = high
                else:
                    pick[conf.topk(min(owed[s], int(masked.sum()))).indices] = True
            if edit is not None:  # written, non-prompt tokens whose candidate differs and clears tau_edit
                written = ~masked & (torch.arange(lo, hi) >= P)
                pick = pick | (written & (x0 != blk) & (p > edit[0]))
            blk[pick] = x0[pick]
            s += 1
            trace.append(x[P : P + gen].clone())
            if not pick.any():  # a step past a full block that changed nothing ends it
                break
        if bool((x[P:hi] == eos).any()):  # generate stops after a block holding the end of text
            break
    return x[P : P + gen], trace


# ---- fixtures -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def llada2(tmp_path_factory):
    d, state, cfg = make_llada2(tmp_path_factory.mktemp("llada2"))
    return d, state, cfg, Engine.load(d, dtype=torch.float32)


@pytest.fixture(scope="module")
def llada21(tmp_path_factory):
    d, state, cfg = make_llada2(tmp_path_factory.mktemp("llada21"), "LLaDA2.1-mini")
    return d, state, cfg, Engine.load(d, dtype=torch.float32)


def test_detected_from_the_published_config(llada2, llada21):
    d, _, raw, e = llada2
    cfg = detect(raw, None)
    assert (cfg.family, cfg.block_size, cfg.mask_id, cfg.rotary_dim, cfg.head_dim) == (
        "llada2",
        32,
        156895,
        16,
        32,
    )
    assert cfg.qk_norm and not cfg.qkv_bias and not cfg.shift and not cfg.tie_embeddings
    moe = cfg.moe
    assert (moe.n_experts, moe.top_k, moe.expert_dim, moe.shared_dim, moe.dense_layers) == (
        16,
        4,
        16,
        16,
        (0,),
    )
    assert moe.score == Sigmoid() and moe.norm_topk_prob and moe.routed_scaling == 2.5
    assert moe.expert_bias and not moe.bias_in_weight and (moe.groups, moe.topk_groups) == (4, 2)
    assert e.family == "llada2" and e.layout.block == 32 and isinstance(e.cache, BlockCache)
    assert e.tok.mask_id == detect(raw, e.tok.mask_id).mask_id != 156895  # the tokenizer's <|mask|>
    assert llada21[3].family == "llada2.1"  # the same config.json; the name says 2.1
    assert e.plan(FimRequest(prefix="", suffix="")).revise is None
    assert llada21[3].plan(FimRequest(prefix="", suffix="")).revise == TokenEdit(0.5, 16)
    with pytest.raises(UnsupportedModelError, match="biases"):
        detect({**raw, "use_qkv_bias": True}, None)
    with pytest.raises(UnsupportedModelError, match="unknown model family"):
        detect({"model_type": "llada2_moe", "hidden_size": 8}, None)  # model_type alone is not enough


def test_forward_matches_the_publisher_under_the_block_mask(llada2):
    """fp32 logits within 1e-4 of the reference, across two blocks, rows of unequal length batched."""
    _, state, cfg, e = llada2
    g = torch.Generator().manual_seed(0)
    rows = [torch.randint(0, cfg["vocab_size"], (n,), generator=g) for n in (45, 33, 9)]
    ids = torch.zeros(3, 45, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
    with torch.no_grad():
        ours = e.model(ids, torch.tensor([len(r) for r in rows]))
        for i, r in enumerate(rows):
            diff = (ours[i, : len(r)] - reference_logits(state, cfg, r)).abs().max().item()
            assert diff <= 1e-4, f"row {i}: max |diff| {diff:.2e}"


def _edits(trace, mask_id) -> int:
    """Written tokens a step changed (token editing at work)."""
    return sum(int(((a != mask_id) & (a != b)).sum()) for a, b in zip(trace, trace[1:]))


def _same_steps(e, state, cfg, text, plan, thr, edit):
    ctx = e.tok.encode_chat(text)
    lead = len(ctx) % 32
    n = 64 - lead  # the canvas ends on the block grid, as the publisher's last block does
    rows, _ = _rows(e, [text], n)
    want, trace = published_loop(
        lambda x: e.model(x[None])[0], ctx, e.tok.mask_id, e.tok.eot_id, n, thr, edit
    )
    seen = []
    res = _decode(e, rows, lead, n, plan, lambda c: seen.append(c[0].clone()))
    eot = e.tok.eot_id
    stop = int((want == eot).nonzero()[0]) if bool((want == eot).any()) else n
    if stop == n:
        assert len(seen) == len(trace)
    for ours, theirs in zip(seen, trace):  # one entry per step, the same tokens written
        assert torch.equal(ours[:stop], theirs[:stop])
    assert torch.equal(res.tokens[0, :stop], want[:stop])
    return trace


@pytest.mark.parametrize("text", ["Say hi.", "Write a function that adds two numbers in Python."])
def test_published_decode_chooses_the_publishers_tokens_step_by_step(llada2, text):
    _, state, cfg, e = llada2
    plan = e.plan(FimRequest(prefix="", suffix="", options=SamplingOptions(published=True)))
    assert (
        plan.rule == BlockSchedule(0.95, 32)
        and plan.revise is None
        and isinstance(plan.cache, InPlaceNoCache)
    )
    _same_steps(e, state, cfg, text, plan, 0.95, None)


def test_llada21_editing_follows_the_publishers_loop_step_by_step(llada21):
    _, state, cfg, e = llada21
    plan = e.plan(FimRequest(prefix="", suffix="", options=SamplingOptions(published=True)))
    assert plan.rule == BlockSchedule(0.7, 32) and plan.revise == TokenEdit(0.5, 16)
    _same_steps(e, state, cfg, "Say hi.", plan, 0.7, (0.5, 16))
    # thresholds low enough that written tokens are rewritten, in the loop and past full blocks
    low = DecodePlan(
        "fim", "t", BlockSchedule(0.3, 32), 32, InPlaceNoCache(), fixed_canvas=True, revise=TokenEdit(0.05, 4)
    )
    trace = _same_steps(e, state, cfg, "Write a loop.", low, 0.3, (0.05, 4))
    assert _edits(trace, e.tok.mask_id) > 0


def test_block_cache_equals_recomputing_everything_with_editing(llada21):
    """Contexts ending at different places in a block decode on the block cache exactly as on the
    exact reference, token for token, with and without token editing."""
    _, _, _, e = llada21
    texts = ["a", "def f(x):", "Write a short loop in C."]
    for revise in (None, TokenEdit(0.05, 4)):
        outs = []
        for cache in (BlockCache(), InPlaceNoCache()):
            plan = DecodePlan("fim", "t", BlockSchedule(0.3, 32), 32, cache, fixed_canvas=True, revise=revise)
            got = []
            for t in texts:
                rows, ctx = _rows(e, [t], 40)
                got.append(_decode(e, rows, len(ctx[0]) % 32, 40, plan).tokens)
            outs.append(got)
        for a, b in zip(*outs):
            assert torch.equal(a, b)


def test_engine_answers_fim_and_edit_through_the_chat_template(llada21):
    _, _, _, e = llada21
    fim = e.complete(FimRequest(prefix="def add(a, b):\n    return ", suffix="\n", max_tokens=12))
    assert fim.steps >= 1 and fim.canvas_tokens == 12 and e.layout.route == "chat"
    edit = e.complete(EditRequest(prompt=ZED_PROMPT, max_tokens=8))
    assert edit.steps >= 1
    with pytest.raises(ValueError, match="32-token blocks"):
        e.plan(FimRequest(prefix="", suffix="", options=SamplingOptions(block_size=8)))


def test_fused_qkv_of_the_wrong_size_is_one_line(tmp_path):
    d, _, cfg = make_llada2(tmp_path, num_key_value_heads=4)
    raw = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**raw, "num_key_value_heads": 2}))  # the weights say 4
    with pytest.raises(ValueError, match="query_key_value.weight.*shape"):
        Engine.load(d)


def test_served_over_http_with_its_block_and_fim_route(tmp_path):
    """LLaDA2.1 served: the family, its 32-token block, FIM and next edit over HTTP."""
    d, _, _ = make_llada2(tmp_path / "model", "LLaDA2.1-mini")
    assert_served(d, tmp_path, "llada2.1", 32)


def test_typing_with_reuse_answers_as_without_editing_included(tmp_path):
    """LLaDA2.1 typed a few characters at a time: every answer equal with context reuse on and off
    (tests/model/test_block_reuse.py's replay); editing touches only the answer's block."""
    from tests.model.test_block_reuse import _typing

    d, _, _ = make_llada2(tmp_path, "LLaDA2.1-mini")
    on, off = Engine.load(d), Engine.load(d, prefix_cache_mb=0)
    assert on.prefix is not None and off.prefix is None
    with_reuse, without = _typing(on, chars=8), _typing(off, chars=8)
    assert [t for t, _ in with_reuse] == [t for t, _ in without]
    assert on.prefix.stats()["hits"] >= len(with_reuse) - 1
