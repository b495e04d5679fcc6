"""A tiny LLaDA2.0-mini / LLaDA2.1-mini directory: the publisher's file set, config.json keys and
tensor names, only the sizes shrunk (docs/open-weights.md, "LLaDA2.0 and LLaDA2.1").

The config.json keys are those of huggingface.co/inclusionAI/LLaDA2.1-mini ``config.json`` (read
through the search tool's docs corpus) and of inclusionAI/dFactory @92b6890
``configs/model_configs/llada2_mini/config.json``; the file set is the one the Hugging Face commit
listing of LLaDA2.0-mini-preview shows (config, configuration and modeling code, generation config,
shards and their index, special tokens map, tokenizer.json, tokenizer_config.json). The tensor
names are the publisher's module paths (dFactory ``models/llada2_moe/modeling_llada2_moe.py``):
``model.word_embeddings``, ``model.layers.N.attention.{query_key_value,query_layernorm,
key_layernorm,dense}``, ``mlp.{gate,up,down}_proj`` on the dense first layer, ``mlp.gate.weight``,
``mlp.gate.expert_bias``, ``mlp.experts.E.*``, ``mlp.shared_experts.*`` after it, ``model.norm``,
``lm_head``. The Ling tokenizer's added tokens and chat template are tests/hf_llada_moe.py's (not
verified against the published tokenizer_config.json). The weights are random.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from tests.hf_llada_moe import LLADA_MOE_ADDED, LLADA_MOE_TEMPLATE
from tests.hf_models import NEVER_RUN, _added_decoder, _published_tokenizer

LLADA2_CODE = ("configuration_llada2_moe.py", "modeling_llada2_moe.py")


def llada2_config(vocab: int, ids: dict[str, int], **changes) -> dict:
    """config.json with the published keys; the shape shrunk (3 layers, the first dense)."""
    cfg = {
        "architectures": ["LLaDA2MoeModelLM"],
        "attention_dropout": 0.0,
        "auto_map": {
            "AutoConfig": "configuration_llada2_moe.LLaDA2MoeConfig",
            "AutoModel": "modeling_llada2_moe.LLaDA2MoeModel",
            "AutoModelForCausalLM": "modeling_llada2_moe.LLaDA2MoeModelLM",
        },
        "dtype": "bfloat16",
        "embedding_dropout": 0.0,
        "first_k_dense_replace": 1,
        "head_dim": 32,
        "hidden_act": "silu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 96,
        "max_position_embeddings": 32768,
        "max_window_layers": 28,
        "model_type": "llada2_moe",
        "moe_intermediate_size": 16,
        "moe_router_enable_expert_bias": True,
        "n_group": 4,
        "norm_head": False,
        "norm_softmax": False,
        "norm_topk_prob": True,
        "num_attention_heads": 4,
        "num_experts": 16,
        "num_experts_per_tok": 4,
        "num_hidden_layers": 3,
        "num_key_value_heads": 2,
        "num_shared_experts": 1,
        "output_dropout": 0.0,
        "output_router_logits": False,
        "pad_token_id": ids["<|endoftext|>"],
        "partial_rotary_factor": 0.5,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 600000,
        "rotary_dim": 16,
        "routed_scaling_factor": 2.5,
        "router_dtype": "fp32",
        "score_function": "sigmoid",
        "sliding_window": 4096,
        "tie_word_embeddings": False,
        "topk_group": 2,
        "transformers_version": "4.57.1",
        "use_bias": False,
        "use_cache": False,
        "use_qkv_bias": False,
        "use_rmsnorm": True,
        "use_sliding_window": False,
        "vocab_size": vocab,
    }
    cfg.update(changes)
    return cfg


def llada2_state(cfg: dict, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random fp32 weights under the publisher's names (norms near one, the expert bias non-zero; a
    head scaled so some predictions clear the decoding thresholds)."""
    g = torch.Generator().manual_seed(seed)
    D, H, Hkv, hd = (
        cfg["hidden_size"],
        cfg["num_attention_heads"],
        cfg["num_key_value_heads"],
        cfg["head_dim"],
    )
    V, E = cfg["vocab_size"], cfg["num_experts"]

    def w(*shape, scale=0.08):
        return torch.randn(*shape, generator=g) * scale

    def ones(n):
        return 1.0 + w(n, scale=0.1)

    def mlp(prefix: str, hidden: int) -> dict[str, torch.Tensor]:
        return {
            prefix + "gate_proj.weight": w(hidden, D),
            prefix + "up_proj.weight": w(hidden, D),
            prefix + "down_proj.weight": w(D, hidden),
        }

    state = {"model.word_embeddings.weight": w(V, D, scale=1.0), "model.norm.weight": ones(D)}
    state["lm_head.weight"] = w(V, D, scale=0.6)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        state.update({p + "input_layernorm.weight": ones(D), p + "post_attention_layernorm.weight": ones(D)})
        state[p + "attention.query_key_value.weight"] = w((H + 2 * Hkv) * hd, D)
        state[p + "attention.query_layernorm.weight"] = ones(hd)
        state[p + "attention.key_layernorm.weight"] = ones(hd)
        state[p + "attention.dense.weight"] = w(D, H * hd)
        if i < cfg["first_k_dense_replace"]:
            state.update(mlp(p + "mlp.", cfg["intermediate_size"]))
            continue
        state[p + "mlp.gate.weight"] = w(E, D, scale=0.5)
        state[p + "mlp.gate.expert_bias"] = w(E, scale=0.05)
        for e in range(E):
            state.update(mlp(p + f"mlp.experts.{e}.", cfg["moe_intermediate_size"]))
        shared = cfg["moe_intermediate_size"] * cfg["num_shared_experts"]
        state.update(mlp(p + "mlp.shared_experts.", shared))
    return state


