"""A tiny LLaDA-MoE-7B-A1B directory with its publisher's file set, config.json keys and tensor names.

Only the sizes shrink (docs/open-weights.md, "LLaDA-MoE-7B-A1B"). The files are those the Hugging
Face listing of inclusionAI/LLaDA-MoE-7B-A1B-Base shows (the Instruct's first commit adds the same
set): config.json, configuration_lladamoe.py, generation_config.json, three safetensors shards and
their index, modeling_lladamoe.py, special_tokens_map.json, tokenizer.json, tokenizer_config.json.
The config's key set is ``LLaDAConfig.__init__``'s (configuration_lladamoe.py, read in the copy
inclusionAI/dInfer ``tools/configuration_lladamoe.py`` @fce4e32); the published values were not read
(docs/open-weights.md marks which). The weights are random, written under the publisher's names:
``model.layers.N.self_attn.{q,k,v,o}_proj``, ``self_attn.{q,k}_norm``, ``mlp.gate``,
``mlp.experts.E.{gate,up,down}_proj`` (``mlp.expert_bias`` and ``shared_expert.*`` when enabled).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

# Ling's added tokens in id order (bos 156891, eos 156892, mask 156895: the ids dInfer and llama.cpp
# use); the names [CLS] and [gMASK] between them and the role tags after them are not verified
LLADA_MOE_ADDED = [
    ("<|startoftext|>", True),
    ("<|endoftext|>", True),
    ("[CLS]", True),
    ("[gMASK]", True),
    ("<|mask|>", True),
    ("<role>", True),
    ("</role>", True),
    ("<|role_end|>", True),
]
# the Ling/Bailing turn format (not verified against the published tokenizer_config.json)
LLADA_MOE_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}<role>SYSTEM</role>"
    "{% elif m['role'] == 'user' %}<role>HUMAN</role>"
    "{% else %}<role>ASSISTANT</role>{% endif %}"
    "{{ m['content'] }}<|role_end|>{% endfor %}"
    "{% if add_generation_prompt %}<role>ASSISTANT</role>{% endif %}"
)
LLADA_MOE_CODE = ("configuration_lladamoe.py", "modeling_lladamoe.py")


def llada_moe_config(dim: int, layers: int, ffn: int, vocab: int, ids: dict[str, int], **moe) -> dict:
    """config.json with configuration_lladamoe.py's keys, the sizes shrunk; ``moe`` overrides
    (num_experts, num_experts_per_tok, expert_intermediate_size, moe_router_enable_expert_bias,
    shared_expert_intermediate_size, moe_layer_freq)."""
    cfg = {
        "architectures": ["LLaDAMoEModelLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "auto_map": {
            "AutoConfig": "configuration_lladamoe.LLaDAConfig",
            "AutoModel": "modeling_lladamoe.LLaDAMoEModelLM",
            "AutoModelForCausalLM": "modeling_lladamoe.LLaDAMoEModelLM",
        },
        "clip_qkv": None,
        "dense_intermediate_size": ffn,
        "eos_token_id": ids["<|endoftext|>"],
        "expert_intermediate_size": 32,
        "hidden_act": "silu",
        "hidden_size": dim,
        "initializer_range": 0.02,
        "max_position_embeddings": 8192,
        "model_type": "llada",
        "moe_layer_freq": [1] * layers,
        "moe_router_enable_expert_bias": False,
        "moe_router_score_function": "softmax",
        "norm_topk_prob": False,
        "num_attention_heads": 4,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "num_hidden_layers": layers,
        "num_key_value_heads": 4,
        "output_router_logits": False,
        "pad_token_id": ids["<|endoftext|>"],
        "partial_rotary_factor": 1.0,
        "qk_layernorm": True,
        "rms_norm_eps": 1e-5,
        "rope_scaling": None,
        "rope_theta": 50000,
        "routed_scaling_factor": 1,
        "router_aux_loss_coef": 0.01,
        "router_num_group": -2,
        "router_topk_group": -2,
        "shared_expert_intermediate_size": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.46.3",
        "use_cache": False,
        "vocab_size": vocab,
    }
    cfg.update(moe)
    return cfg


def random_state(cfg: dict, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random fp32 weights under the publisher's tensor names for ``cfg`` (norm weights near one, so
    a wrong norm shows; the expert bias non-zero, so a dropped bias shows)."""
    g = torch.Generator().manual_seed(seed)
    D, H, Hkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, V = D // H, cfg["vocab_size"]

    def w(*shape, scale=0.08):
        return torch.randn(*shape, generator=g) * scale

    def ones(n):
        return 1.0 + w(n, scale=0.1)

    state = {"model.embed_tokens.weight": w(V, D, scale=1.0), "model.norm.weight": ones(D)}
    state["lm_head.weight"] = w(V, D)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        state.update({p + "input_layernorm.weight": ones(D), p + "post_attention_layernorm.weight": ones(D)})
        for n, out in (("q", H * hd), ("k", Hkv * hd), ("v", Hkv * hd)):
            state[p + f"self_attn.{n}_proj.weight"] = w(out, D)
        state[p + "self_attn.o_proj.weight"] = w(D, H * hd)
        if cfg["qk_layernorm"]:
            state.update({p + "self_attn.q_norm.weight": ones(hd), p + "self_attn.k_norm.weight": ones(hd)})
        if cfg["moe_layer_freq"][i] == 0:
            state.update(_mlp(p + "mlp.", D, cfg["dense_intermediate_size"], w))
            continue
        E = cfg["num_experts"]
        state[p + "mlp.gate.weight"] = w(E, D, scale=0.5)
        for e in range(E):
            state.update(_mlp(p + f"mlp.experts.{e}.", D, cfg["expert_intermediate_size"], w))
        if cfg["moe_router_enable_expert_bias"]:
            state[p + "mlp.expert_bias"] = w(E, scale=0.05)
        if cfg["shared_expert_intermediate_size"]:
            state.update(_mlp(p + "shared_expert.", D, cfg["shared_expert_intermediate_size"], w))
    return state


def _mlp(prefix: str, dim: int, hidden: int, w) -> dict[str, torch.Tensor]:
    return {
        prefix + "gate_proj.weight": w(hidden, dim),
        prefix + "up_proj.weight": w(hidden, dim),
        prefix + "down_proj.weight": w(dim, hidden),
    }


def write_llada_moe(d: Path, cfg: dict, seed: int = 0) -> dict[str, torch.Tensor]:
    """config.json and the weights in three shards with their index, as published; returns the weights."""
    state = random_state(cfg, seed)
    names = sorted(state)
    weight_map = {}
    for i in range(3):
        fname = f"model-{i + 1:05d}-of-00003.safetensors"
        part = names[i::3]
        save_file({k: state[k].contiguous() for k in part}, str(d / fname), metadata={"format": "pt"})
        weight_map.update({k: fname for k in part})
    index = {"metadata": {"total_size": sum(t.numel() * 4 for t in state.values())}, "weight_map": weight_map}
    (d / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    (d / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return state
