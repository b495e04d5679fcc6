"""Open-weight diffusion model families: what config.json says, and how each family's weights map to ours.

Design decisions:
- A family is detected from ``config.json`` alone (``model_type``/``architectures``), plus the
  tokenizer's mask token for a Qwen2-layout directory. Anything else is refused with the list of
  supported families; nothing from the directory is ever imported or run (no remote code).
- One ``OpenConfig`` describes every family to our own transformer (model/infer/hf/model.py): the
  shapes, the rotary base, whether q/k/v carry a bias, whether logits are shifted (position i
  predicts token i + 1) and the special ids.
- Weight names are rewritten to one internal layout (the Qwen2 names without the ``model.`` prefix)
  by a per-family function, so the loader and the module know no family.

What was checked against the published files (2026-12-02, read through the search tool, nothing copied):
- Dream / Dream-Coder / DiffuCoder (``configuration_dream.py``, ``modeling_dream.py``,
  ``generation_utils.py``): model_type "Dream", architectures ["DreamModel"], Qwen2 blocks
  (q/k/v bias, RMSNorm, rotary with ``rope_theta`` from the config, GQA, SwiGLU), weights
  ``model.embed_tokens``, ``model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj,
  post_attention_layernorm, mlp.{gate,up,down}_proj}``, ``model.norm``, ``lm_head`` (absent when
  ``tie_word_embeddings``); mask 151666, end of text 151643 (also the pad), turn end 151645;
  DiffuCoder pads with its own ``<|dlm_pad|>`` (its ``pad_token_id``). Generation shifts logits one
  to the right (``cat([logits[:, :1], logits[:, :-1]])``): the answer at position i is read from i - 1.
- LLaDA / LLaDA-1.5 (``configuration_llada.py``, ``modeling_llada.py``): model_type "llada",
  architectures ["LLaDAModelLM"], OLMo names ``d_model, n_layers, n_heads, n_kv_heads,
  mlp_hidden_size, rope_theta, rms_norm_eps, max_sequence_length, include_bias, weight_tying,
  embedding_size``; weights ``model.transformer.{wte, blocks.N.{attn_norm, q_proj, k_proj, v_proj,
  attn_out, ff_norm, ff_proj, up_proj, ff_out}, ln_f, ff_out}``; the block computes
  ``ff_out(silu(ff_proj(x)) * up_proj(x))``; mask 126336, end of text 126081; logits not shifted.
- DreamOn (Dream-org/DreamOn-v0-7B, a Dream-Coder fine-tune; docs/open-weights.md, DreamOn): a Dream
  directory whose config.json names ``expand_token_id`` or whose tokenizer holds ``<|expand|>`` (151667,
  right after the mask). Never by model_type alone: it says "Dream" like every Dream model.
- Open-dCoder: a plain Qwen2 directory (model_type "qwen2") whose tokenizer holds a mask token;
  shifted like Dream (it continues a causal Qwen2.5-Coder).
- SDAR / TraDo (JetAstra/SDAR @c2041a8 ``training/model/SDAR-4B-Chat/config.json``, read with git show):
  model_type "sdar", architectures ["SDARForCausalLM"], Qwen3 keys (q_norm/k_norm per head before the
  rotary, no q/k/v bias), untied head; the config itself names ``block_size`` 4 and ``mask_token_id``
  151669 (an older ``config copy.json`` has neither, so both fall back to the tokenizer's
  ``<|MASK|>`` and 4). Logits are not shifted. Attention is block-causal on an absolute grid from
  position 0 (``cfg.block_size``, model/infer/hf/model.py). A repository named ``-b8`` ... ``-b64``
  was fine-tuned at that block (SDAR README), and the serve option ``--block-size`` overrides both.
- Fast-dLLM v2 (NVlabs/Fast-dLLM ``v2/``; the HF repos Efficient-Large-Model/Fast_dLLM_v2_1.5B and
  _7B): Qwen2.5-Instruct with plain Qwen2 keys (q/k/v bias, no QK norm), the block in config.json as
  ``bd_size`` (32), mask id 151665 (``FAST_DLLM_MASK_ID`` in ``v2/generation_functions.py``; not in
  the config), logits shifted (position j read from j - 1, the first of a block from the previous
  block's last position). Recognised by its architectures (``Fast_dLLM_QwenForCausalLM``), an
  auto_map naming Fast_dLLM, or ``bd_size``: never by model_type alone, which third-party copies
  spell ``Fast_dLLM_Qwen`` and a converted directory may leave at ``qwen2``.
- Stable-DiffCoder-8B Base / Instruct (the Base's ``config.json`` in a duplicate of the publisher's
  repository and the publisher's commit 4656ed0; ``modeling_stable_diffcoder.py`` @658a484 of
  ByteDance-Seed/Stable-DiffCoder-8B-Instruct; sources in docs/open-weights.md): Seed-Coder's Llama
  layout (model_type "llama", no q/k/v bias, no QK norm, untied head, rope_theta 500000, 8,192
  positions), architectures ["StableDiffcoderForCausalLM"], one Base revision naming it only in its
  auto_map; the transformers-4.46 revision's class is ``SeedDiffcoderForCausalLM`` (its config's
  architectures unchecked). Recognised by those class names, never by model_type "llama", which every
  Llama says. Neither a block nor a mask id is in the config: the block is ``generate_block``'s default
  4 and the mask the tokenizer's ``<[MASK_TOKEN]>``, else 5, that default's id (both defaults read in a
  public copy of the file, unchecked in the publisher's own). Logits are not shifted (``shift=False``
  in the README's call, ByteDance-Seed/Stable-DiffCoder @ece1ffb).
- LLaDA2.0 / LLaDA2.1: model/infer/hf/llada2.py (its sources there); by ``LLaDA2MoeModelLM``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from editserver.model.infer.hf import llada2, unserved
from editserver.model.infer.hf.moe import MoeSpec, Softmax

SUPPORTED = (
    "Dream / Dream-Coder / DiffuCoder (model_type 'Dream')",
    "Open-dCoder (model_type 'qwen2' with a mask token in its tokenizer)",
    "LLaDA / LLaDA-1.5 (model_type 'llada')",
    "LLaDA-MoE-7B-A1B Base/Instruct (architectures LLaDAMoEModelLM)",
    "SDAR / TraDo (model_type 'sdar', block diffusion)",
    "Fast-dLLM v2 (architectures Fast_dLLM_QwenForCausalLM or bd_size, block diffusion)",
    "Stable-DiffCoder (architectures StableDiffcoderForCausalLM, block diffusion)",
    "LLaDA2.0 / LLaDA2.1 (architectures LLaDA2MoeModelLM, block diffusion, mixture of experts)",
)
# Stable-DiffCoder's <[MASK_TOKEN]> first: a 155K code vocabulary may hold "<mask>" or "[MASK]" as
# ordinary text pieces, and no other family's tokenizer spells the bracketed form
MASK_NAMES = ("<[MASK_TOKEN]>", "<|mask|>", "<|MASK|>", "[MASK]", "<mask>", "<|mdm_mask|>", "|<MASK>|")


class UnsupportedModelError(ValueError):
    """A directory this server cannot run (unknown family, no mask token, bad layout)."""


@dataclass(frozen=True)
class OpenConfig:
    """What our transformer needs to run an open-weight family (model/infer/hf/model.py)."""

    family: str  # "dream" | "open-dcoder" | "llada" | "llada-moe"
    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    rope_theta: float
    norm_eps: float
    qkv_bias: bool
    tie_embeddings: bool
    max_position_embeddings: int
    shift: bool  # logits at position i predict token i + 1
    mask_id: int
    max_seq_len: int = 0  # the context served: max_position_embeddings capped by the server
    canvas_draft: bool = False  # our own next-edit draft input; open models have none
    qk_norm: bool = False  # RMSNorm over each head's q and k before the rotary (LLaDA-MoE)
    moe: MoeSpec | None = None  # routed experts in place of the dense MLP (model/infer/hf/moe.py)
    # > 0: block-causal attention, bidirectional inside each ``block_size`` block of absolute positions
    # and causal across blocks (block diffusion: SDAR); 0: full attention
    block_size: int = 0
    rotary_dim: int = 0  # dims of each head the rotary turns, the first ones (LLaDA2: half); 0: all


def _rope_theta(cfg: dict, default: float) -> float:
    scaling = cfg.get("rope_scaling")
    if scaling and scaling.get("rope_type", scaling.get("type")) not in (None, "default"):
        raise UnsupportedModelError(f"rotary scaling {scaling!r} is not supported")
    params = cfg.get("rope_parameters") or {}
    return float(cfg.get("rope_theta", params.get("rope_theta", default)))


def _qwen2(cfg: dict, family: str, mask_id: int) -> OpenConfig:
    dim, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    return OpenConfig(
        family=family,
        vocab_size=int(cfg["vocab_size"]),
        dim=dim,
        n_layers=int(cfg["num_hidden_layers"]),
        n_heads=heads,
        n_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or dim // heads),
        ffn_dim=int(cfg["intermediate_size"]),
        rope_theta=_rope_theta(cfg, 10000.0),
        norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        qkv_bias=True,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_position_embeddings=int(cfg.get("max_position_embeddings", 32768)),
        shift=True,
        mask_id=mask_id,
    )


def _llada(cfg: dict, mask_id: int) -> OpenConfig:
    dim, heads = int(cfg["d_model"]), int(cfg["n_heads"])
    if cfg.get("include_bias") or cfg.get("alibi") or cfg.get("attention_layer_norm"):
        raise UnsupportedModelError("LLaDA variants with biases, ALiBi or q/k norms are not supported")
    return OpenConfig(
        family="llada",
        vocab_size=int(cfg.get("embedding_size") or cfg["vocab_size"]),
        dim=dim,
        n_layers=int(cfg["n_layers"]),
        n_heads=heads,
        n_kv_heads=int(cfg.get("n_kv_heads") or heads),
        head_dim=dim // heads,
        ffn_dim=int(cfg["mlp_hidden_size"]),
        rope_theta=_rope_theta(cfg, 10000.0),
        norm_eps=float(cfg.get("rms_norm_eps", 1e-5)),
        qkv_bias=False,
        tie_embeddings=bool(cfg.get("weight_tying", False)),
        max_position_embeddings=int(cfg.get("max_sequence_length", 4096)),
        shift=False,
        mask_id=mask_id,
    )


LLADA_MOE_ARCHS = ("LLaDAMoEModelLM", "LLaDAMoEModel")
LLADA_MOE_MASK = 156895  # not in its config.json: llama.cpp's converter and dInfer's tests name it


def is_llada_moe(cfg: dict) -> bool:
    """LLaDA-MoE by its architecture, or a model_type "llada" config with expert keys; never by
    model_type alone (dense LLaDA says "llada" too)."""
    archs = [str(a) for a in cfg.get("architectures") or []]
    experts = "num_experts" in cfg and "expert_intermediate_size" in cfg
    return any(a in LLADA_MOE_ARCHS for a in archs) or (str(cfg.get("model_type")) == "llada" and experts)


def _llada_moe(cfg: dict, mask_id: int) -> OpenConfig:
    """LLaDA-MoE-7B-A1B's HF-style config (``configuration_lladamoe.py``; routing: model/infer/hf/moe.py)."""
    missing = [k for k in ("hidden_size", "num_experts", "expert_intermediate_size") if k not in cfg]
    if missing:
        raise UnsupportedModelError(f"a LLaDA-MoE config.json without {', '.join(missing)}")
    if cfg.get("attention_bias") or cfg.get("clip_qkv") is not None:
        raise UnsupportedModelError(
            "LLaDA-MoE variants with attention biases or q/k/v clipping are not supported"
        )
    if float(cfg.get("partial_rotary_factor") or 1.0) != 1.0:
        raise UnsupportedModelError("LLaDA-MoE with a partial rotary is not supported")
    dim, heads, layers = (
        int(cfg["hidden_size"]),
        int(cfg["num_attention_heads"]),
        int(cfg["num_hidden_layers"]),
    )
    freq = list(cfg.get("moe_layer_freq") or [1] * layers)  # per layer: 0 dense, else experts
    spec = MoeSpec(
        n_experts=int(cfg["num_experts"]),
        top_k=int(cfg["num_experts_per_tok"]),
        expert_dim=int(cfg["expert_intermediate_size"]),
        score=Softmax(),  # the block computes a softmax whatever moe_router_score_function says
        norm_topk_prob=False,  # hard-coded False in the publisher's block, whatever the config says
        expert_bias=bool(cfg.get("moe_router_enable_expert_bias")),
        bias_in_weight=True,
        shared_dim=int(cfg.get("shared_expert_intermediate_size") or 0),
        dense_layers=tuple(i for i, f in enumerate(freq[:layers]) if f == 0),
    )
    return OpenConfig(
        family="llada-moe",
        vocab_size=int(cfg["vocab_size"]),
        dim=dim,
        n_layers=layers,
        n_heads=heads,
        n_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=dim // heads,  # the publisher's attention derives it so
        ffn_dim=int(cfg.get("dense_intermediate_size") or 0),
        rope_theta=_rope_theta(cfg, 10000.0),
        norm_eps=float(cfg.get("rms_norm_eps", 1e-5)),
        qkv_bias=False,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_position_embeddings=int(cfg.get("max_position_embeddings", 4096)),
        shift=False,
        mask_id=mask_id,
        qk_norm=bool(cfg.get("qk_layernorm")),
        moe=spec,
    )


