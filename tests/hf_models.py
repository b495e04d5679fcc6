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

from tests.hf_llada_moe import (
    LLADA_MOE_ADDED,
    LLADA_MOE_CODE,
    LLADA_MOE_TEMPLATE,
    llada_moe_config,
    write_llada_moe,
)

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


def _shape(
    dim: int, layers: int, ffn: int, vocab: int, heads: int = 4, kv: int = 2, eps: float = 1e-6
) -> dict:
    return dict(
        vocab_size=vocab,
        hidden_size=dim,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        max_position_embeddings=2048,
        rms_norm_eps=eps,
    )


# LLaDA-8B is plain multi-head attention (n_kv_heads = n_heads = 32) with RMSNorm eps 1e-5 and a
# 4096-token window; the tiny copies keep those and shrink only the sizes.
LLADA_HEADS = 4
LLADA_EPS = 1e-5


def _llada_reference(dim: int, layers: int, ffn: int, vocab: int):
    """The transformers model a LLaDA fixture's weights come from: Llama with LLaDA's shape rules."""
    from transformers import LlamaConfig, LlamaForCausalLM

    shape = _shape(dim, layers, ffn, vocab, heads=LLADA_HEADS, kv=LLADA_HEADS, eps=LLADA_EPS)
    cfg = LlamaConfig(**shape, rope_theta=500000.0, tie_word_embeddings=False)
    return LlamaForCausalLM(cfg).eval()


def llada_config(dim: int, layers: int, ffn: int, vocab: int, ids: dict[str, int]) -> dict:
    """LLaDA-8B-Instruct's ``config.json`` keys and values with the sizes shrunk (the key set of the
    published OLMo-style config: docs/open-weights.md)."""
    return {
        "activation_type": "silu",
        "alibi": False,
        "alibi_bias_max": 8.0,
        "architectures": ["LLaDAModelLM"],
        "attention_dropout": 0.0,
        "attention_layer_norm": False,
        "attention_layer_norm_with_affine": True,
        "auto_map": {
            "AutoConfig": "configuration_llada.LLaDAConfig",
            "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM",
            "AutoModel": "modeling_llada.LLaDAModelLM",
        },
        "bias_for_layer_norm": False,
        "block_group_size": 1,
        "block_type": "llama",
        "d_model": dim,
        "embedding_dropout": 0.0,
        "embedding_size": vocab,
        "eos_token_id": ids["<|endoftext|>"],
        "flash_attention": False,
        "include_bias": False,
        "include_qkv_bias": False,
        "init_cutoff_factor": None,
        "init_device": "meta",
        "init_fn": "mitchell",
        "init_std": 0.02,
        "input_emb_norm": False,
        "layer_norm_type": "rms",
        "layer_norm_with_affine": True,
        "mask_token_id": ids["<|mdm_mask|>"],
        "max_sequence_length": 4096,
        "mlp_hidden_size": ffn,
        "mlp_ratio": 4,
        "model_type": "llada",
        "multi_query_attention": None,
        "n_heads": LLADA_HEADS,
        "n_kv_heads": LLADA_HEADS,
        "n_layers": layers,
        "pad_token_id": ids["<|endoftext|>"],
        "precision": "amp_bf16",
        "residual_dropout": 0.0,
        "rms_norm_eps": LLADA_EPS,
        "rope": True,
        "rope_full_precision": True,
        "rope_theta": 500000.0,
        "scale_logits": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.46.3",
        "use_cache": False,
        "vocab_size": vocab,
        "weight_tying": False,
    }


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
    torch.manual_seed(0)
    tok = train_tokenizer(LLADA_SPECIALS)
    ids = {t: tok.token_to_id(t) for t in LLADA_SPECIALS}
    model = _llada_reference(dim, layers, ffn, vocab)
    model.save_pretrained(d)
    state = load_file(str(d / "model.safetensors"))
    save_file({llada_name(k): v.contiguous() for k, v in state.items()}, str(d / "model.safetensors"))
    _write_json(d / "config.json", llada_config(dim, layers, ffn, vocab, ids))
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


