"""A tiny DreamOn-v0-7B directory (tests/hf_models.py ``PUBLISHED``) whose random weights are nudged so
the model edits its canvas: the lm_head rows of ``<|expand|>`` and end-of-text are scaled, which
scales those two logits at every position (a logit is the row's dot product with the hidden state).
Where the product is positive the token gains, elsewhere it loses, so which positions expand or
delete still depends on the text: with the default scales, "x = " before "\\n" gets a 3-token answer
and "def add(a, b):\\n    return " before "\\n" a 16-token one, both from a 4-mask start."""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import load_file, save_file

from tests.hf_models import make_published

NAME = "DreamOn-v0-7B"
EXPAND, EOS = "<|expand|>", "<|endoftext|>"


def scale_rows(d: Path, scales: dict[int, float]) -> None:
    """Multiply rows of the directory's ``lm_head.weight`` in place, in whichever shard holds it."""
    index = json.loads((d / "model.safetensors.index.json").read_text())
    shard = d / index["weight_map"]["lm_head.weight"]
    state = load_file(str(shard))
    for row, s in scales.items():
        state["lm_head.weight"][row] *= s
    save_file(state, str(shard), metadata={"format": "pt"})


def make_dreamon(root: Path, expand: float = 3.0, eos: float = 1.45) -> Path:
    """The published layout with the two rows scaled (module docstring); returns the directory."""
    d, _ = make_published(root, NAME)
    added = json.loads((d / "added_tokens.json").read_text())
    scale_rows(d, {added[EXPAND]: expand, added[EOS]: eos})
    return d