SDAR_ARCHS = ("SDARForCausalLM", "SDARModel")
SDAR_MASK = 151669  # <|MASK|>: SDAR-4B/8B-Chat config.json and tokenizer_config.json
SDAR_BLOCK = 4  # the block SDAR and TraDo were trained at (config.json block_size)


def is_sdar(cfg: dict) -> bool:
    archs = [str(a) for a in cfg.get("architectures") or []]
    return str(cfg.get("model_type", "")).lower() == "sdar" or any(a in SDAR_ARCHS for a in archs)


def not_block(what: str) -> str:
    """The error for ``--block-size`` given to a model that does not decode block by block."""
    return (
        f"--block-size applies to block-diffusion models (SDAR, TraDo, Fast-dLLM v2, Stable-DiffCoder, "
        f"LLaDA2); {what} denoises its whole answer at once, so leave the option out"
    )


def block_size_of(raw: dict, name: str = "", override: int | None = None) -> int:
    """The block a block-diffusion directory decodes with: ``override`` (``--block-size``), else a
    ``-b8`` ... ``-b64`` in its repository ``name`` (variants fine-tuned at that block), else
    config.json's ``block_size``, else 4."""
    if override is not None:
        if override < 1:
            raise ValueError(f"block size must be at least 1, got {override}")
        return int(override)
    m = re.search(r"-b(8|16|32|64)(?:$|[-_./])", name)
    if m:
        return int(m.group(1))
    # Stable-DiffCoder's is 4 too
    default = FAST_DLLM_BLOCK if is_fast_dllm(raw) else llada2.BLOCK if llada2.is_llada2(raw) else SDAR_BLOCK
    return int(raw.get("block_size") or raw.get("bd_size") or default)


