"""Tiny open-weight diffusion model directories in each family's exact on-disk layout, for tests.

Each is built with ``transformers`` (a test-only dependency): a randomly initialised
``Qwen2ForCausalLM`` or ``LlamaForCausalLM`` saved with ``save_pretrained``, then given the family's
config fields (and, for LLaDA, its OLMo-style config and weight names), plus a byte-level BPE
``tokenizer.json`` trained here whose special tokens sit at the ids the config names. The
``transformers`` model comes back too: it is the reference the parity tests compare against, run
with a full (non-causal) attention mask.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "import os\n\nfor name in os.listdir('.'):\n    print(name)\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
    "function greet(name) {\n  return `hello ${name}`;\n}\n",
    "def area(width, height):\n    return width * height\n",
] * 20

QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|beginoftext|>", "<|mask|>"]
LLADA_SPECIALS = ["<|endoftext|>", "<|startoftext|>", "<|eot_id|>", "<|mdm_mask|>"]
CHAT = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def train_tokenizer(specials: list[str], vocab: int = 320) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    return tok


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n")


def _shape(dim: int, layers: int, ffn: int, vocab: int, heads: int = 4, kv: int = 2) -> dict:
    return dict(
        vocab_size=vocab,
        hidden_size=dim,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        max_position_embeddings=2048,
        rms_norm_eps=1e-6,
    )


def make_dream(
    d: Path,
    *,
    tied: bool = False,
    chat: bool = True,
    shard: str | None = None,
    dim: int = 64,
    layers: int = 2,
    ffn: int = 96,
    vocab: int = 336,
    family: str = "dream",
):
    """A Dream-family directory (``family="open-dcoder"``: a plain qwen2 one with a mask token)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    tok = train_tokenizer(QWEN_SPECIALS)
    ids = {t: tok.token_to_id(t) for t in QWEN_SPECIALS}
    cfg = Qwen2Config(**_shape(dim, layers, ffn, vocab), rope_theta=10000.0, tie_word_embeddings=tied)
    model = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():  # random biases, so a loader that dropped them would fail parity
        for layer in model.model.layers:
            for p in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                p.bias.normal_(0, 0.1)
    model.save_pretrained(d, **({"max_shard_size": shard} if shard else {}))
    raw = json.loads((d / "config.json").read_text())
    raw.pop("rope_parameters", None)
    raw.update(rope_theta=10000.0, eos_token_id=ids["<|endoftext|>"], pad_token_id=ids["<|endoftext|>"])
    if family == "dream":
        raw.update(
            model_type="Dream",
            architectures=["DreamModel"],
            mask_token_id=ids["<|mask|>"],
            bos_token_id=ids["<|beginoftext|>"],
        )
    _write_json(d / "config.json", raw)
    tok.save(str(d / "tokenizer.json"))
    tcfg = {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "mask_token": "<|mask|>"}
    if chat:
        tcfg["chat_template"] = CHAT
    _write_json(d / "tokenizer_config.json", tcfg)
    return d, model


LLADA_NAMES = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "q_proj",
    "self_attn.k_proj": "k_proj",
    "self_attn.v_proj": "v_proj",
    "self_attn.o_proj": "attn_out",
    "post_attention_layernorm": "ff_norm",
    "mlp.gate_proj": "ff_proj",
    "mlp.up_proj": "up_proj",
    "mlp.down_proj": "ff_out",
}


def llada_name(name: str) -> str:
    """A LlamaForCausalLM tensor name as LLaDA's checkpoint spells it."""
    if name == "lm_head.weight":
        return "model.transformer.ff_out.weight"
    if name == "model.embed_tokens.weight":
        return "model.transformer.wte.weight"
    if name == "model.norm.weight":
        return "model.transformer.ln_f.weight"
    parts = name.split(".")  # model.layers.N.<module...>.weight
    inner = ".".join(parts[3:-1])
    return f"model.transformer.blocks.{parts[2]}.{LLADA_NAMES[inner]}.{parts[-1]}"


def make_llada(d: Path, *, dim: int = 64, layers: int = 2, ffn: int = 96, vocab: int = 336):
    """A LLaDA directory: OLMo-style config.json and weight names, no chat template."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    tok = train_tokenizer(LLADA_SPECIALS)
    ids = {t: tok.token_to_id(t) for t in LLADA_SPECIALS}
    cfg = LlamaConfig(**_shape(dim, layers, ffn, vocab), rope_theta=500000.0, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).eval()
    model.save_pretrained(d)
    state = load_file(str(d / "model.safetensors"))
    save_file({llada_name(k): v.contiguous() for k, v in state.items()}, str(d / "model.safetensors"))
    _write_json(
        d / "config.json",
        {
            "architectures": ["LLaDAModelLM"],
            "model_type": "llada",
            "activation_type": "silu",
            "block_type": "llama",
            "d_model": dim,
            "n_layers": layers,
            "n_heads": 4,
            "n_kv_heads": 2,
            "mlp_hidden_size": ffn,
            "max_sequence_length": 2048,
            "rope_theta": 500000.0,
            "rms_norm_eps": 1e-6,
            "layer_norm_type": "rms",
            "include_bias": False,
            "weight_tying": False,
            "vocab_size": vocab,
            "embedding_size": vocab,
            "mask_token_id": ids["<|mdm_mask|>"],
            "eos_token_id": ids["<|endoftext|>"],
            "pad_token_id": ids["<|endoftext|>"],
        },
    )
    tok.save(str(d / "tokenizer.json"))
    _write_json(d / "tokenizer_config.json", {"eos_token": "<|endoftext|>", "bos_token": "<|startoftext|>"})
    return d, model


def full_attention_logits(model, ids: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    """The transformers model's logits [B, L, V] with full (non-causal) attention over each row's
    first ``lens[b]`` tokens: a 4D float mask of zeros, -inf on padding keys."""
    B, L = ids.shape
    keep = torch.arange(L)[None, :] < lens[:, None]  # [B, L]
    mask = torch.zeros(B, 1, L, L)
    mask.masked_fill_(~keep[:, None, None, :], float("-inf"))
    with torch.no_grad():
        return model(ids, attention_mask=mask).logits
