"""A tiny SDAR-4B-Chat directory: the publisher's file set and config.json keys, only the sizes shrunk.

Mirrors JetAstra/SDAR @c2041a8 ``training/model/SDAR-4B-Chat/`` (read with git show): config.json
with model_type "sdar", architectures ["SDARForCausalLM"], the auto_map to ``configuration_sdar`` /
``modeling_sdar`` (present here, never run), ``block_size`` 4 and ``mask_token_id`` (the tokenizer's
``<|MASK|>``), an untied head, Qwen3 keys with q_norm/k_norm; generation_config.json with
eos [<|im_end|>, <|endoftext|>]; a Qwen2-class tokenizer whose added tokens follow Qwen3's order
(the FIM tokens, then <tool_response>, <think> and <|MASK|> last), eos = pad = <|endoftext|>.
The weights are a random ``Qwen3ForCausalLM`` saved by transformers: SDAR's keys are Qwen3's.
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

SDAR_ADDED = [
    *QWEN25_ADDED,
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
    ("<|MASK|>", False),  # special: false in added_tokens_decoder, as published
]
SDAR_CODE = ("configuration_sdar.py", "modeling_sdar.py", "tokenization_qwen2.py")


def _write(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n")


def make_sdar(root: Path, name: str = "SDAR-4B-Chat", *, dim: int = 64, layers: int = 2, ffn: int = 96):
    """(directory, the transformers Qwen3 reference with the same weights)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    d = root / name
    d.mkdir(parents=True)
    ids = _published_tokenizer(d, SDAR_ADDED, slow=False, fast=True)
    vocab = max(ids.values()) + 1 + 16  # padded past the tokenizer, as published (151936)
    torch.manual_seed(0)
    cfg = Qwen3Config(**_shape(dim, layers, ffn, vocab), head_dim=32, rope_theta=1000000.0)
    cfg.tie_word_embeddings = False
    ref = Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():  # non-trivial QK norms, so the test sees them applied
        for layer in ref.model.layers:
            layer.self_attn.q_norm.weight.normal_(1.0, 0.2)
            layer.self_attn.k_norm.weight.normal_(1.0, 0.2)
    ref.save_pretrained(d)
    eot = ids["<|endoftext|>"]
    raw = {
        "architectures": ["SDARForCausalLM"],
        "auto_map": {
            "AutoConfig": "configuration_sdar.SDARConfig",
            "AutoModel": "modeling_sdar.SDARModel",
            "AutoModelForCausalLM": "modeling_sdar.SDARForCausalLM",
        },
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_implementation": "flex_attention",
        "bos_token_id": eot,
        "eos_token_id": eot,
        "block_size": 4,
        "mask_token_id": ids["<|MASK|>"],
        "fuse_cross_entropy": True,
        "head_dim": 32,
        "hidden_act": "silu",
        **_shape(dim, layers, ffn, vocab),
        "max_position_embeddings": 32768,
        "model_type": "sdar",
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "use_cache": False,
        "use_sliding_window": False,
    }
    _write(d / "config.json", raw)
    gen = {"bos_token_id": eot, "do_sample": True, "eos_token_id": [ids["<|im_end|>"], eot]}
    _write(d / "generation_config.json", {**gen, "pad_token_id": eot, "temperature": 0.6, "top_k": 20})
    for f in SDAR_CODE:
        (d / f).write_text(NEVER_RUN)
    tcfg = {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "mask_token": "<|MASK|>"}
    tcfg.update(tokenizer_class="Qwen2Tokenizer", add_bos_token=False, model_max_length=131072)
    tcfg.update(added_tokens_decoder=_added_decoder(SDAR_ADDED, ids), errors="replace")
    tcfg.update(additional_special_tokens=["<|MASK|>"], clean_up_tokenization_spaces=False, unk_token=None)
    tcfg["auto_map"] = {"AutoTokenizer": ["tokenization_qwen2.Qwen2Tokenizer", None]}
    _write(d / "tokenizer_config.json", tcfg)
    (d / "chat_template.jinja").write_text(QWEN_TEMPLATE)
    _write(d / "added_tokens.json", {("<MASK>" if c == "<|MASK|>" else c): ids[c] for c, _ in SDAR_ADDED})
    _write(d / "special_tokens_map.json", {k: tcfg[k] for k in ("eos_token", "pad_token", "mask_token")})
    return d, ref
