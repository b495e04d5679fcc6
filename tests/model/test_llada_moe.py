"""LLaDA-MoE-7B-A1B: detected by its architecture and keys, loaded from its publisher's tensor names,
and equal to a plain reference of the publisher's forward pass.

The reference below is written from ``modeling_lladamoe.py`` (read in the copy inclusionAI/dInfer
``tools/modeling_fused_lladamoe.py`` @fce4e32; nothing copied): RMSNorm in fp32 with the weight
applied after the cast back; q and k projected, each head's slice RMS-normalised, then rotated
(rotate-half, cos/sin from ``rope_theta`` over the full head); no attention mask at all; softmax in
fp32; the router's softmax over all experts in fp32, the expert bias added, top-k of the sum taken
as the weights (no renormalisation), cast back; every expert tried against a one-hot of the choice.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from editserver.model.infer.engine import Engine
from editserver.model.infer.hf.families import UnsupportedModelError, detect
from editserver.model.infer.hf.moe import MoE, MoeSpec, Sigmoid
from tests.hf_llada_moe import write_llada_moe
from tests.hf_models import make_published


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
    T, D = x.shape
    probs = torch.softmax(x @ sd[p + "mlp.gate.weight"].T, dim=1, dtype=torch.float)  # [T, E]
    if cfg["moe_router_enable_expert_bias"]:
        probs = probs + sd[p + "mlp.expert_bias"]
    w, sel = torch.topk(probs, cfg["num_experts_per_tok"], dim=-1)
    w = w.to(x.dtype)
    out = torch.zeros(T, D)
    for e in range(cfg["num_experts"]):
        slot = sel == e  # [T, k]
        coef = (w * slot).sum(-1, keepdim=True)  # [T, 1]: zero for tokens that did not choose e
        out += _swiglu(x, p + f"mlp.experts.{e}.", sd) * coef
    if cfg["shared_expert_intermediate_size"]:
        out += _swiglu(x, p + "shared_expert.", sd)
    return out


def reference_logits(sd: dict, cfg: dict, ids: torch.Tensor) -> torch.Tensor:
    """Logits [L, V] of one unpadded row ids [L]."""
    D, H, Hkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps, L = D // H, cfg["rms_norm_eps"], ids.shape[0]
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2).float() / hd))
    freqs = torch.arange(L).float()[:, None] * inv[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos(), emb.sin()  # [L, hd]
    x = sd["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = _norm(x, sd[p + "input_layernorm.weight"], eps)
        q, k, v = (h @ sd[p + f"self_attn.{n}_proj.weight"].T for n in "qkv")
        if cfg["qk_layernorm"]:
            q = _norm(q.reshape(-1, hd), sd[p + "self_attn.q_norm.weight"], eps).reshape(L, -1)
            k = _norm(k.reshape(-1, hd), sd[p + "self_attn.k_norm.weight"], eps).reshape(L, -1)
        q, k, v = (t.view(L, -1, hd).transpose(0, 1) for t in (q, k, v))  # [heads, L, hd]
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        k, v = k.repeat_interleave(H // Hkv, 0), v.repeat_interleave(H // Hkv, 0)
        att = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(hd), dim=-1, dtype=torch.float32)
        x = x + (att @ v).transpose(0, 1).reshape(L, -1) @ sd[p + "self_attn.o_proj.weight"].T
        h = _norm(x, sd[p + "post_attention_layernorm.weight"], eps)
        dense = cfg["moe_layer_freq"][i] == 0
        x = x + (_swiglu(h, p + "mlp.", sd) if dense else _moe(h, p, sd, cfg))
    return _norm(x, sd["model.norm.weight"], eps) @ sd["lm_head.weight"].T


# ---- fixtures -------------------------------------------------------------------------------------
VARIANTS = {
    "published": {},
    "bias+shared+dense+gqa": dict(
        moe_router_enable_expert_bias=True,
        shared_expert_intermediate_size=24,
        moe_layer_freq=[0, 1],
        num_key_value_heads=2,
    ),
}


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    root = tmp_path_factory.mktemp("llada-moe")
    d, state = make_published(root, "LLaDA-MoE-7B-A1B-Instruct")
    return d, state


def _variant(published, tmp_path, changes):
    import shutil

    src, state = published
    if not changes:
        return src, state, json.loads((src / "config.json").read_text())
    d = shutil.copytree(src, tmp_path / "variant")
    cfg = {**json.loads((src / "config.json").read_text()), **changes}
    return d, write_llada_moe(d, cfg, seed=1), cfg


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_parity_with_the_publisher_forward(published, tmp_path, variant):
    """fp32 logits within 1e-4 of the reference, rows of unequal length batched with padding."""
    d, state, cfg = _variant(published, tmp_path, VARIANTS[variant])
    model = Engine.load(d, dtype=torch.float32).model
    assert model.cfg.family == "llada-moe" and model.cfg.qk_norm and not model.cfg.shift
    g = torch.Generator().manual_seed(0)
    rows = [torch.randint(0, cfg["vocab_size"], (n,), generator=g) for n in (23, 16, 9)]
    ids = torch.zeros(3, 23, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
    with torch.no_grad():
        ours = model(ids, torch.tensor([len(r) for r in rows]))
        for i, r in enumerate(rows):
            want = reference_logits(state, cfg, r)
            diff = (ours[i, : len(r)] - want).abs().max().item()
            assert diff <= 1e-4, f"row {i}: max |diff| {diff:.2e}"


def test_detected_by_architecture_and_keys_never_model_type_alone(published):
    raw = json.loads((published[0] / "config.json").read_text())
    assert raw["model_type"] == "llada"  # as dense LLaDA's
    assert detect(raw, None).family == "llada-moe" and detect(raw, None).mask_id == 156895
    no_arch = {k: v for k, v in raw.items() if k != "architectures"}
    assert detect(no_arch, 7).family == "llada-moe"  # model_type llada with expert keys
    bare = {k: v for k, v in raw.items() if k not in ("num_experts", "expert_intermediate_size")}
    with pytest.raises(UnsupportedModelError, match="LLaDA-MoE config.json without num_experts"):
        detect(bare, None)  # the architecture says MoE, the keys are missing: one line, no KeyError
    dense = {"model_type": "llada", "architectures": ["LLaDAModelLM"], "d_model": 64, "n_heads": 4}
    dense.update(n_layers=1, mlp_hidden_size=96, vocab_size=300)
    assert detect(dense, None).family == "llada"


def test_missing_expert_tensor_is_one_line(published, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    d = shutil.copytree(published[0], tmp_path / "broken")
    index = json.loads((d / "model.safetensors.index.json").read_text())
    name = "model.layers.1.mlp.experts.3.up_proj.weight"
    shard = d / index["weight_map"].pop(name)
    save_file({k: v for k, v in load_file(str(shard)).items() if k != name}, str(shard))
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match="lacks weights: layers.1.mlp.experts.3.up_proj.weight"):
        Engine.load(d)


# ---- the block on its own -------------------------------------------------------------------------
def _dense_moe(block: MoE, x: torch.Tensor) -> torch.Tensor:
    """Every expert on every token, weighted by the routing (zero where not chosen)."""
    w, ids = block.route(x)
    out = torch.zeros_like(x)
    for e, expert in enumerate(block.experts):
        out += expert(x) * (w * (ids == e)).sum(-1, keepdim=True)
    return out + (block.shared_expert(x) if block.shared_expert is not None else 0)


def test_gather_equals_every_expert_and_reads_only_chosen_ones():
    torch.manual_seed(0)
    block = MoE(MoeSpec(n_experts=16, top_k=2, expert_dim=8, shared_dim=4), dim=12)
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.3)
    x = torch.randn(1, 5, 12)  # 5 tokens x 2 choices: at most 10 of 16 experts
    called = []
    for e, expert in enumerate(block.experts):
        expert.register_forward_hook(lambda *a, e=e: called.append(e))
    got = block(x)
    visited = sorted(called)  # each chosen expert once, no other
    assert visited == sorted(set(block.route(x[0])[1].flatten().tolist())) and len(visited) < 16
    assert torch.allclose(got[0], _dense_moe(block, x[0]), atol=1e-6)


def test_llada2_routing_options():
    """Sigmoid scores, the bias for the choice only, 4 of 8 groups kept, renormalised, times 2.5."""
    torch.manual_seed(0)
    spec = MoeSpec(
        n_experts=32, top_k=4, expert_dim=4, score=Sigmoid(), norm_topk_prob=True, routed_scaling=2.5,
        expert_bias=True, bias_in_weight=False, groups=8, topk_groups=2,
    )  # fmt: skip
    block = MoE(spec, dim=6)
    torch.nn.init.normal_(block.gate.weight)
    torch.nn.init.normal_(block.expert_bias, std=0.5)
    x = torch.randn(7, 6)
    w, ids = block.route(x)
    s = torch.sigmoid(x @ block.gate.weight.T)  # [T, E]
    biased = (s + block.expert_bias).view(7, 8, 4)
    kept = biased.topk(2, dim=-1).values.sum(-1).topk(2, dim=-1).indices  # [T, 2] groups
    assert all(set((ids[t] // 4).tolist()) <= set(kept[t].tolist()) for t in range(7))
    want = s.gather(1, ids)
    assert torch.allclose(w, 2.5 * want / want.sum(-1, keepdim=True), atol=1e-6)


def test_int8_leaves_the_router_alone(published):
    from editserver.model.infer.quant import Int8Linear, quantize

    model = quantize(Engine.load(published[0]).model, "int8")
    moe = model.layers[0].mlp
    assert isinstance(moe.experts[0].up_proj, Int8Linear) and moe.gate.weight.dtype == torch.float32
