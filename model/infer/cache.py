"""Cache policies for the denoising loop (model/infer/sampler.py): how each step gets the canvas's logits.

Design decisions:
- The loop hands a policy the rows it decodes (``Rows``: each row's context, canvas geometry and, for
  the in-place infill layout of open-weight models, the suffix after the canvas) and asks it for the
  logits of the active block's still-masked positions. How much it recomputes is its own business.
- ``ContextCache`` runs the context once and reuses its keys/values at every step. It is exact for
  this project's own transformer, whose context never attends to the canvas (transformer.py).
- ``NoCache`` recomputes the whole sequence every step: the reference the cached policies are tested
  against.
- A policy is a frozen dataclass, so a decode plan (model/infer/plan.py) holding one stays hashable.
- ``rows`` cuts a state to some of its rows: the loop computes only rows with something left to
  decide.
- Policies for other model families (the dual cache of Fast-dLLM) live beside their family and
  follow the same protocol; the loop never asks which one it has.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

import torch

from model.infer.transformer import KVCache, Transformer


@dataclass
class Rows:
    """The rows a decode runs: everything but the canvas itself."""

    context: torch.Tensor  # [B, Lc] right-padded
    context_lens: torch.Tensor  # [B]
    canvas_lens: torch.Tensor | None = None  # [B] positions of each row's canvas in use (None: all)
    canvas_pos: torch.Tensor | None = None  # [B] rotary position of the canvas start (None: after context)
    suffix: torch.Tensor | None = None  # [B, Ls] right-padded: text after the canvas (in-place infill)
    suffix_lens: torch.Tensor | None = None  # [B]

    def select(self, idx: torch.Tensor) -> Rows:
        """Rows ``idx`` [b] alone."""
        return Rows(*(None if x is None else x[idx] for x in self.__dict__.values()))

    def with_canvas_lens(self, lens: torch.Tensor) -> Rows:
        return replace(self, canvas_lens=lens)


class CachePolicy(Protocol):
    exact: bool  # answers equal NoCache's (tests hold it to that)

    def prepare(self, model: torch.nn.Module, rows: Rows) -> object:
        """State for decoding ``rows``; called again whenever the canvas grows."""
        ...

    def logits(
        self,
        model: torch.nn.Module,
        state: object,
        canvas: torch.Tensor,
        only: slice,
        draft: torch.Tensor | None,
        want: torch.Tensor,
    ) -> torch.Tensor:
        """Logits [M, V] of the canvas [B, N] positions ``only`` (the active block) that ``want``
        [B, n] marks (M of them, row-major); draft [B, N] or None."""
        ...

    def rows(self, state: object, idx: torch.Tensor) -> object:
        """The state of rows ``idx`` [b] alone (rows of ``state``)."""
        ...


@dataclass(frozen=True)
class ContextCache:
    """Context keys/values computed once per request; each step runs only the canvas."""

    exact: bool = True

    def prepare(self, model: Transformer, rows: Rows) -> KVCache:
        kv = model.encode_context(rows.context, rows.context_lens, rows.canvas_pos)
        return replace(kv, canvas_lens=rows.canvas_lens)

    def logits(
        self,
        model: Transformer,
        state: object,
        canvas: torch.Tensor,
        only: slice,
        draft: torch.Tensor | None,
        want: torch.Tensor,
    ) -> torch.Tensor:
        assert isinstance(state, KVCache)
        return model.forward_canvas(canvas, state, only, draft, want)

    def rows(self, state: object, idx: torch.Tensor) -> KVCache:
        assert isinstance(state, KVCache)
        return state.rows(idx)


@dataclass(frozen=True)
class NoCache:
    """Recompute context and canvas every step (the reference for the cache's exactness)."""

    exact: bool = True

    def prepare(self, model: Transformer, rows: Rows) -> Rows:
        if not bool((rows.context_lens == rows.context.shape[1]).all()):
            raise ValueError("NoCache needs rows of equal context length")
        return rows

    @torch.no_grad()
    def logits(
        self,
        model: Transformer,
        state: object,
        canvas: torch.Tensor,
        only: slice,
        draft: torch.Tensor | None,
        want: torch.Tensor,
    ) -> torch.Tensor:
        assert isinstance(state, Rows)
        context = state.context
        ids = torch.cat([context, canvas], dim=1)  # [B, Lc + N]
        ctx = torch.full((ids.shape[0],), context.shape[1], device=ids.device)
        if draft is not None:  # [B, Lc + N]: no draft over the context
            draft = torch.cat([torch.full_like(context, -1), draft[:, : canvas.shape[1]]], dim=1)
        # keys past a row's canvas are padding
        seq = None if state.canvas_lens is None else ctx + state.canvas_lens
        logits = model(ids, context_lens=ctx, seq_lens=seq, canvas_pos=state.canvas_pos, draft=draft)
        return logits[:, context.shape[1] :][:, only][want]

    def rows(self, state: object, idx: torch.Tensor) -> Rows:
        assert isinstance(state, Rows)
        return state.select(idx)
