"""Loading a Hugging Face diffusion model directory into our own modules, without running its code.

Design decisions:
- Only ``config.json``, ``*.safetensors`` (one file, or shards listed by
  ``model.safetensors.index.json``) and the tokenizer files (``tokenizer.json``, or ``vocab.json`` +
  ``merges.txt``; ``tokenizer_config.json``, ``chat_template.jinja``: model/infer/hf/tokenizer.py) are
  read; modelling files and ``auto_map`` entries are ignored, never imported.
- Never two full copies in memory: the module is built on the meta device (no storage), then every
  tensor is read from a memory-mapped shard (``safetensors.safe_open``), cast once to the serving
  dtype and moved to the device, and assigned as the parameter; each shard's mapping is closed before
  the next one opens. Peak memory is the weights in the serving dtype plus about one shard's
  mapped pages (tests/model/test_hf_load.py measures it).
- A fused tensor (LLaDA2's ``query_key_value``) is cut into the parameters it stacks by a
  per-family hook (model/infer/hf/families.py ``splitter``), so the loader names no family: each part
  is a row slice read from the memory-mapped shard.
- Every way a directory can be wrong is a ``ValueError``/``FileNotFoundError`` with one clear line: a
  shard the index names but the directory lacks, a tensor whose shape disagrees with the config, a
  tensor missing or left over, a vocabulary smaller than the tokenizer's ids, an unknown family.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

from editserver.model.infer.hf.families import OpenConfig, renamer, splitter
from editserver.model.infer.hf.model import OpenModel

WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"


def shard_files(d: Path) -> list[Path]:
    """The safetensors files of a directory, in index order; FileNotFoundError naming a missing one."""
    if (d / INDEX).is_file():
        index = json.loads((d / INDEX).read_text())
        names = sorted(set(index.get("weight_map", {}).values()))
        if not names:
            raise ValueError(f"{d / INDEX} lists no weights")
        missing = [n for n in names if not (d / n).is_file()]
        if missing:
            raise FileNotFoundError(f"{d} lacks the shard(s) {', '.join(missing)} named by {INDEX}")
        return [d / n for n in names]
    if (d / WEIGHTS).is_file():
        return [d / WEIGHTS]
    raise FileNotFoundError(f"{d} has no {WEIGHTS} and no {INDEX}")


def load_weights(d: Path, cfg: OpenConfig, device: str, dtype: torch.dtype) -> OpenModel:
    """Our module with the directory's weights, cast to ``dtype`` on ``device``."""
    with torch.device("meta"):
        model = OpenModel(cfg)
    expected = dict(model.state_dict())  # meta tensors: shapes only
    rename, split, seen = renamer(cfg.family), splitter(cfg), set()
    for path in shard_files(d):
        with _open(path) as f:
            for name in f.keys():
                ours = rename(name)
                if ours is None or (ours == "lm_head.weight" and cfg.tie_embeddings):
                    continue  # rotary buffers; a tied head stored anyway
                parts = split(ours)  # [(parameter, rows)]: a fused tensor fills several
                if any(p not in expected for p, _ in parts):
                    raise ValueError(f"unexpected tensor {name!r} in {path.name} for a {cfg.family} model")
                sl = f.get_slice(name)
                shape, want = tuple(sl.get_shape()), _fused_shape(expected, parts)
                if shape != want:
                    raise ValueError(
                        f"tensor {name!r} in {path.name} has shape {list(shape)}, the config says {list(want)}"
                    )
                for p, rows in parts:
                    value = f.get_tensor(name) if rows is None else sl[rows]
                    _assign(model, p, value.to(device=device, dtype=dtype))
                    seen.add(p)
    missing = sorted(set(expected) - seen)
    if missing:
        raise ValueError(f"{d} lacks weights: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    return model.eval()


def _fused_shape(expected: dict, parts: list[tuple[str, slice | None]]) -> tuple[int, ...]:
    """The stored shape ``parts`` (model/infer/hf/families.py ``splitter``) come from: one parameter's
    own, or its rows stacked along dim 0."""
    first = tuple(expected[parts[0][0]].shape)
    if parts[0][1] is None:
        return first
    return (sum(int(expected[p].shape[0]) for p, _ in parts), *first[1:])


def _open(path: Path):
    """A memory-mapped safetensors file; ValueError (one line) when it cannot be read."""
    try:
        return safe_open(str(path), framework="pt", device="cpu")
    except Exception as exc:  # SafetensorError derives from Exception only
        raise ValueError(f"cannot read {path}: {exc}") from None


def _assign(model: torch.nn.Module, name: str, value: torch.Tensor) -> None:
    owner, _, leaf = name.rpartition(".")
    module = model.get_submodule(owner) if owner else model
    setattr(module, leaf, torch.nn.Parameter(value, requires_grad=False))


def weight_bytes(d: Path) -> int:
    """Bytes of tensor data in the directory's safetensors files (headers excluded)."""
    total = 0
    for path in shard_files(d):
        with _open(path) as f:
            for name in f.keys():
                sl = f.get_slice(name)
                n = 1
                for s in sl.get_shape():
                    n *= s
                total += n * _itemsize(sl.get_dtype())
    return total


def _itemsize(name: str) -> int:
    return {"F64": 8, "F32": 4, "I64": 8, "I32": 4, "F16": 2, "BF16": 2, "I16": 2, "U8": 1, "I8": 1}.get(
        name, 4
    )