def _sdar(cfg: dict, mask_id: int) -> OpenConfig:
    """SDAR / TraDo: Qwen3 dense keys, block-causal attention (module docstring)."""
    base = _qwen2(cfg, "sdar", mask_id)
    return replace(
        base,
        qkv_bias=bool(cfg.get("attention_bias", False)),
        shift=False,
        qk_norm=True,
        block_size=block_size_of(cfg),
    )


FAST_DLLM_MASK = 151665  # |<MASK>|: FAST_DLLM_MASK_ID, NVlabs/Fast-dLLM v2/generation_functions.py
FAST_DLLM_BLOCK = 32  # bd_size: the block it was trained at (model card; SGLang's default)


def is_fast_dllm(cfg: dict) -> bool:
    """Fast-dLLM v2 by its architectures, an auto_map naming Fast_dLLM, or ``bd_size`` (module docstring)."""
    archs = [str(a) for a in cfg.get("architectures") or []]
    auto = " ".join(str(v) for v in (cfg.get("auto_map") or {}).values())
    return any(a.startswith("Fast_dLLM") for a in archs) or "Fast_dLLM" in auto or "bd_size" in cfg


def _fast_dllm(cfg: dict, mask_id: int) -> OpenConfig:
    """Fast-dLLM v2: Qwen2 keys, block-causal attention, shifted logits (module docstring)."""
    return replace(_qwen2(cfg, "fast-dllm-v2", mask_id), block_size=block_size_of(cfg))


