"""Loading a checkpoint directory: ours, or an open-weight family's, into one ``Checkpoint``.

Design decisions:
- One entry point, ``load_checkpoint``: it resolves a pulled model's short name (model/infer/hub.py),
  reads the directory's ``config.json`` and picks the loader. A Hugging Face directory of an
  open-weight diffusion family (its ``config.json`` has no ``model`` and ``inference`` sections) goes
  to model/infer/hf/ ``load_open_checkpoint``; ours to ``load_native_checkpoint`` here. Both build the
  ``Checkpoint`` of model/infer/checkpoint.py, which imports neither, so every command that takes
  ``--model DIR`` takes either.
- Our own directory's damage is named before anything is allocated: the shared checks of
  model/infer/checkpoint.py (``check_config``, ``check_weights``), then ``_check_native`` (the config
  describes a model whose every tensor the file holds, checked on the meta device), then NaN or
  infinite weights after the read; each a one-line ``CheckpointError``.
- ``dtype`` ``"auto"`` keeps our own checkpoints in fp32 (their thresholds were tuned so) and picks
  bf16 for open models where it is native (``serving_dtype``).
- ``export_checkpoint`` lives here, not beside ``save_checkpoint``: it loads what it copies.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from editserver.model.infer.checkpoint import (
    DEFAULT_CHECKPOINT,
    Checkpoint,
    CheckpointError,
    average_weights,
    check_checkpoint_dir,
    check_config,
    check_weights,
    save_checkpoint,
    serving_dtype,
)
from editserver.model.infer.config import InferenceConfig, ModelConfig
from editserver.model.infer.hf import is_open_dir, load_open_checkpoint, not_block
from editserver.model.infer.hub import resolve_model
from editserver.model.infer.tokenizer import Tokenizer
from editserver.model.infer.transformer import Transformer


def load_checkpoint(
    directory: str | Path | None = None,
    device: str = "cpu",
    dtype: torch.dtype | str = torch.float32,
    max_context: int | None = None,
    chat_template: str = "auto",
    block_size: int | None = None,
) -> Checkpoint:
    """Our checkpoint, or an open-weight model directory (model/infer/hf/) served at most
    ``max_context`` tokens of context. ``dtype`` may name one (``serving_dtype``): ``"auto"`` keeps
    our own checkpoints in fp32 (their thresholds were tuned so) and picks bf16 for open models where
    it is native. ``max_context`` None: 32K, and each open family's evaluated window
    (model/infer/hf/__init__.py). ``chat_template`` (``auto``, ``none`` or a file) applies to open models only, ``block_size`` to block-diffusion ones."""
    directory = resolve_model(directory)  # a name pulled with `editserver pull`
    d = Path(directory) if directory is not None else DEFAULT_CHECKPOINT
    if not d.is_dir():
        raise FileNotFoundError(f"{d} is not a checkpoint directory (no such directory)")
    check_config(d)
    if is_open_dir(d):
        dtype = serving_dtype(dtype, device) if isinstance(dtype, str) else dtype
        return load_open_checkpoint(d, device, dtype, max_context, chat_template, block_size)
    # an option that would change nothing is an error, not a no-op
    if block_size is not None:
        raise ValueError(not_block(f"{d} (an editserver checkpoint)"))
    if chat_template not in ("auto", "none"):  # none is what it does anyway
        raise ValueError(
            f"--chat-template applies to open-weight models; {d} (an editserver checkpoint) writes its "
            "own prompts, so leave the option out"
        )
    if isinstance(dtype, str):
        dtype = torch.float32 if dtype == "auto" else serving_dtype(dtype, device)
    return load_native_checkpoint(d, device, dtype)


def load_native_checkpoint(d: Path, device: str, dtype: torch.dtype) -> Checkpoint:
    """This project's checkpoint directory ``d`` (its ``config.json`` already parsed once), in ``dtype``."""
    check_checkpoint_dir(d)
    check_weights(d)
    cfg = json.loads((d / "config.json").read_text())
    mc = _check_native(d, cfg)
    model = Transformer(mc)
    state = load_file(str(d / "model.safetensors"))
    bad = next((k for k, v in state.items() if not bool(torch.isfinite(v).all())), None)
    if bad is not None:  # a NaN or infinity would answer every request with garbage
        raise CheckpointError(f"{d / 'model.safetensors'}: {bad} holds NaN or infinite values")
    model.load_state_dict({k: v.to(torch.float32) for k, v in state.items()})
    model.to(device=device, dtype=dtype).eval()
    return Checkpoint(
        model,
        Tokenizer.load(d / "tokenizer.json"),
        InferenceConfig.from_dict(cfg.get("inference", {})),
        cfg.get("meta", {}),
    )


def _check_native(d: Path, cfg: dict) -> ModelConfig:
    """The config describes a possible model whose every tensor is in the file, with that shape and
    a floating-point type; checked on the meta device (nothing allocated), after a layer count that
    costs nothing, so a huge or mistyped config is one line, never an allocation that takes the
    machine down."""
    from safetensors import safe_open

    weights = d / "model.safetensors"
    with safe_open(str(weights), "pt") as fh:
        stored = {k: fh.get_slice(k) for k in fh.keys()}  # noqa: SIM118 - safe_open is not a dict
    try:
        mc = ModelConfig.from_dict(cfg["model"])
        layers = len({k.split(".")[1] for k in stored if k.startswith("layers.")})
        if mc.n_layers != layers:
            raise ValueError(f"it has {mc.n_layers} layers, model.safetensors {layers}")
        with torch.device("meta"):
            shapes = {k: tuple(v.shape) for k, v in Transformer(mc).state_dict().items()}
    except Exception as e:  # noqa: BLE001 - any failure means the config is not this model
        raise CheckpointError(
            f"{d / 'config.json'} does not describe the model in {weights.name} ({e})"
        ) from None
    for name, shape in shapes.items():
        if name not in stored:
            raise CheckpointError(f"{weights} lacks tensor {name!r} that config.json needs")
        got = tuple(stored[name].get_shape())
        if got != shape:
            raise CheckpointError(f"{weights}: {name} is {list(got)} but config.json needs {list(shape)}")
        dtype = stored[name].get_dtype()
        if dtype not in ("F64", "F32", "F16", "BF16"):
            raise CheckpointError(f"{weights}: {name} holds {dtype}, not floating-point weights")
    return mc


def export_checkpoint(
    src: str | Path,
    dst: str | Path,
    dtype: torch.dtype = torch.bfloat16,
    average_with: str | Path | None = None,
    share: float = 0.5,
    **meta,
) -> Path:
    """Copy a checkpoint with weights cast to ``dtype`` (bf16 halves the shipped default's size),
    optionally averaged with ``average_with``'s weights first (``share`` is ``src``'s weight)."""
    ck = load_checkpoint(src)
    if average_with is not None:
        other = load_checkpoint(average_with)
        if other.tokenizer.vocab_size != ck.tokenizer.vocab_size:
            raise ValueError("cannot average checkpoints with different tokenizers")
        average_weights(ck.model, other, share)
        meta = {"averaged_with": f"{share:g} of {src}, {1 - share:g} of {average_with}", **meta}
    save_checkpoint(dst, ck.model, ck.tokenizer, ck.inference, {**ck.meta, **meta}, dtype=dtype)
    return Path(dst)
