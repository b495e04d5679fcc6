"""Cache policies for the denoising loop (model/sampler.py): how each step gets the canvas's logits.

Design decisions:
- ``ContextCache`` runs the context once and reuses its keys/values at every step (exact, because the
  model's context never attends to the canvas; transformer.py).
- ``NoCache`` recomputes the whole sequence every step; it exists to test that the cache is exact.
- ``rows`` cuts a state to some of its rows, in any order and with repeats: the loop computes only
  rows with something left to decide, and lookahead (model/lookahead.py) runs several variants of one
  row side by side on that row's context.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

import torch

from model.transformer import KVCache, Transformer


class CachePolicy(Protocol):
    def prepare(
        self,
        model: Transformer,
        context: torch.Tensor,
        lengths: torch.Tensor,
        canvas_pos: torch.Tensor | None,
        canvas_lens: torch.Tensor | None,
    ) -> object: ...

    def logits(
        self,
        model: Transformer,
        state: object,
        canvas: torch.Tensor,
        only: slice,
        draft: torch.Tensor | None,
        want: torch.Tensor,
        hidden: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Logits [M, V] of the canvas positions ``only`` (the active block) that ``want`` [B, n]
        marks (M of them, row-major); draft [B, N] or None. ``hidden``: also the final hidden
        states [B, n, dim] of ``only``'s positions (lookahead's drafter, model/drafter.py)."""
        ...

    def rows(self, state: object, idx: torch.Tensor) -> object:
        """The state of rows ``idx`` [b] alone (rows of ``state``)."""
        ...


class ContextCache:
    """Context keys/values computed once per request; each step runs only the canvas."""

    def prepare(
        self,
        model: Transformer,
        context: torch.Tensor,
        lengths: torch.Tensor,
        canvas_pos: torch.Tensor | None,
        canvas_lens: torch.Tensor | None,
    ) -> KVCache:
        return replace(model.encode_context(context, lengths, canvas_pos), canvas_lens=canvas_lens)

    def logits(
        self,
        model: Transformer,
        state: object,
        canvas: torch.Tensor,
        only: slice,
        draft: torch.Tensor | None,
        want: torch.Tensor,
        hidden: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        assert isinstance(state, KVCache)
        return model.forward_canvas(canvas, state, only, draft, want, hidden)

    def rows(self, state: object, idx: torch.Tensor) -> KVCache:
        assert isinstance(state, KVCache)
        return state.rows(idx)


class NoCache:
    """Recompute context and canvas every step (reference for the cache's exactness)."""

    def prepare(
        self,
        model: Transformer,
        context: torch.Tensor,
        lengths: torch.Tensor,
        canvas_pos: torch.Tensor | None,
        canvas_lens: torch.Tensor | None,
    ) -> object:
        if not bool((lengths == context.shape[1]).all()):
            raise ValueError("NoCache needs rows of equal context length")
        return context, canvas_pos, canvas_lens

    @torch.no_grad()
    def logits(
        self,
        model: Transformer,
        state: object,
        canvas: torch.Tensor,
        only: slice,
        draft: torch.Tensor | None,
        want: torch.Tensor,
        hidden: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        assert isinstance(state, tuple)
        context, canvas_pos, canvas_lens = state
        ids = torch.cat([context, canvas], dim=1)
        ctx = torch.full((ids.shape[0],), context.shape[1], device=ids.device)
        if draft is not None:  # [B, Lc + N]: no draft over the context
            draft = torch.cat([torch.full_like(context, -1), draft[:, : canvas.shape[1]]], dim=1)
        seq = None if canvas_lens is None else ctx + canvas_lens  # keys past a row's canvas: padding
        logits, h = model(
            ids, context_lens=ctx, seq_lens=seq, canvas_pos=canvas_pos, draft=draft, return_hidden=True
        )
        Lc = context.shape[1]
        out = logits[:, Lc:][:, only][want]
        return (out, h[:, Lc:][:, only]) if hidden else out

    def rows(self, state: object, idx: torch.Tensor) -> object:
        assert isinstance(state, tuple)
        return tuple(None if x is None else x[idx] for x in state)
