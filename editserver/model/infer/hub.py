"""Open-weight models by short name: which publisher repository each is, and where a pulled one lies.

Design decisions:
- ``editserver pull NAME`` (editserver/cli/pull.py) downloads into the user's Hugging Face cache
  (``HF_HOME``/``HF_HUB_CACHE`` as huggingface_hub resolves them), so a model pulled once is shared
  with any other tool that uses that cache. ``--model NAME`` then finds it without the network
  (``pulled_dir``); a name never pulled is an error that says to pull it.
- ``HF_ENDPOINT`` is honoured (a mirror; the tests serve a fixture directory the hub's way on loopback).
- Only the files the loader reads (model/infer/hf/__init__.py) are fetched: config, tokenizer files,
  the chat template, the index and the shards it names. Modelling code is never downloaded. Where a
  publisher's file listing was read (``SHIPPED``: LLaDA-MoE and Stable-DiffCoder, Base and Instruct)
  only the files it lists
  are asked for; other names try each ``OPTIONAL`` file and skip the absent ones.
"""

from __future__ import annotations

from pathlib import Path

PULLABLE = {
    "dream-coder-7b": "Dream-org/Dream-Coder-v0-Instruct-7B",
    "diffucoder-7b-instruct": "apple/DiffuCoder-7B-Instruct",
    "open-dcoder-0.5b": "fredzzp/open-dcoder-0.5B",
    "llada-8b-instruct": "GSAI-ML/LLaDA-8B-Instruct",
    "llada-moe-7b-a1b-base": "inclusionAI/LLaDA-MoE-7B-A1B-Base",
    "llada-moe-7b-a1b-instruct": "inclusionAI/LLaDA-MoE-7B-A1B-Instruct",
    "dreamon-7b": "Dream-org/DreamOn-v0-7B",
    # block diffusion (SDAR README "Model Zoo"; Gen-Verse/dLLM-RL README)
    "sdar-1.7b-chat": "JetLM/SDAR-1.7B-Chat",
    "sdar-4b-chat": "JetLM/SDAR-4B-Chat",
    "sdar-8b-chat": "JetLM/SDAR-8B-Chat",
    "trado-4b-instruct": "Gen-Verse/TraDo-4B-Instruct",
    "trado-8b-instruct": "Gen-Verse/TraDo-8B-Instruct",
    # Fast-dLLM v2 (NVlabs/Fast-dLLM v2/README.md: the 7B badge and the 1.5B row)
    "fast-dllm-v2-1.5b": "Efficient-Large-Model/Fast_dLLM_v2_1.5B",
    "fast-dllm-v2-7b": "Efficient-Large-Model/Fast_dLLM_v2_7B",
    # Stable-DiffCoder (ByteDance-Seed/Stable-DiffCoder README.md, the model table)
    "stable-diffcoder-8b-base": "ByteDance-Seed/Stable-DiffCoder-8B-Base",
    "stable-diffcoder-8b-instruct": "ByteDance-Seed/Stable-DiffCoder-8B-Instruct",
    # LLaDA2 (inclusionAI/LLaDA2.0 @3df907b README.md, "Model Variants"); 2.1 edits written tokens
    "llada2.0-mini": "inclusionAI/LLaDA2.0-mini",
    "llada2.1-mini": "inclusionAI/LLaDA2.1-mini",
}
# besides config.json and the weights; each may be absent from a repository
OPTIONAL = (
    "tokenizer_config.json",
    "tokenizer.json",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "special_tokens_map.json",
    "generation_config.json",
    "added_tokens.json",
)
# the files besides the weights that a publisher's listing shows and the loader reads, where the
# listing was read (docs/open-weights.md); other names try every OPTIONAL file
SHIPPED = {
    "llada-moe-7b-a1b-base": (
        "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
    ),
    "llada-moe-7b-a1b-instruct": (
        "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
    ),
    # the file lists of repositories duplicated from the publisher's (docs/open-weights.md)
    "stable-diffcoder-8b-base": ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"),
    "stable-diffcoder-8b-instruct": ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"),
}  # fmt: skip


def files_to_try(name: str) -> tuple[str, ...]:
    """The non-weight files ``pull`` asks for (each may be absent): the publisher's listing if read."""
    return SHIPPED.get(name, OPTIONAL)


def pulled_dir(name: str) -> Path | None:
    """The cached directory of a pulled ``name`` (a PULLABLE key), or None when it was never pulled."""
    repo = PULLABLE.get(name)
    if repo is None:
        return None
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo, "config.json")
    return Path(found).parent if isinstance(found, str) else None


def resolve_model(model: str | Path | None) -> str | Path | None:
    """``model`` as given, or the directory of a pulled name; FileNotFoundError for a name not pulled."""
    if model is None or Path(model).exists() or str(model) not in PULLABLE:
        return model
    d = pulled_dir(str(model))
    if d is None:
        raise FileNotFoundError(f"{model} has not been pulled: run `editserver pull {model}` first")
    return d
