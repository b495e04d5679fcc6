"""A tiny Stable-DiffCoder-8B directory: the publisher's file set and config.json keys, only the sizes shrunk.

Mirrors ByteDance-Seed/Stable-DiffCoder-8B-{Base,Instruct} as published for transformers 5.3 (HF
``config.json`` of the Base at main and its commit 4656ed0 "Sync changes from Instruct model", the
file list of the duplicated repositories; docs/open-weights.md): config.json with model_type "llama",
architectures ["StableDiffcoderForCausalLM"] and an auto_map to ``modeling_stable_diffcoder`` (present
here, never run), bos 0, eos 2, no block size or mask id; four weight shards named by an index (here:
one ``model.safetensors``, as transformers saves a small model); ``special_tokens_map.json``,
``tokenizer.json`` and ``tokenizer_config.json``. The weights are a random ``LlamaForCausalLM`` saved by
transformers: Stable-DiffCoder's class subclasses it, so its keys are Llama's.

Unchecked (no publisher's tokenizer file was readable): the special tokens' spellings (Seed-Coder's as
third-party Seed-Coder clients write them; ``<[MASK_TOKEN]>`` at 5 as third-party Stable-DiffCoder
code does), the ids of the FIM tags and of the pad token, and the chat
template, which follows Seed-Coder-8B-Instruct's shape as a public copy has it (``bos role\\n content
eos``, the generation prompt ``bos assistant\\n``). The Instruct's tokenizer_config.json carries the
template (one line more than the Base's); a Base has none. ``fim=False`` leaves the FIM tags out (the
chat-route fallback).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tests.hf_models import NEVER_RUN, _shape, train_tokenizer

BOS, PAD, EOS, MASK = "<[begin▁of▁sentence]>", "<[PAD▁TOKEN]>", "<[end▁of▁sentence]>", "<[MASK_TOKEN]>"
FIM = ("<[fim-suffix]>", "<[fim-prefix]>", "<[fim-middle]>")
# ids 0..6: bos 0 and eos 2 as config.json names them, the mask at 5 (generate_block's mask_id)
SPECIALS = [BOS, PAD, EOS, FIM[0], FIM[1], MASK, FIM[2]]
SEED_TEMPLATE = (
    "{% for message in messages %}"
    "{{ bos_token + message['role'] + '\\n' + message['content'] | trim + eos_token }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ bos_token + 'assistant\\n' }}{% endif %}"
)
CODE = ("modeling_stable_diffcoder.py",)


def _write(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n")


def make_stable_diffcoder(
    root: Path,
    name: str = "Stable-DiffCoder-8B-Instruct",
    *,
    fim: bool = True,
    dim: int = 64,
    layers: int = 2,
    ffn: int = 96,
):
    """(directory, the transformers Llama reference with the same weights)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    d = root / name
    d.mkdir(parents=True)
    specials = SPECIALS if fim else [t if t not in FIM else f"<[unused{i}]>" for i, t in enumerate(SPECIALS)]
    tok = train_tokenizer(specials)
    tok.save(str(d / "tokenizer.json"))
    vocab = tok.get_vocab_size() + 16  # padded past the tokenizer, as published (155136)
    torch.manual_seed(0)
    shape = _shape(dim, layers, ffn, vocab)
    cfg = LlamaConfig(**shape, rope_theta=500000.0, attention_bias=False, mlp_bias=False)
    cfg.tie_word_embeddings, cfg.bos_token_id, cfg.eos_token_id = False, 0, 2
    ref = LlamaForCausalLM(cfg).eval()
    ref.save_pretrained(d)
    (d / "generation_config.json").unlink(missing_ok=True)  # the published file set has none
    raw = {
        "architectures": ["StableDiffcoderForCausalLM"],
        "auto_map": {
            "AutoModel": "modeling_stable_diffcoder.StableDiffcoderForCausalLM",
            "AutoModelForCausalLM": "modeling_stable_diffcoder.StableDiffcoderForCausalLM",
        },
        "attention_bias": False,
        "attention_dropout": 0.1,
        "bos_token_id": 0,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "initializer_range": 0.009882118,
        "layer_norm_eps": None,
        **shape,
        "max_position_embeddings": 8192,
        "mlp_bias": False,
        "model_type": "llama",
        "resid_pdrop": 0.1,
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "transformers_version": "5.3.0",
        "use_cache": True,
    }
    _write(d / "config.json", raw)
    for f in CODE:
        (d / f).write_text(NEVER_RUN)
    added = {
        str(i): dict(content=c, lstrip=False, normalized=False, rstrip=False, single_word=False, special=True)
        for i, c in enumerate(specials)
    }
    tcfg = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD, "mask_token": MASK}
    tcfg.update(added_tokens_decoder=added, clean_up_tokenization_spaces=False, model_max_length=8192)
    tcfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    if "base" not in name.lower():
        tcfg["chat_template"] = SEED_TEMPLATE
    _write(d / "tokenizer_config.json", tcfg)
    _write(
        d / "special_tokens_map.json",
        {k: tcfg[k] for k in ("bos_token", "eos_token", "pad_token", "mask_token")},
    )
    return d, ref
