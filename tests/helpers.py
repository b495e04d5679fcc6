"""Test helpers: the denoising loop called with loose keyword arguments, as most sampler tests want,
and ``editserver serve`` refusing its arguments through the real CLI.

``denoise`` here builds the decode plan, rows and hooks the loop takes (model/infer/sampler.py) and
records every intermediate canvas, so tests can check the loop's invariants step by step.
"""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import torch

from editserver.model.infer.cache import ContextCache, Rows
from editserver.model.infer.loop_types import Hooks, Tokens
from editserver.model.infer.plan import DecodePlan, Sampling
from editserver.model.infer.sampler import denoise as loop
from editserver.model.infer.unmasking import ThresholdRule


def denoise(
    model,
    context: torch.Tensor,  # [B, Lc]
    context_lens: torch.Tensor,  # [B]
    canvas_len: int,
    *,
    mask_id: int,
    eot_id: int,
    block_size: int = 32,
    rule=ThresholdRule(0.9),
    cache=None,
    temperature: float = 0.0,
    top_p: float = 1.0,
    presence_penalty: float = 0.0,
    suppress_ids=(),
    generator: torch.Generator | None = None,
    record: bool = False,
    on_step=None,
    should_stop=None,
    done=None,
    canvas_pos=None,
    draft=None,
    canvas_lens=None,
    first_width: int | None = None,
):
    canvases: list[torch.Tensor] = []

    def observe(canvas: torch.Tensor) -> None:
        if record:
            canvases.append(canvas.clone())
        if on_step is not None:
            on_step(canvas)

    plan = DecodePlan(
        "fim",
        "test",
        rule,
        block_size,
        cache or ContextCache(),
        Sampling(temperature, top_p, presence_penalty),
    )
    res = loop(
        model,
        Rows(context, context_lens, canvas_lens, canvas_pos),
        canvas_len,
        plan,
        Tokens(mask_id, eot_id, tuple(suppress_ids or ())),
        first_width=first_width,
        generator=generator,
        hooks=Hooks(observe=observe, done=done, draft=draft, should_stop=should_stop),
    )
    return SimpleNamespace(**res.__dict__, canvases=canvases)


def serve_refusal(*args: str) -> str:
    """``editserver serve ARGS --port 0`` through the real CLI, which must refuse them: exit status 2, no
    traceback, and exactly one ``editserver serve:`` line on stderr, which is returned."""
    cmd = [sys.executable, "-m", "editserver.cli.main", "serve", *args, "--port", "0"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    lines = [x for x in out.stderr.splitlines() if x.startswith("editserver serve:")]
    assert out.returncode == 2, out.stderr
    assert len(lines) == 1, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    return lines[0]