STABLE_DIFFCODER_ARCHS = ("StableDiffcoderForCausalLM", "SeedDiffcoderForCausalLM")
STABLE_DIFFCODER_MASK = 5  # <[MASK_TOKEN]>: generate_block's mask_id default (module docstring)


def is_stable_diffcoder(cfg: dict) -> bool:
    """Stable-DiffCoder by its architectures or an auto_map class naming them; never by model_type
    alone ("llama": module docstring)."""
    archs = [str(a) for a in cfg.get("architectures") or []] + unserved.auto_classes(cfg)
    return any(a in STABLE_DIFFCODER_ARCHS for a in archs)


def _stable_diffcoder(cfg: dict, mask_id: int) -> OpenConfig:
    """Stable-DiffCoder: Llama keys, block-causal attention, logits not shifted (module docstring)."""
    if cfg.get("mlp_bias") or cfg.get("hidden_act", "silu") != "silu":
        raise UnsupportedModelError(
            "a Stable-DiffCoder config.json with MLP biases or an activation other than silu is not supported"
        )
    base = _qwen2(cfg, "stable-diffcoder", mask_id)
    return replace(
        base,
        qkv_bias=bool(cfg.get("attention_bias", False)),
        shift=False,
        rope_theta=_rope_theta(cfg, 500000.0),
        max_position_embeddings=int(cfg.get("max_position_embeddings", 8192)),
        block_size=block_size_of(cfg),
    )