# ---- directories laid out file for file as their publishers ship them (docs/open-weights.md) ------
# Added tokens of Qwen2.5's tokenizer, in id order after its vocabulary: (content, special).
QWEN25_ADDED = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    *[(f"<|{n}|>", True) for n in ("object_ref_start", "object_ref_end", "box_start", "box_end")],
    *[(f"<|{n}|>", True) for n in ("quad_start", "quad_end", "vision_start", "vision_end")],
    *[(f"<|{n}|>", True) for n in ("vision_pad", "image_pad", "video_pad")],
    ("<tool_call>", False),
    ("</tool_call>", False),
    *[(f"<|{n}|>", False) for n in ("fim_prefix", "fim_middle", "fim_suffix", "fim_pad", "repo_name")],
    ("<|file_sep|>", False),
]
DREAM_ADDED = [*QWEN25_ADDED, ("<|beginoftext|>", True), ("<|mask|>", True)]
DIFFUCODER_ADDED = [*DREAM_ADDED, ("<|dlm_pad|>", True)]
DREAMON_ADDED = [*DREAM_ADDED, ("<|expand|>", True)]  # right after the mask (151666 -> 151667)
OPEN_DCODER_ADDED = [*QWEN25_ADDED, ("<|mask|>", True)]
LLADA_ADDED = [
    ("<|startoftext|>", True),
    ("<|endoftext|>", True),
    ("<|mdm_mask|>", True),
    ("<|start_header_id|>", True),
    ("<|end_header_id|>", True),
    ("<|eot_id|>", True),
]
# Chat templates written for these fixtures in the publishers' shapes: a default system turn and
# ``continue`` (loopcontrols) for the Qwen form, ``raise_exception`` and ``| trim`` for LLaDA's.
QWEN_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}\n"
    "{%- for message in messages %}{%- if message.role == 'system' and loop.first %}{% continue %}"
    "{%- endif %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}\n{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}\n"
)
LLADA_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('roles are system, user and assistant') }}{% endif %}"
    "<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>"
    "{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
NEVER_RUN = 'raise RuntimeError("code from a model directory must never run")\n'
DREAM_CODE = ("configuration_dream.py", "modeling_dream.py", "generation_utils.py", "tokenization_dream.py")
LLADA_CODE = ("configuration_llada.py", "modeling_llada.py")

# name -> how the publisher ships it (sources per row: docs/open-weights.md)
PUBLISHED = {
    "Dream-v0-Instruct-7B": dict(kind="dream", added=DREAM_ADDED, pad="<|endoftext|>", template="config"),
    "Dream-Coder-v0-Instruct-7B": dict(
        kind="dream", added=DREAM_ADDED, pad="<|endoftext|>", template="config"
    ),
    "DiffuCoder-7B-Base": dict(
        kind="dream", added=DIFFUCODER_ADDED, pad="<|dlm_pad|>", template="jinja", added_json=True
    ),
    "DiffuCoder-7B-Instruct": dict(
        kind="dream", added=DIFFUCODER_ADDED, pad="<|dlm_pad|>", template="jinja", added_json=True
    ),
    "DreamOn-v0-7B": dict(
        kind="dream",
        added=DREAMON_ADDED,
        pad="<|endoftext|>",
        template="config",
        added_json=True,
        expand=True,
    ),
    "Open-dCoder-0.5B": dict(
        kind="open-dcoder", added=OPEN_DCODER_ADDED, pad="<|endoftext|>", template="config"
    ),
    "LLaDA-8B-Instruct": dict(kind="llada", added=LLADA_ADDED, pad="<|endoftext|>", template="config"),
    "LLaDA-1.5": dict(kind="llada", added=LLADA_ADDED, pad="<|endoftext|>", template="config"),
    "LLaDA-MoE-7B-A1B-Base": dict(
        kind="llada-moe", added=LLADA_MOE_ADDED, pad="<|endoftext|>", template="config"
    ),
    "LLaDA-MoE-7B-A1B-Instruct": dict(
        kind="llada-moe", added=LLADA_MOE_ADDED, pad="<|endoftext|>", template="config"
    ),
}


