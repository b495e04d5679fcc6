"""LLaDA2.0 / LLaDA2.1 (inclusionAI): block-diffusion mixture-of-experts models on the Ling/Bailing
layout, described to our transformer (model/infer/hf/model.py) and its loader.

Design decisions:
- Detected by ``architectures`` (``LLaDA2MoeModelLM``), or a ``llada2_moe`` model_type together with
  the expert keys; both editions say the same, so which one a directory holds is read from its
  repository name (``LLaDA2.1``), as a block's ``-bN`` is (``edition``; the family ``llada2.1``).
- Everything the module needs is the existing options as data: the fused q/k/v weight split into
  q, k and v at load (``split``: the loader stays family-agnostic), q/k RMSNorm per head before the
  rotary, a partial rotary (``rotary_dim``), block-causal attention on a 32-token grid, the dense
  MLP on the first ``first_k_dense_replace`` layers and the MoE block (model/infer/hf/moe.py) after.
- The mask is not in config.json: the tokenizer's ``<|mask|>``, else 156895; end of text 156892.

What was read (inclusionAI/dFactory @92b6890, ``models/llada2_moe/modeling_llada2_moe.py`` and
``configs/model_configs/llada2_mini/config.json``, with git show; nothing copied):
- ``LLaDA2MoeModelLM`` holds ``model`` (``word_embeddings``, ``layers``, ``norm``) and an untied
  ``lm_head``; logits are not shifted. Each layer: ``input_layernorm``, ``attention``,
  ``post_attention_layernorm``, ``mlp``; RMSNorm in fp32, the weight applied after the cast back.
- Attention: one ``query_key_value`` linear whose output is viewed as (H + 2 Hkv) heads of
  ``head_dim`` and split [q heads | k heads | v heads]; ``query_layernorm`` / ``key_layernorm`` over
  each head (applied whatever the config says); rotary on the first ``head_dim *
  partial_rotary_factor`` dims of each head (rotate-half pairs i, i + rotary_dim/2 inside them, the
  rest passed through; frequencies over the rotary dims, base ``rope_theta``); ``dense`` out.
- The gate (``LLaDA2MoeGate``): logits in fp32, sigmoid scores, ``expert_bias`` (a buffer, saved
  as ``mlp.gate.expert_bias``) added for the choice only, 8 groups of which ``topk_group`` are kept
  (a group scores the sum of its two best), top-k, the unbiased scores renormalised whenever k > 1
  (whatever ``norm_topk_prob`` says) and times ``routed_scaling_factor``; one shared expert of width
  ``moe_intermediate_size * num_shared_experts`` (``mlp.shared_experts``); per-expert weights
  ``mlp.experts.E.{gate,up,down}_proj`` (dFactory's ``scripts/moe_convertor.py`` merges and splits
  exactly these names).
- mini: hidden 2048, 20 layers, 16 heads, 4 kv heads, head_dim 128, partial_rotary_factor 0.5,
  rope_theta 600000, intermediate 5120, moe_intermediate 512, 256 experts, 8 a token, 1 shared,
  n_group 8, topk_group 4, routed_scaling_factor 2.5, rms_norm_eps 1e-6, vocab 157184, pad 156892.
- ``generate``: mask 156895, eos 156892 (its defaults), block 32, 32 steps a block, threshold 0.95.
LLaDA2.1-mini's config.json (its Hugging Face listing, read through the search tool's docs corpus):
the same architectures, model_type ``llada2_moe`` and shape, ``max_position_embeddings`` 32768.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from editserver.model.infer.hf.moe import MoeSpec, Sigmoid, Softmax

ARCHS = ("LLaDA2MoeModelLM", "LLaDA2MoeModel")
MODEL_TYPES = ("llada2_moe", "llada2_moe_veomni")  # the second: dFactory's training copy of the config
MASK = 156895  # <|mask|>: generate's default mask_id (not in config.json)
EOS = 156892  # <|endoftext|>: generate's default eos_id, config.json's pad_token_id
BLOCK = 32  # generate's block_length
FAMILIES = ("llada2", "llada2.1")
_EDITION = re.compile(r"llada-?2[._]1", re.IGNORECASE)


def is_llada2(cfg: dict) -> bool:
    """LLaDA2 by its architecture, or a LLaDA2 model_type with expert keys."""
    archs = [str(a) for a in cfg.get("architectures") or []]
    experts = "num_experts" in cfg and "moe_intermediate_size" in cfg
    return any(a in ARCHS for a in archs) or (str(cfg.get("model_type")) in MODEL_TYPES and experts)


def edition(name: str) -> str:
    """``llada2.1`` for a repository named LLaDA2.1 (its config.json equals 2.0's: module docstring),
    else ``llada2``."""
    return "llada2.1" if _EDITION.search(name) else "llada2"


def spec(cfg: dict) -> MoeSpec:
    """The routing of ``LLaDA2MoeGate`` (module docstring) as MoeSpec data."""
    k = int(cfg["num_experts_per_tok"])
    score = str(cfg.get("score_function", "sigmoid")).lower()
    return MoeSpec(
        n_experts=int(cfg["num_experts"]),
        top_k=k,
        expert_dim=int(cfg["moe_intermediate_size"]),
        score=Softmax() if score == "softmax" else Sigmoid(),
        norm_topk_prob=k > 1,  # the gate renormalises whenever k > 1, whatever the config says
        routed_scaling=float(cfg.get("routed_scaling_factor") or 1.0),
        expert_bias=True,  # always a buffer of the gate (zero when unused)
        bias_in_weight=False,
        groups=int(cfg.get("n_group") or 1),
        topk_groups=int(cfg.get("topk_group") or 1),
        shared_dim=int(cfg["moe_intermediate_size"]) * int(cfg.get("num_shared_experts") or 0),
        dense_layers=tuple(range(int(cfg.get("first_k_dense_replace") or 0))),
        router_fp32=True,  # F.linear(h.float(), w.float()) in the gate
    )


def refusal(cfg: dict) -> str | None:
    """Why a LLaDA2 config.json cannot be served (one line), or None."""
    missing = [
        k
        for k in ("hidden_size", "num_experts", "moe_intermediate_size", "num_experts_per_tok")
        if k not in cfg
    ]
    if missing:
        return f"a LLaDA2 config.json without {', '.join(missing)}"
    if cfg.get("use_qkv_bias") or cfg.get("use_bias") or cfg.get("norm_head"):
        return "LLaDA2 variants with q/k/v or output biases or a normalised head are not supported"
    if str(cfg.get("score_function", "sigmoid")).lower() not in ("sigmoid", "softmax"):
        return f"LLaDA2 router score {cfg.get('score_function')!r} is not supported"
    return None


def rotary_dim(cfg: dict, head_dim: int) -> int:
    """Dims of each head the rotary turns: ``head_dim * partial_rotary_factor`` (module docstring)."""
    return int(head_dim * float(cfg.get("partial_rotary_factor") or 1.0))


_TOP = {"model.word_embeddings.weight": "embed_tokens.weight", "model.norm.weight": "norm.weight"}
_ATTN = {
    "query_key_value": "self_attn.qkv",  # fused: ``split`` cuts it into q_proj, k_proj, v_proj
    "dense": "self_attn.o_proj",
    "query_layernorm": "self_attn.q_norm",
    "key_layernorm": "self_attn.k_norm",
}


def rename(name: str) -> str | None:
    """Our name of a LLaDA2 tensor (the fused q/k/v under ``self_attn.qkv``); None for rotary buffers."""
    if name.endswith("rotary_emb.inv_freq"):
        return None
    if name in _TOP:
        return _TOP[name]
    m = re.match(r"^model\.layers\.(\d+)\.attention\.(\w+)\.(weight|bias)$", name)
    if m and m.group(2) in _ATTN:
        return f"layers.{m.group(1)}.{_ATTN[m.group(2)]}.{m.group(3)}"
    m = re.match(r"^model\.layers\.(\d+)\.mlp\.(gate\.expert_bias|shared_experts\.)(.*)$", name)
    if m:
        inner = "expert_bias" if m.group(2) == "gate.expert_bias" else "shared_expert." + m.group(3)
        return f"layers.{m.group(1)}.mlp.{inner}"
    return name.removeprefix("model.")


def split(n_heads: int, n_kv_heads: int, head_dim: int) -> Callable[[str], list[tuple[str, slice | None]]]:
    """Our tensor name -> the parameters it fills and the rows of it each takes: the fused
    ``query_key_value`` rows are [q heads | k heads | v heads] (module docstring)."""
    q, kv = n_heads * head_dim, n_kv_heads * head_dim

    def parts(ours: str) -> list[tuple[str, slice | None]]:
        if not ours.endswith(".self_attn.qkv.weight"):
            return [(ours, None)]
        base = ours.removesuffix("qkv.weight")
        return [
            (base + "q_proj.weight", slice(0, q)),
            (base + "k_proj.weight", slice(q, q + kv)),
            (base + "v_proj.weight", slice(q + kv, q + 2 * kv)),
        ]

    return parts


def fields(cfg: dict, mask_id: int) -> dict:
    """``OpenConfig`` fields of a LLaDA2 config.json but the rotary base (families.py reads it)."""
    dim, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    head_dim = int(cfg.get("head_dim") or dim // heads)
    return dict(
        family="llada2",
        vocab_size=int(cfg["vocab_size"]),
        dim=dim,
        n_layers=int(cfg["num_hidden_layers"]),
        n_heads=heads,
        n_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=head_dim,
        ffn_dim=int(cfg.get("intermediate_size") or 0),  # the dense layers' MLP
        norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        qkv_bias=False,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_position_embeddings=int(cfg.get("max_position_embeddings", 16384)),
        shift=False,
        mask_id=mask_id,
        qk_norm=True,  # query_layernorm / key_layernorm always exist (module docstring)
        moe=spec(cfg),
        block_size=BLOCK,  # block_size_of (families.py) and --block-size may change it at load
        rotary_dim=rotary_dim(cfg, head_dim),
    )