def refuse_unserved(cfg: dict) -> None:
    """UnsupportedModelError with one true line for a family recognised but not served
    (model/infer/hf/unserved.py); nothing for any other config."""
    line = unserved.explain(cfg, SUPPORTED)
    if line is not None:
        raise UnsupportedModelError(line)


def _mask(cfg: dict, tokenizer_mask_id: int | None, default: int) -> int:
    """The mask id: config.json's ``mask_token_id``, else the tokenizer's mask token, else the
    publisher's default for the family."""
    return int(cfg.get("mask_token_id", tokenizer_mask_id if tokenizer_mask_id is not None else default))


def detect(cfg: dict, tokenizer_mask_id: int | None) -> OpenConfig:
    """The family of a Hugging Face ``config.json``; UnsupportedModelError for anything else."""
    mtype = str(cfg.get("model_type", "")).lower()
    archs = [str(a) for a in cfg.get("architectures") or []]
    if mtype == "dream" or "DreamModel" in archs:
        return _qwen2(cfg, "dream", _mask(cfg, tokenizer_mask_id, 151666))
    if is_llada_moe(cfg):
        return _llada_moe(cfg, _mask(cfg, tokenizer_mask_id, LLADA_MOE_MASK))
    if mtype == "llada" or "LLaDAModelLM" in archs:
        return _llada(cfg, int(cfg.get("mask_token_id", 126336)))
    if is_sdar(cfg):
        return _sdar(cfg, _mask(cfg, tokenizer_mask_id, SDAR_MASK))
    if is_fast_dllm(cfg):  # the mask is not in its config: the tokenizer's |<MASK>|, else 151665
        return _fast_dllm(cfg, _mask(cfg, tokenizer_mask_id, FAST_DLLM_MASK))
    if is_stable_diffcoder(cfg):  # the mask: its tokenizer's <[MASK_TOKEN]>, else 5
        return _stable_diffcoder(cfg, _mask(cfg, tokenizer_mask_id, STABLE_DIFFCODER_MASK))
    if llada2.is_llada2(cfg):  # model/infer/hf/llada2.py; the mask is not in its config
        if (why := llada2.refusal(cfg)) is not None:
            raise UnsupportedModelError(why)
        mask = _mask(cfg, tokenizer_mask_id, llada2.MASK)
        return OpenConfig(**llada2.fields(cfg, mask), rope_theta=_rope_theta(cfg, 10000.0))
    refuse_unserved(cfg)
    if mtype in ("qwen2", "llama", "mistral", "qwen3", "gpt2") or any("CausalLM" in a for a in archs):
        if mtype == "qwen2" and (tokenizer_mask_id is not None or cfg.get("mask_token_id") is not None):
            mask = cfg.get("mask_token_id", tokenizer_mask_id)
            return _qwen2(cfg, "open-dcoder", int(mask))
        raise UnsupportedModelError(unserved.autoregressive(cfg, SUPPORTED))
    raise UnsupportedModelError(
        f"unknown model family (model_type {mtype!r}, architectures {archs}); "
        f"supported families: {'; '.join(SUPPORTED)}"
    )