def _write(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n")


def make_llada2(root: Path, name: str = "LLaDA2.0-mini", **changes) -> tuple[Path, dict, dict]:
    """(directory, the weights under the publisher's names, config.json)."""
    d = root / name
    d.mkdir(parents=True)
    ids = _published_tokenizer(d, LLADA_MOE_ADDED, slow=False, fast=True)
    vocab = max(ids.values()) + 1 + 16  # padded past the tokenizer, as published (157184)
    cfg = llada2_config(vocab, ids, **changes)
    state = llada2_state(cfg)
    names = sorted(state)
    weight_map = {}
    for i in range(2):
        fname = f"model-{i + 1:05d}-of-00002.safetensors"
        save_file({k: state[k].contiguous() for k in names[i::2]}, str(d / fname), metadata={"format": "pt"})
        weight_map.update({k: fname for k in names[i::2]})
    total = sum(t.numel() * 4 for t in state.values())
    _write(d / "model.safetensors.index.json", {"metadata": {"total_size": total}, "weight_map": weight_map})
    _write(d / "config.json", cfg)
    eot = ids["<|endoftext|>"]
    _write(
        d / "generation_config.json",
        {"bos_token_id": ids["<|startoftext|>"], "eos_token_id": eot, "pad_token_id": eot},
    )
    for f in LLADA2_CODE:
        (d / f).write_text(NEVER_RUN)
    tcfg = {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}
    tcfg.update(mask_token="<|mask|>", cls_token="[CLS]", add_bos_token=False)
    tcfg.update(tokenizer_class="PreTrainedTokenizerFast", chat_template=LLADA_MOE_TEMPLATE)
    tcfg.update(added_tokens_decoder=_added_decoder(LLADA_MOE_ADDED, ids), model_max_length=32768)
    tcfg.update(clean_up_tokenization_spaces=False, unk_token=None)
    _write(d / "tokenizer_config.json", tcfg)
    names_map = {k: tcfg[k] for k in ("bos_token", "eos_token", "pad_token", "mask_token", "cls_token")}
    _write(d / "special_tokens_map.json", names_map)
    return d, state, cfg