def _qwen2_pretokenizer():
    from tokenizers import Regex, normalizers

    from editserver.model.infer.hf.tokenizer import QWEN2_SPLIT

    split = pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False)
    return normalizers.NFC(), pre_tokenizers.Sequence(
        [split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )


def _published_tokenizer(d: Path, added: list[tuple[str, bool]], slow: bool, fast: bool) -> dict[str, int]:
    """A BPE trained here, saved as vocab.json + merges.txt (``slow``) and/or tokenizer.json (``fast``);
    the added tokens sit right after the vocabulary, in order. Returns their ids."""
    from tokenizers import AddedToken

    norm, pre = _qwen2_pretokenizer()
    tok = Tokenizer(models.BPE())
    tok.normalizer, tok.pre_tokenizer, tok.decoder = norm, pre, decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    n = tok.get_vocab_size()
    ids = {c: n + k for k, (c, _) in enumerate(added)}
    if slow:
        tok.model.save(str(d))  # vocab.json, merges.txt
    for c, special in added:
        tok.add_tokens([AddedToken(c, special=special, normalized=False)])
    if fast:
        tok.save(str(d / "tokenizer.json"))
    return ids


def _added_decoder(added: list[tuple[str, bool]], ids: dict[str, int]) -> dict:
    return {
        str(ids[c]): dict(
            content=c, lstrip=False, normalized=False, rstrip=False, single_word=False, special=s
        )
        for c, s in added
    }


def make_published(root: Path, name: str, *, dim: int = 64, layers: int = 2, ffn: int = 96):
    """A tiny random copy of a published directory: its file set, config.json and tokenizer_config.json
    keys, special tokens and template location; only the sizes shrink. Returns (dir, reference model)."""
    spec = PUBLISHED[name]
    d = root / name
    d.mkdir(parents=True)
    kind, added = spec["kind"], spec["added"]
    ids = _published_tokenizer(d, added, slow=kind == "dream", fast=kind != "dream")
    vocab = max(ids.values()) + 1 + 16  # the embedding is padded past the tokenizer, as published
    torch.manual_seed(0)
    if kind == "llada":
        ref = _llada_weights(d, dim, layers, ffn, vocab)
        raw = llada_config(dim, layers, ffn, vocab, ids)
        code = LLADA_CODE
        tcfg = {"bos_token": "<|startoftext|>", "eos_token": "<|eot_id|>", "pad_token": "<|endoftext|>"}
        tcfg["tokenizer_class"] = "PreTrainedTokenizerFast"
        template = LLADA_TEMPLATE
    elif kind == "llada-moe":
        raw = llada_moe_config(dim, layers, ffn, vocab, ids)
        ref = write_llada_moe(d, raw)  # the weights: the reference of tests/model/test_llada_moe.py
        code = LLADA_MOE_CODE
        tcfg = {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}
        tcfg.update(mask_token="<|mask|>", cls_token="[CLS]", add_bos_token=False)
        tcfg["tokenizer_class"] = "PreTrainedTokenizerFast"
        template = LLADA_MOE_TEMPLATE
    else:
        from transformers import Qwen2Config, Qwen2ForCausalLM

        cfg = Qwen2Config(
            **_shape(dim, layers, ffn, vocab), rope_theta=1000000.0, tie_word_embeddings=kind != "dream"
        )
        ref = Qwen2ForCausalLM(cfg).eval()
        with torch.no_grad():
            for layer in ref.model.layers:
                for p in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    p.bias.normal_(0, 0.1)
        ref.save_pretrained(d, **({"max_shard_size": "100KB"} if kind == "dream" else {}))
        raw = json.loads((d / "config.json").read_text())
        raw.pop("rope_parameters", None)
        raw.update(rope_theta=1000000.0, max_position_embeddings=32768 if kind != "dream" else 131072)
        eot = ids["<|endoftext|>"]
        raw.update(eos_token_id=eot, pad_token_id=eot, bos_token_id=eot)
        if kind == "dream":
            raw.update(model_type="Dream", architectures=["DreamModel"], mask_token_id=ids["<|mask|>"])
            if spec.get("expand"):  # DreamOn: the id its sampler reads from the config (docs/open-weights.md)
                raw["expand_token_id"] = ids["<|expand|>"]
            raw["auto_map"] = {
                "AutoConfig": "configuration_dream.DreamConfig",
                "AutoModel": "modeling_dream.DreamModel",
            }
            code = DREAM_CODE
            tcfg = {"bos_token": "<|beginoftext|>", "eos_token": "<|endoftext|>", "pad_token": spec["pad"]}
            tcfg.update(mask_token="<|mask|>", tokenizer_class="DreamTokenizer")
            tcfg["auto_map"] = {"AutoTokenizer": ["tokenization_dream.DreamTokenizer", None]}
        else:
            code = ()
            tcfg = {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "mask_token": "<|mask|>"}
            tcfg["tokenizer_class"] = "Qwen2Tokenizer"
        template = QWEN_TEMPLATE
    _write_json(d / "config.json", raw)
    _write_json(
        d / "generation_config.json",
        {"eos_token_id": raw["eos_token_id"], "pad_token_id": raw["pad_token_id"]},
    )
    for f in code:
        (d / f).write_text(NEVER_RUN)
    tcfg.update(added_tokens_decoder=_added_decoder(added, ids), model_max_length=131072, errors="replace")
    tcfg.update(clean_up_tokenization_spaces=False, split_special_tokens=False, unk_token=None)
    if spec["template"] == "jinja":
        (d / "chat_template.jinja").write_text(template)
    else:
        tcfg["chat_template"] = template
    _write_json(d / "tokenizer_config.json", tcfg)
    if spec.get("added_json"):  # content -> id of every added token, as transformers' save writes it
        _write_json(d / "added_tokens.json", {c: ids[c] for c, _ in added})
    names = {k: v for k, v in tcfg.items() if k in ("bos_token", "eos_token", "pad_token", "mask_token")}
    _write_json(d / "special_tokens_map.json", names)
    return d, ref


def _llada_weights(d: Path, dim: int, layers: int, ffn: int, vocab: int):
    """A LlamaForCausalLM saved under LLaDA's tensor names, in six shards as LLaDA-8B ships."""
    ref = _llada_reference(dim, layers, ffn, vocab)
    state = {llada_name(k): v.contiguous() for k, v in ref.state_dict().items()}
    names = sorted(state)
    shards = [names[i::6] for i in range(6)]
    weight_map = {}
    for i, part in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-00006.safetensors"
        save_file({k: state[k] for k in part}, str(d / fname), metadata={"format": "pt"})
        weight_map.update({k: fname for k in part})
    _write_json(d / "model.safetensors.index.json", {"metadata": {}, "weight_map": weight_map})
    return ref
