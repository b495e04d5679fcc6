"""Checkpoints: the ``Checkpoint`` every loader builds, and a directory's files, checks and settings.

Our own checkpoint is a directory with ``config.json``, ``model.safetensors`` and ``tokenizer.json``;
an open-weight family's is a Hugging Face directory (model/infer/hf/). Loading either is
model/infer/loader.py's ``load_checkpoint``; this module imports no loader, so both loaders build the
one type it holds.

Design decisions:
- ``Checkpoint.model`` is typed by what serving uses of it (``ServedModel``, a Protocol), not by a
  class: it holds our ``Transformer`` (model/infer/transformer.py) or an open family's ``OpenModel``
  (model/infer/hf/model.py), and the engine, the server, the replay and the benchmarks take either
  without knowing which; ``family`` says which.
- safetensors only (no pickle): a checkpoint from anywhere can be loaded without running its code.
- Weights may be stored in bfloat16 to keep the shipped default under 48 MB; they are cast to the
  serving dtype on load.
- ``config.json`` carries the model shape, the inference settings (effort presets, the selectivity
  threshold the replay harness tuned) and free-form provenance (how it was trained).
- Damage is named before anything is allocated (``check_config``, ``check_weights`` here, the native
  loader's shape check in model/infer/loader.py; an open-weight directory's family is read first, its
  weights by its loader): a config that is not JSON, a truncated safetensors file, a config whose
  shapes the file does not hold (a huge or wrong one), integer tensors; NaN or infinite weights
  after the read. Each is a ``CheckpointError`` of one line, which ``serve`` prints with status 2.
- The serving dtype (``serving_dtype``): ``auto`` is bf16 on CUDA and on CPUs with native bf16
  (AVX-512 BF16 or AMX), else fp32. The check is duplicated from training's (model/train/loop.py),
  since serving never imports training.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import torch
from safetensors.torch import save_file

from editserver.model.infer.config import InferenceConfig
from editserver.model.infer.tokenizer import Tokenizer

if TYPE_CHECKING:  # types only: the loaders build these, this module builds none
    from editserver.model.infer.hf.tokenizer import OpenTokenizer
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


class ModelShape(Protocol):
    """What serving reads of a model's shape: ``ModelConfig`` (model/infer/config.py) for ours,
    ``OpenConfig`` (model/infer/hf/families.py) for an open family."""

    @property
    def vocab_size(self) -> int: ...
    @property
    def max_seq_len(self) -> int: ...  # the context served
    @property
    def canvas_draft(self) -> bool: ...  # takes a next-edit region as the canvas's draft


class ServedModel(Protocol):
    """What the engine and the denoising loop use of a model, ours (``Transformer``) or an open
    family's (``OpenModel``): both are ``torch.nn.Module``s; the forward passes differ per family and
    are called by that family's cache policies (model/infer/cache.py), not through this type."""

    cfg: ModelShape
    draft_bias: float  # the copy-logit bonus of a ``canvas_draft`` model, set from the inference settings

    def to(self, *args, **kwargs) -> ServedModel: ...
    def eval(self) -> ServedModel: ...
    def parameters(self, recurse: bool = True) -> Iterator[torch.nn.Parameter]: ...
    def modules(self) -> Iterator[torch.nn.Module]: ...
    def state_dict(self) -> dict[str, torch.Tensor]: ...
    def __call__(self, *args, **kwargs) -> torch.Tensor: ...


@dataclass
class Checkpoint:
    model: ServedModel
    tokenizer: Tokenizer | OpenTokenizer
    inference: InferenceConfig
    meta: dict = field(default_factory=dict)
    family: str = "editserver"  # "editserver" (ours) or an open-weight family (model/infer/hf/)

    @property
    def config(self) -> ModelShape:
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
