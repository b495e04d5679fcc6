"""A tiny Fast-dLLM v2 directory: the publisher's file set and config.json keys, only the sizes shrunk.

Mirrors Efficient-Large-Model/Fast_dLLM_v2_7B as its model card and code describe it (NVlabs/Fast-dLLM
``v2/``; the card and ``modeling.py`` read in a public copy, docs/open-weights.md): Qwen2.5-7B-Instruct's
config.json keys plus ``bd_size`` 32, architectures ["Fast_dLLM_QwenForCausalLM"] and an auto_map to the
bundled ``configuration.py`` / ``modeling.py`` (present here, never run); Qwen2 keys with q/k/v bias,
an untied head; Qwen2.5's tokenizer with ``|<MASK>|`` added right after its added tokens (151665 in
the published vocabulary), eos ``<|im_end|>`` (the stop id 151645), pad ``<|endoftext|>``. The
weights are a random ``Qwen2ForCausalLM`` saved by transformers: Fast-dLLM v2's keys are Qwen2's.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tests.hf_models import (
    NEVER_RUN,
    QWEN25_ADDED,
    QWEN_TEMPLATE,
    _added_decoder,
    _published_tokenizer,
    _shape,
)

FAST_ADDED = [*QWEN25_ADDED, ("|<MASK>|", True)]
FAST_CODE = ("configuration.py", "modeling.py")


def _write(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n")


def make_fast_dllm(
    root: Path, name: str = "Fast_dLLM_v2_7B", *, dim: int = 64, layers: int = 2, ffn: int = 96
):
    """(directory, the transformers Qwen2 reference with the same weights)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    d = root / name
    d.mkdir(parents=True)
    ids = _published_tokenizer(d, FAST_ADDED, slow=False, fast=True)
    vocab = max(ids.values()) + 1 + 16  # padded past the tokenizer, as published (152064)
    torch.manual_seed(0)
    cfg = Qwen2Config(**_shape(dim, layers, ffn, vocab), rope_theta=1000000.0)
    cfg.tie_word_embeddings = False
    ref = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():  # non-trivial q/k/v biases, so the test sees them applied
        for layer in ref.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0.0, 0.2)
    ref.save_pretrained(d)
    eot, im_end = ids["<|endoftext|>"], ids["<|im_end|>"]
    raw = {
        "architectures": ["Fast_dLLM_QwenForCausalLM"],
        "auto_map": {
            "AutoConfig": "configuration.Fast_dLLM_QwenConfig",
            "AutoModel": "modeling.Fast_dLLM_QwenModel",
            "AutoModelForCausalLM": "modeling.Fast_dLLM_QwenForCausalLM",
        },
        "attention_dropout": 0.0,
        "bd_size": 32,
        "bos_token_id": eot,
        "eos_token_id": im_end,
        "hidden_act": "silu",
        **_shape(dim, layers, ffn, vocab),
        "max_position_embeddings": 32768,
        "max_window_layers": layers,
        "model_type": "Fast_dLLM_Qwen",
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "sliding_window": 131072,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "use_cache": True,
        "use_sliding_window": False,
    }
    _write(d / "config.json", raw)
    gen = {"bos_token_id": eot, "do_sample": True, "eos_token_id": [im_end, eot], "pad_token_id": eot}
    _write(d / "generation_config.json", {**gen, "temperature": 0.7, "top_p": 0.8, "top_k": 20})
    for f in FAST_CODE:
        (d / f).write_text(NEVER_RUN)
    tcfg = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None}
    tcfg.update(tokenizer_class="Qwen2Tokenizer", add_prefix_space=False, model_max_length=131072)
    tcfg.update(added_tokens_decoder=_added_decoder(FAST_ADDED, ids), errors="replace")
    tcfg.update(clean_up_tokenization_spaces=False, split_special_tokens=False, unk_token=None)
    tcfg["chat_template"] = QWEN_TEMPLATE
    _write(d / "tokenizer_config.json", tcfg)
    _write(d / "special_tokens_map.json", {k: tcfg[k] for k in ("eos_token", "pad_token")})
    return d, ref
