"""A true one-line answer for the open-weight families this server does not run yet.

Design decisions:
- Each family is recognised from ``config.json`` alone: ``architectures`` first, then ``model_type``,
  then a key only that family has (``canvas_length``). ``model_type`` alone never decides where two
  families share one (LLaDA-MoE says ``llada`` like dense LLaDA and is served, as is Stable-DiffCoder,
  which says ``llama``: model/infer/hf/families.py).
- The answer says what the directory is (block diffusion, uniform-state diffusion, autoregressive,
  mixture of experts), that it is not served yet, and which families are; it is one line, and the
  command that loads it exits with status 2 (``UnsupportedModelError`` is a ``ValueError``).
- The facts per family come from the publishers' files (docs/open-weights.md, "Families not served",
  lists each with its source and marks what was not read in a published config.json).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Unserved:
    name: str
    what: str  # what the directory holds, in a few words
    archs: tuple[str, ...] = ()
    model_types: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()  # all present: this family (with a matching model_type when one is given)


UNSERVED = (
    Unserved(
        "WeDLM",
        "a diffusion model decoded with causal attention and a KV cache, on Qwen3",
        archs=("WeDLMForCausalLM",),
        model_types=("wedlm",),
    ),
    Unserved(
        "CoDA",
        "a bidirectional diffusion model on Qwen3 (licence CC-BY-NC-4.0)",
        archs=("CoDALanguageModel",),
        model_types=("coda",),
    ),
    Unserved(
        "DiffusionGemma",
        "a uniform-state diffusion model on a Gemma mixture-of-experts backbone (no mask token)",
        archs=("DiffusionGemmaForBlockDiffusion", "DiffusionGemmaForConditionalGeneration"),
        model_types=("diffusion_gemma",),
        keys=("canvas_length",),
    ),
)


def auto_classes(cfg: dict) -> list[str]:
    """The class names ``auto_map`` points at (``modeling_x.Class`` -> ``Class``)."""
    out = []
    for v in (cfg.get("auto_map") or {}).values():
        for ref in v if isinstance(v, list) else [v]:
            if isinstance(ref, str):
                out.append(ref.rsplit(".", 1)[-1])
    return out


def recognise(cfg: dict) -> Unserved | None:
    """The unserved family a ``config.json`` belongs to, or None."""
    archs = {str(a) for a in cfg.get("architectures") or []} | set(auto_classes(cfg))
    mtype = str(cfg.get("model_type", "")).lower()
    for fam in UNSERVED:
        if archs & set(fam.archs) or mtype in fam.model_types:
            return fam
        if fam.keys and all(k in cfg for k in fam.keys):
            return fam
    return None


def explain(cfg: dict, served: tuple[str, ...]) -> str | None:
    """The one line for an unserved family's ``config.json``; None when it is none of them."""
    fam = recognise(cfg)
    if fam is None:
        return None
    return f"{fam.name}: {fam.what}; {_seen(cfg)}; not served yet. Served: {_short(served)}"


def autoregressive(cfg: dict, served: tuple[str, ...]) -> str:
    """The one line for a plain autoregressive model (a causal LM whose tokenizer has no mask token)."""
    return (
        f"an autoregressive model ({_seen(cfg)}) without a mask token: it writes left to right and "
        f"cannot fill a diffusion canvas; not served. Served: {_short(served)}"
    )


def _short(served: tuple[str, ...]) -> str:
    """The served families by name only (``editserver serve`` shows 400 characters of a reason)."""
    return ", ".join(s.split(" (")[0] for s in served)


def _seen(cfg: dict) -> str:
    archs = ", ".join(str(a) for a in cfg.get("architectures") or []) or "none"
    return f"model_type {cfg.get('model_type')!r}, architectures {archs}"
