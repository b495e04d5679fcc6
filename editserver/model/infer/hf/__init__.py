"""Open-weight diffusion code models from a Hugging Face directory (Dream, Open-dCoder, LLaDA, LLaDA-MoE,
SDAR, Fast-dLLM v2, Stable-DiffCoder, LLaDA2).

Design decisions:
- ``load_open_checkpoint(dir)`` returns the same ``Checkpoint`` (model/infer/checkpoint.py) our own
  models load into, with a family name and an ``InferenceConfig`` of defaults, so the engine, the
  server, the replay and the benchmarks take either without knowing which. model/infer/loader.py's
  ``load_checkpoint`` picks this loader for a directory ``is_open_dir`` accepts.
- The context served is the config's ``max_position_embeddings`` capped by the server's
  ``max_context`` (32K when not given); a cap above the model's own is allowed, a model longer than
  the cap is served at the cap, and a cap below 1 is an error.
- The window a model reads is the length its publisher evaluates it at (``EVALUATED``: 2,048 tokens
  for the Dream family and Open-dCoder, 4,096 for LLaDA and LLaDA-MoE, Stable-DiffCoder's 8K context;
  sources in docs/open-weights.md): longer
  input is cut to it, nearest the cursor kept, and the completion says how many tokens were dropped.
  A ``max_context`` given explicitly is also the window, so ``--max-context`` raises it.
- A family recognised but not served (model/infer/hf/unserved.py) is refused from its config.json
  alone, before the tokenizer or the shards are looked for, with one line that says what it is.
- A vocabulary that disagrees with the tokenizer (an id the tokenizer can produce that the embedding
  lacks) and a mask id outside the vocabulary are refused at load.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from editserver.model.infer.checkpoint import Checkpoint
from editserver.model.infer.config import CONTEXT_LENGTH, InferenceConfig
from editserver.model.infer.hf import llada2
from editserver.model.infer.hf.families import (
    EXPAND_NAME,
    UnsupportedModelError,
    block_size_of,
    detect,
    dreamon,
    not_block,
    refuse_unserved,
)
from editserver.model.infer.hf.loader import load_weights, shard_files
from editserver.model.infer.hf.tokenizer import OpenTokenizer, choose_template, read_tokenizer

__all__ = ["UnsupportedModelError", "is_open_dir", "load_open_checkpoint", "not_block", "open_inference"]


def is_open_dir(d: Path) -> bool:
    """Whether ``d`` is a Hugging Face model directory (config.json without our ``model`` section)."""
    path = d / "config.json"
    if not path.is_file():
        return False
    try:
        cfg = json.loads(path.read_text())
    except ValueError:
        return False
    return not ("model" in cfg and "inference" in cfg)


# sdar: generate.py's prompt_length default (JetAstra/SDAR @c2041a8)
EVALUATED = {
    "dream": 2048,
    "dreamon": 2048,
    "open-dcoder": 2048,
    "llada": 4096,
    "llada-moe": 4096,
    "sdar": 4096,
    "fast-dllm-v2": 4096,  # v2/eval.py asserts prompt + target <= 4096 (NVlabs/Fast-dLLM)
    # no evaluation cut is published: its context, 8K (README table, ByteDance-Seed/Stable-DiffCoder)
    "stable-diffcoder": 8192,
    # LLaDA2: no evaluated prompt length in the publisher's files read (dFactory, the LLaDA2.1 report);
    # unchecked, SDAR's 4096 (docs/open-weights.md)
    "llada2": 4096,
    "llada2.1": 4096,
}
# families whose publisher's loop fills past the answer with end-of-text (eos), never a pad token:
# Stable-DiffCoder's generate_block writes eos from the first eos on and stops there
EOS_FILLS = ("stable-diffcoder",)


def open_inference(window: int | None = None) -> InferenceConfig:
    """Decode settings for open models: our defaults, with one-line FIM also tried on a 16-token
    canvas, reading at most ``window`` prompt tokens."""
    return dataclasses.replace(InferenceConfig(), line_canvases=(16,), window_tokens=window)


def load_open_checkpoint(
    d: Path,
    device: str,
    dtype: torch.dtype,
    max_context: int | None = None,
    chat_template: str = "auto",
    block_size: int | None = None,
) -> Checkpoint:
    """The directory as a ``Checkpoint``; ``chat_template``: ``auto`` (the directory's, none for a base
    checkpoint), ``none`` or a template file (model/infer/hf/tokenizer.py); ``block_size``: a
    block-diffusion family's block (``--block-size``; else its name's ``-bN``, else its config's)."""
    if max_context is not None and max_context < 1:
        raise ValueError(f"max_context must be at least 1, got {max_context}")
    if not (d / "config.json").is_file():
        raise FileNotFoundError(f"{d} is not a model directory (missing config.json)")
    raw = json.loads((d / "config.json").read_text())
    refuse_unserved(raw)  # a family recognised but not served says so before any other file is read
    tok_cfg_path = d / "tokenizer_config.json"
    tok_cfg = json.loads(tok_cfg_path.read_text()) if tok_cfg_path.is_file() else {}
    try:
        hf_tok = read_tokenizer(d, tok_cfg)
    except ValueError:
        detect(raw, 0)  # an unknown family is the clearer error
        raise
    cfg = detect(raw, OpenTokenizer.find_mask(hf_tok, tok_cfg))
    cfg, expand_id = dreamon(cfg, raw, hf_tok.token_to_id(EXPAND_NAME))  # a Dream fine-tune's own family
    # a pulled directory is a snapshot hash under models--OWNER--NAME: the name is above it
    name = "/".join(d.resolve().parts[-3:])
    if cfg.block_size:  # block diffusion: the option, the repository name, then config.json
        cfg = dataclasses.replace(cfg, block_size=block_size_of(raw, name, block_size))
    elif block_size is not None:  # an option that would change nothing is an error, not a no-op
        raise ValueError(not_block(f"{d.name} (family {cfg.family})"))
    if cfg.family == "llada2":  # 2.0 and 2.1 share config.json: the name says which (hf/llada2.py)
        cfg = dataclasses.replace(cfg, family=llada2.edition(name))
    shard_files(d)  # a missing shard fails before anything is built
    cfg = dataclasses.replace(
        cfg, max_seq_len=min(cfg.max_position_embeddings, max_context or CONTEXT_LENGTH)
    )
    window = min(cfg.max_seq_len, max_context or EVALUATED.get(cfg.family, cfg.max_seq_len))
    tok = OpenTokenizer(hf_tok, tok_cfg, raw, choose_template(d, tok_cfg, chat_template))
    if tok.vocab_size > cfg.vocab_size:
        raise ValueError(
            f"the tokenizer has {tok.vocab_size} tokens but the model's vocabulary has {cfg.vocab_size}"
        )
    if not 0 <= cfg.mask_id < cfg.vocab_size:
        raise ValueError(f"mask token id {cfg.mask_id} lies outside the vocabulary of {cfg.vocab_size}")
    tok.mask_id = cfg.mask_id
    if cfg.family in EOS_FILLS and tok.eos_id is not None:  # its answer ends at eos, which is never barred
        tok.eot_id = tok.eos_id
    tok.expand_id = expand_id  # DreamOn's canvas edit (model/infer/canvas_edit.py); None elsewhere
    model = load_weights(d, cfg, device, dtype)
    meta = {"family": cfg.family, "source": str(d), "dtype": str(dtype).removeprefix("torch.")}
    if cfg.block_size:
        meta["block_size"] = cfg.block_size
    return Checkpoint(model, tok, open_inference(window), meta, family=cfg.family)
