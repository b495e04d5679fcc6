"""What the one denoising loop (model/infer/sampler.py) takes and gives: plain data, no loop.

Design decisions:
- A caller hands the loop a ``Member``: its rows (model/infer/cache.py ``Rows``), its canvas length,
  the canvas's first width and its ``Hooks``; the loop sets the member's place in the decode and its
  counts, and gives it a ``SampleResult`` (tokens, confidences and the step counts together) the
  moment its rows are all committed.
- ``Hooks`` are how a caller watches and steers its rows, every one optional and each seeing only
  the caller's own rows and canvas: ``observe`` the canvas after every step (streaming, recording),
  ``done`` rows to end early (a stop sequence in the committed text, a length-ensemble row that can
  no longer win: model/infer/early_stop.py), ``draft`` a ``canvas_draft`` model's region tokens
  (model/infer/draft.py), ``should_stop`` cancellation.
- ``Tokens`` names the ids the loop treats specially: the mask, end-of-text, and the layout tags it
  never proposes.
- ``Canvas`` is the loop's own state, one tensor per fact about a position ([B, N] each), so
  cutting rows or columns is the same operation on every field.
- Kept apart from the loop so each module reads whole (the house limit of 500 lines a file); the
  loop's steps and its ``Decode`` stay together in sampler.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from editserver.model.infer.cache import Rows


@dataclass
class Hooks:
    """How a caller watches and steers a decode; every hook is optional."""

    observe: Callable[[torch.Tensor], None] | None = None  # canvas [B, N] after each step
    # (canvas [B, N], fixed [B, N], conf [B, N]) -> [B] bool: rows to end now
    done: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    # (canvas [B, N], fixed [B, N]) -> [B, N] region token per position (-1: none)
    draft: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    should_stop: Callable[[], bool] | None = None


@dataclass(frozen=True)
class Tokens:
    mask_id: int
    eot_id: int
    suppress_ids: tuple[int, ...] = ()  # never proposed (layout tags)


@dataclass
class SampleResult:
    tokens: torch.Tensor  # [B, N]; end-of-text after each row's answer
    confidences: torch.Tensor  # [B, N]; probability of each token when it was committed
    lengths: torch.Tensor  # [B]; tokens before the first end-of-text
    steps: int  # denoising steps (model calls over the canvas)
    model_calls: int  # steps plus context passes
    finished: torch.Tensor  # [B] bool; True when the row reached end-of-text
    cancelled: bool = False
    row_steps: int = 0  # canvas rows the steps computed
    width: int = 0  # how wide the canvas grew


@dataclass
class Canvas:
    """The loop's state: every position's token, whether it is committed, and its confidence."""

    tokens: torch.Tensor  # [B, N]
    fixed: torch.Tensor  # [B, N] bool
    conf: torch.Tensor  # [B, N] probability when committed (1 where filled with end-of-text)
    prev: torch.Tensor  # [B, N] last step's prediction at still-masked positions; -1: none
    real: torch.Tensor  # [B, N] bool: positions of each row's own canvas


@dataclass
class Member:
    """One caller's rows in a decode (a request and its extra one-line canvases), decoded as if alone:
    its hooks see its rows and canvas only, and ``on_done`` gets its result once its rows are done."""

    rows: Rows  # its rows, in its own canvas coordinates
    canvas_len: int  # N of its canvas; ``rows.canvas_lens[b]`` for row b
    first_width: int | None = None  # its canvas's first width (None: all of it at once)
    hooks: Hooks = field(default_factory=Hooks)
    on_done: Callable[[Member], None] | None = None
    # columns of the decode's block grid before its canvas (committed, outside it): a block-diffusion
    # row whose context ends mid-block starts its canvas there (model/infer/block_cache.py)
    lead: int = 0
    result: SampleResult | None = None
    # set by the decode: its first row, its canvas start (the block it joined at), its counts
    at: int = 0
    offset: int = 0
    steps: int = 0
    row_steps: int = 0
    calls: int = 0
    cancelled: bool = False

    @property
    def size(self) -> int:
        return self.rows.context.shape[0]
