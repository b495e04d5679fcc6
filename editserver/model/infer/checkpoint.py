"""Checkpoints: a directory with ``config.json``, ``model.safetensors`` and ``tokenizer.json``.

Design decisions:
- safetensors only (no pickle): a checkpoint from anywhere can be loaded without running its code.
- Weights may be stored in bfloat16 to keep the shipped default under 48 MB; they are cast to the
  serving dtype on load.
- ``config.json`` carries the model shape, the inference settings (effort presets, the selectivity
  threshold the replay harness tuned) and free-form provenance (how it was trained).
- Damage is named before anything is allocated (``check_config``, ``check_weights``,
  ``_check_native``; an open-weight directory's family is read first, its weights by its loader): a config that
  is not JSON, a truncated safetensors file, a config whose shapes the file does not hold (a huge or
  wrong one), integer tensors; NaN or infinite weights after the read. Each is a ``CheckpointError``
  of one line, which ``serve`` prints with status 2.
- A Hugging Face directory of an open-weight diffusion family (its ``config.json`` has no ``model``
  and ``inference`` sections) loads through model/infer/hf/ into the same ``Checkpoint``, so every
  command that takes ``--model DIR`` takes either; ``family`` says which.
- The serving dtype (``serving_dtype``): ``auto`` is bf16 on CUDA and on CPUs with native bf16
  (AVX-512 BF16 or AMX), else fp32. The check is duplicated from training's (model/train/loop.py),
  since serving never imports training.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from editserver.model.infer.config import InferenceConfig, ModelConfig
from editserver.model.infer.tokenizer import Tokenizer
from editserver.model.infer.transformer import Transformer

DEFAULT_CHECKPOINT = Path(__file__).parent.parent / "checkpoints" / "default"
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def bf16_native(device: str) -> bool:
    """Whether bf16 is fast here: CUDA, or a CPU with AVX-512 BF16 or AMX."""
    if device.startswith("cuda"):
        return True
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def serving_dtype(name: str, device: str) -> torch.dtype:
    """The dtype of ``--dtype NAME`` (auto, fp32, bf16, fp16) on ``device``."""
    if name == "auto":
        return torch.bfloat16 if bf16_native(device) else torch.float32
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of auto, {', '.join(DTYPES)}, got {name!r}")
    return DTYPES[name]


@dataclass
class Checkpoint:
    model: Transformer
    tokenizer: Tokenizer
    inference: InferenceConfig
    meta: dict = field(default_factory=dict)
    family: str = "editserver"  # "editserver" (ours) or an open-weight family (model/infer/hf/)

    @property
    def config(self) -> ModelConfig:
        return self.model.cfg


def save_checkpoint(
    directory: str | Path,
    model: Transformer,
    tokenizer: Tokenizer,
    inference: InferenceConfig | None = None,
    meta: dict | None = None,
    dtype: torch.dtype = torch.float32,
) -> None:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu", dtype).contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(d / "model.safetensors"))
    tokenizer.save(d / "tokenizer.json")
    cfg = {
        "model": model.cfg.to_dict(),
        "inference": (inference or InferenceConfig()).to_dict(),
        "meta": meta or {},
    }
    (d / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")


def check_checkpoint_dir(d: Path) -> None:
    """Raise FileNotFoundError naming what ``d`` lacks to be a checkpoint directory."""
    missing = [f for f in ("config.json", "model.safetensors", "tokenizer.json") if not (d / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{d} is not a checkpoint directory (missing {', '.join(missing)})")


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be served; the message is one line naming the file."""


def check_config(d: Path) -> None:
    """``config.json``, where there is one, parses (before the family is read from it)."""
    config = d / "config.json"
    if config.is_file():
        try:
            json.loads(config.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise CheckpointError(f"{config} is not valid JSON ({e})") from None


def check_weights(d: Path) -> None:
    """Every safetensors file's header is whole: ``safe_open`` reads only the header and checks it
    covers the file, so a truncated download is named here instead of failing deep inside a load."""
    from safetensors import safe_open

    for f in sorted(d.glob("*.safetensors")):
        try:
            with safe_open(str(f), "pt"):
                pass
        except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
            raise CheckpointError(f"{f} is truncated or not a safetensors file ({e})") from None


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


def load_checkpoint(
    directory: str | Path | None = None,
    device: str = "cpu",
    dtype: torch.dtype | str = torch.float32,
    max_context: int | None = None,
    chat_template: str = "auto",
) -> Checkpoint:
    """Our checkpoint, or an open-weight model directory (model/infer/hf/) served at most
    ``max_context`` tokens of context. ``dtype`` may name one (``serving_dtype``): ``"auto"`` keeps
    our own checkpoints in fp32 (their thresholds were tuned so) and picks bf16 for open models where
    it is native. ``max_context`` None: 32K, and each open family's evaluated window
    (model/infer/hf/__init__.py). ``chat_template`` (``auto``, ``none`` or a file) applies to open models only."""
    from editserver.model.infer.hub import resolve_model

    directory = resolve_model(directory)  # a name pulled with `editserver pull`
    d = Path(directory) if directory is not None else DEFAULT_CHECKPOINT
    if not d.is_dir():
        raise FileNotFoundError(f"{d} is not a checkpoint directory (no such directory)")
    check_config(d)
    from editserver.model.infer.hf import is_open_dir, load_open_checkpoint

    if is_open_dir(d):
        dtype = serving_dtype(dtype, device) if isinstance(dtype, str) else dtype
        return load_open_checkpoint(d, device, dtype, max_context, chat_template)
    if isinstance(dtype, str):
        dtype = torch.float32 if dtype == "auto" else serving_dtype(dtype, device)
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


def update_inference_config(directory: str | Path, **changes) -> None:
    """Rewrite fields of a checkpoint's inference settings in place (used by the replay harness)."""
    path = Path(directory) / "config.json"
    cfg = json.loads(path.read_text())
    cfg.setdefault("inference", {}).update(changes)
    path.write_text(json.dumps(cfg, indent=2) + "\n")


def average_weights(model: Transformer, other: Checkpoint, share: float) -> None:
    """Set ``model``'s weights to ``share * model + (1 - share) * other``, in fp32, in place.

    Why: a continuation that gains one skill and loses another (a FIM-heavy continuation gained
    FIM and copied renames less exactly) and the model it started from lie in one basin, so their average keeps much of
    both (weight averaging, "model soups", Wortsman et al. 2022). Only checkpoints of the same
    shape and tokenizer can be averaged.
    """
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"the averaging share must be in [0, 1], got {share}")
    if other.config.to_dict() != model.cfg.to_dict():
        raise ValueError("cannot average checkpoints of different model shapes")
    theirs = other.model.state_dict()
    with torch.no_grad():
        for k, v in model.state_dict().items():
            v.copy_(share * v.float() + (1.0 - share) * theirs[k].to(v.device, torch.float32))


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