EXPAND_NAME = "<|expand|>"  # DreamOn's token that widens the gap by one mask


def dreamon(cfg: OpenConfig, raw: dict, tokenizer_expand_id: int | None) -> tuple[OpenConfig, int | None]:
    """A Dream-family ``cfg`` whose config.json (``raw``) names ``expand_token_id`` or whose tokenizer
    holds ``<|expand|>`` is DreamOn: (the family "dreamon", its expand id); anything else as it was."""
    expand = raw.get("expand_token_id", tokenizer_expand_id)
    if cfg.family != "dream" or expand is None:
        return cfg, None
    if not 0 <= int(expand) < cfg.vocab_size:
        raise UnsupportedModelError(
            f"expand token id {expand} lies outside the vocabulary of {cfg.vocab_size}"
        )
    return replace(cfg, family="dreamon"), int(expand)


_QWEN2 = re.compile(r"^model\.(.+)$")
_LLADA_BLOCK = {
    "attn_norm": "input_layernorm",
    "q_proj": "self_attn.q_proj",
    "k_proj": "self_attn.k_proj",
    "v_proj": "self_attn.v_proj",
    "attn_out": "self_attn.o_proj",
    "ff_norm": "post_attention_layernorm",
    "ff_proj": "mlp.gate_proj",  # the branch through SiLU
    "up_proj": "mlp.up_proj",
    "ff_out": "mlp.down_proj",
}
_LLADA_TOP = {"wte": "embed_tokens", "ln_f": "norm", "ff_out": "lm_head"}


def qwen2_name(name: str) -> str | None:
    """Our name of a Dream/Qwen2 tensor; None for tensors we do not use (rotary buffers)."""
    if name.endswith("rotary_emb.inv_freq"):
        return None
    if name == "lm_head.weight":
        return name
    m = _QWEN2.match(name)
    return m.group(1) if m else name


def llada_name(name: str) -> str | None:
    """Our name of a LLaDA (OLMo-layout) tensor."""
    m = re.match(r"^model\.transformer\.blocks\.(\d+)\.(\w+)\.(weight|bias)$", name)
    if m and m.group(2) in _LLADA_BLOCK:
        return f"layers.{m.group(1)}.{_LLADA_BLOCK[m.group(2)]}.{m.group(3)}"
    m = re.match(r"^model\.transformer\.(\w+)\.(weight|bias)$", name)
    if m and m.group(1) in _LLADA_TOP:
        return f"{_LLADA_TOP[m.group(1)]}.{m.group(2)}"
    return name


def llada_moe_name(name: str) -> str | None:
    """Our name of a LLaDA-MoE tensor: the Qwen2 names, with a shared expert (which the publisher
    keeps on the layer) inside the MoE block."""
    ours = qwen2_name(name)
    return (
        None if ours is None else re.sub(r"^(layers\.\d+)\.shared_expert\.", r"\1.mlp.shared_expert.", ours)
    )


def renamer(family: str) -> Callable[[str], str | None]:
    named = {
        "llada": llada_name,
        "llada-moe": llada_moe_name,
        "llada2": llada2.rename,
        "llada2.1": llada2.rename,
    }
    return named.get(family, qwen2_name)


def splitter(cfg: OpenConfig) -> Callable[[str], list[tuple[str, slice | None]]]:
    """Our tensor name -> the parameters it fills, with the rows each takes (None: all of it): a
    fused q/k/v weight (LLaDA2) fills three; every other tensor, itself."""
    if cfg.family in llada2.FAMILIES:
        return llada2.split(cfg.n_heads, cfg.n_kv_heads, cfg.head_dim)
    return lambda name: [(name, None)]
