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
- In-place infill (open-weight families, model/infer/hf/): each row's sequence is ``prefix, its
  canvas in use, suffix`` at contiguous positions, right-padded, attended fully (no causal mask). The
  answer at canvas position j is read from the hidden state at j, or at j - 1 for a family whose
  logits are shifted (``model.cfg.shift``). The policy reads the shift; the loop never does.
- ``InPlaceNoCache`` recomputes every row's whole sequence at every step: exact, the reference.
- ``DualCache`` is Fast-dLLM's dual cache (Wu et al. 2025): at the first step of each block (and
  after ``prepare``, which the loop calls again when the canvas grows and the suffix moves) the whole
  sequence runs once and every layer's keys/values are kept; the block's other steps run only the
  block (plus the position before it when logits are shifted) against those cached keys/values, with
  the block's own recomputed. It equals ``InPlaceNoCache`` whenever every block is decided in its
  first step (block size 1 with one token a step, or a rule that commits the whole block at once:
  tests/model/test_hf_cache.py). It differs when a block takes several steps: the prefix, suffix and
  other blocks' keys/values then still reflect the block as it was at its first step (masks where
  tokens have since been committed), the approximation Fast-dLLM measured as nearly free.
- Either cached policy may hold a ``PrefixStore`` (model/infer/prefix.py): ``ContextCache`` then
  computes only the context positions a recent context does not supply, ``DualCache`` its first
  refresh likewise (and always the canvas). A policy with a store is not exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol

import torch

from editserver.model.infer.prefix import KV, PrefixStore
from editserver.model.infer.transformer import KVCache, Transformer


@dataclass
class Rows:
    """The rows a decode runs: everything but the canvas itself."""

    context: torch.Tensor  # [B, Lc] right-padded
    context_lens: torch.Tensor  # [B]
    canvas_lens: torch.Tensor | None = None  # [B] positions of each row's canvas in use (None: all)
    canvas_pos: torch.Tensor | None = None  # [B] rotary position of the canvas start (None: after context)
    suffix: torch.Tensor | None = None  # [B, Ls] right-padded: text after the canvas (in-place infill)
    suffix_lens: torch.Tensor | None = None  # [B]
    # [B] canvas index where each row's own canvas starts (None: 0). A row that joined a running decode
    # (sampler.py ``Decode.join``) starts at the block the others had reached; the positions before
    # are not part of its sequence: key-masked (own transformer) or left out (in-place families)
    canvas_from: torch.Tensor | None = None

    def select(self, idx: torch.Tensor) -> Rows:
        """Rows ``idx`` [b] alone."""
        return Rows(*(None if x is None else x[idx] for x in self.__dict__.values()))

    def with_canvas_lens(self, lens: torch.Tensor) -> Rows:
        return replace(self, canvas_lens=lens)

    def canvas_start(self) -> torch.Tensor:
        """[B] rotary position of canvas index 0: shifted back by ``canvas_from``, so the row's own first
        canvas token keeps the position it has alone."""
        pos = self.context_lens if self.canvas_pos is None else self.canvas_pos
        return pos if self.canvas_from is None else pos - self.canvas_from

    @staticmethod
    def cat(parts: list[Rows], pad: int) -> Rows:
        """The rows of ``parts`` in order, contexts and suffixes right-padded with ``pad``."""

        def padded(xs: list[torch.Tensor]) -> torch.Tensor:
            L = max(x.shape[1] for x in xs)
            return torch.cat([torch.nn.functional.pad(x, (0, L - x.shape[1]), value=pad) for x in xs])

        def joined(name: str, default) -> torch.Tensor | None:
            xs = [getattr(p, name) for p in parts]
            if all(x is None for x in xs):
                return None
            return torch.cat([default(p) if x is None else x for p, x in zip(parts, xs)])

        has_suffix = any(p.suffix is not None for p in parts)
        dev = parts[0].context.device
        return Rows(
            padded([p.context for p in parts]),
            torch.cat([p.context_lens for p in parts]),
            joined("canvas_lens", lambda p: torch.full_like(p.context_lens, -1)),
            joined("canvas_pos", lambda p: p.context_lens),
            padded([p.suffix if p.suffix is not None else p.context[:, :0] for p in parts])
            if has_suffix
            else None,
            joined("suffix_lens", lambda p: torch.zeros_like(p.context_lens)) if has_suffix else None,
            joined("canvas_from", lambda p: torch.zeros(len(p.context_lens), dtype=torch.long, device=dev)),
        )


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


def stack_rows(per_row: list[KV], length: int) -> KV:
    """Rows' per-layer (k, v) [1, Hkv, L_b, D] stacked into [B, Hkv, length, D], zero-padded."""
    out = []
    for layer in range(len(per_row[0])):
        k0 = per_row[0][layer][0]
        shape = (len(per_row), k0.shape[1], length, k0.shape[3])
        k, v = k0.new_zeros(shape), k0.new_zeros(shape)
        for b, kv in enumerate(per_row):
            n = kv[layer][0].shape[2]
            k[b, :, :n], v[b, :, :n] = kv[layer][0][0], kv[layer][1][0]
        out.append((k, v))
    return out


def _row_kv(kv: KV, b: int, n: int) -> KV:
    """Row ``b``'s first ``n`` positions of batched per-layer (k, v) [B, Hkv, L, D]."""
    return [(k[b : b + 1, :, :n], v[b : b + 1, :, :n]) for k, v in kv]


def _reused_context(model: Transformer, rows: Rows, store: PrefixStore) -> KVCache:
    """``encode_context`` of ``rows`` computing only what ``store`` does not hold (model/infer/prefix.py)."""
    lens = rows.context_lens.tolist()
    ids = [rows.context[b, : lens[b]] for b in range(len(lens))]
    found = [store.lookup(x, None, 0) for x in ids]  # the context holds no canvas: any end may be reused
    if not any(found):  # nothing to reuse: one batched pass, as without a store
        kv = model.encode_context(rows.context, rows.context_lens, rows.canvas_start())
        for b, x in enumerate(ids):
            store.put(x, _row_kv(list(zip(kv.keys, kv.values)), b, lens[b]))
        return kv
    per_row = []
    for b, x in enumerate(ids):
        r = found[b] if found[b] is not None or b == 0 else store.lookup(x, None, 0)  # an earlier row's
        if r is None:
            one = model.encode_context(x[None])
            kv = list(zip(one.keys, one.values))
        else:
            past, new = r.kv(model.cfg.head_dim, model.cfg.rope_theta), r.fresh.to(x.device)  # [n]
            fresh = model.extend_context(x[None, new], past, new) if len(new) else []
            kv = r.assemble(past, fresh)
        store.put(x, kv)
        per_row.append(kv)
    kv = stack_rows(per_row, rows.context.shape[1])
    valid = (
        torch.arange(rows.context.shape[1], device=rows.context.device)[None, :] < rows.context_lens[:, None]
    )
    return KVCache([k for k, _ in kv], [v for _, v in kv], valid, rows.context_lens, rows.canvas_start())


@dataclass(frozen=True)
class ContextCache:
    """Context keys/values computed once per request; each step runs only the canvas. With a
    ``store``, a context computes only what recent requests did not (model/infer/prefix.py)."""

    exact: bool = True
    store: PrefixStore | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.store is not None:  # reused keys/values were computed beside other text
            object.__setattr__(self, "exact", False)

    def prepare(self, model: Transformer, rows: Rows) -> KVCache:
        if self.store is None:
            kv = model.encode_context(rows.context, rows.context_lens, rows.canvas_start())
        else:
            kv = _reused_context(model, rows, self.store)
        return replace(kv, canvas_lens=rows.canvas_lens, canvas_from=rows.canvas_from)

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
        if rows.canvas_from is not None and bool((rows.canvas_from > 0).any()):
            raise ValueError("NoCache decodes rows that start together (no joining a running decode)")
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


@dataclass
class InPlaceState:
    """Rows laid out in place: each row's ``prefix, canvas, suffix`` in one right-padded sequence."""

    static: torch.Tensor  # [B, L] prefix and suffix tokens; canvas slots and padding hold anything
    slot: torch.Tensor  # [B, L] canvas index of each canvas slot (0 elsewhere)
    on_canvas: torch.Tensor  # [B, L] bool
    valid: torch.Tensor  # [B, L] bool: not padding
    start: (
        torch.Tensor
    )  # [B] sequence index of canvas index 0 (a row's first canvas token, unless it joined late)
    kv: list | None = None  # DualCache: every layer's keys/values of the last refresh
    block: tuple[int, int] | None = None  # DualCache: the block those keys/values were computed for

    def select(self, idx: torch.Tensor) -> InPlaceState:
        kv = None if self.kv is None else [(k[idx], v[idx]) for k, v in self.kv]
        return InPlaceState(
            self.static[idx],
            self.slot[idx],
            self.on_canvas[idx],
            self.valid[idx],
            self.start[idx],
            kv,
            self.block,
        )

    def sequence(self, canvas: torch.Tensor) -> torch.Tensor:
        """[B, L] the rows' tokens with the canvas [B, W] in place."""
        placed = canvas.gather(1, self.slot.clamp_max(canvas.shape[1] - 1))
        return torch.where(self.on_canvas, placed, self.static)


def in_place(rows: Rows) -> InPlaceState:
    """The in-place state of ``rows``: canvas of ``rows.canvas_lens`` between context and suffix."""
    B, Lc = rows.context.shape
    dev = rows.context.device
    lp = rows.context_lens
    cl = rows.canvas_lens if rows.canvas_lens is not None else torch.zeros_like(lp)
    if rows.suffix is None:
        suffix, ls = torch.zeros((B, 1), dtype=torch.long, device=dev), torch.zeros_like(lp)
    else:
        suffix, ls = rows.suffix, rows.suffix_lens
    # a row that joined a running decode: its canvas index ``off`` is its own position 0
    off = rows.canvas_from if rows.canvas_from is not None else torch.zeros_like(lp)
    total = lp + cl + ls  # [B]
    pos = torch.arange(int(total.max()), device=dev)[None, :]  # [1, L]
    in_prefix = pos < lp[:, None]
    on_canvas = ~in_prefix & (pos < (lp + cl)[:, None])
    in_suffix = (pos >= (lp + cl)[:, None]) & (pos < total[:, None])
    pre = rows.context.gather(1, pos.clamp_max(Lc - 1).expand(B, -1))
    suf = suffix.gather(1, (pos - (lp + cl)[:, None]).clamp(0, suffix.shape[1] - 1))
    static = torch.where(in_prefix, pre, torch.where(in_suffix, suf, 0))
    slot = (pos - lp[:, None] + off[:, None]).clamp_min(0) * on_canvas
    # ``start`` is where canvas index 0 would sit, so canvas index j reads sequence index start + j
    return InPlaceState(static, slot, on_canvas, pos < total[:, None], lp - off)


def _read(model: torch.nn.Module, state: InPlaceState, h: torch.Tensor, only: slice, want: torch.Tensor):
    """Logits [M, V] of the block's wanted positions from hidden states h [B, L, dim] of whole rows."""
    n = only.stop - only.start
    shift = int(model.cfg.shift)
    at = state.start[:, None] + only.start - shift + torch.arange(n, device=h.device)[None, :]  # [B, n]
    at = at.clamp(0, h.shape[1] - 1)  # positions past a row's canvas are never wanted
    picked = h.gather(1, at[..., None].expand(-1, -1, h.shape[-1]))  # [B, n, dim]
    return model.head(picked[want])


class _InPlace:
    """What every in-place policy shares: the state of whole rows, cut to some of them."""

    def prepare(self, model: torch.nn.Module, rows: Rows) -> InPlaceState:
        return in_place(rows)

    def rows(self, state: object, idx: torch.Tensor) -> InPlaceState:
        assert isinstance(state, InPlaceState)
        return state.select(idx)


@dataclass(frozen=True)
class InPlaceNoCache(_InPlace):
    """In-place infill recomputed whole at every step: the exact reference (module docstring)."""

    exact: bool = True

    @torch.no_grad()
    def logits(self, model, state, canvas, only, draft, want) -> torch.Tensor:
        assert isinstance(state, InPlaceState)
        h, _ = model.encode(state.sequence(canvas), state.valid)
        return _read(model, state, h, only, want)


def _reused_refresh(model, state: InPlaceState, seq: torch.Tensor, only: slice, store: PrefixStore):
    """The dual cache's first refresh, hidden states [B, L, dim] and every layer's (k, v)
    [B, Hkv, L, D], computing only what ``store`` lacks: from the first difference on, and always the
    canvas (and the position before it when logits are shifted)."""
    B, L = seq.shape
    lens = state.valid.sum(dim=1).tolist()
    limits = (state.start + only.start - int(model.cfg.shift)).clamp_min(0).tolist()
    idx = torch.arange(L, device=seq.device)[None, :]
    ends = torch.where(state.on_canvas, idx + 1, 0).max(dim=1).values.tolist()  # after each canvas
    ids = [seq[b, : lens[b]] for b in range(B)]
    found = [store.lookup(x, limits[b], ends[b]) for b, x in enumerate(ids)]
    if not any(found):  # nothing to reuse: one batched pass, as without a store
        h, kv = model.encode(seq, state.valid)
        for b, x in enumerate(ids):
            store.put(x, _row_kv(kv, b, lens[b]))
        return h, kv
    h = torch.zeros((B, L, model.cfg.dim), dtype=model.embed_tokens.weight.dtype, device=seq.device)
    per_row = []
    for b, x in enumerate(ids):
        r = found[b] if found[b] is not None or b == 0 else store.lookup(x, limits[b], ends[b])
        if r is None:
            hb, kv = model.encode(x[None])
            h[b, : lens[b]] = hb[0]
        else:
            # the fresh positions include the canvas (and the token before it when logits shift)
            past, new, fresh = r.kv(model.cfg.head_dim, model.cfg.rope_theta), r.fresh.to(seq.device), []
            ones = torch.ones((1, lens[b]), dtype=torch.bool, device=seq.device)
            h[b, new] = model.encode_span(
                x[None, new], new[None], ones[:, new], past, ones[:, : r.tokens], fresh
            )[0]
            kv = r.assemble(past, fresh)
        store.put(x, kv)
        per_row.append(kv)
    return h, stack_rows(per_row, L)


@dataclass(frozen=True)
class DualCache(_InPlace):
    """Fast-dLLM's dual cache for in-place infill: prefix and suffix keys/values reused within a block.
    With a ``store``, a request's first refresh computes only what recent requests did not
    (model/infer/prefix.py)."""

    exact: bool = False
    store: PrefixStore | None = field(default=None, compare=False)

    @torch.no_grad()
    def logits(self, model, state, canvas, only, draft, want) -> torch.Tensor:
        assert isinstance(state, InPlaceState)
        seq = state.sequence(canvas)  # [B, L]
        block = (only.start, only.stop)
        if state.kv is None and self.store is not None:  # a request's first refresh
            h, state.kv = _reused_refresh(model, state, seq, only, self.store)
            state.block = block
            return _read(model, state, h, only, want)
        if state.kv is None or state.block != block:  # a new block: refresh every key/value
            h, state.kv = model.encode(seq, state.valid)
            state.block = block
            return _read(model, state, h, only, want)
        B, L = seq.shape
        shift = int(model.cfg.shift)
        n = only.stop - only.start + shift
        first = state.start + only.start - shift  # [B] span start (the position before the block if shifted)
        pos = first[:, None] + torch.arange(n, device=seq.device)[None, :]  # [B, n]
        exists = (pos >= 0) & (pos < state.valid.sum(dim=1, keepdim=True))  # [B, n]
        pos = pos.clamp(0, L - 1)
        idx = torch.arange(L, device=seq.device)[None, :]
        in_span = (idx >= first[:, None]) & (idx < (first + n)[:, None])  # [B, L]
        h = model.encode_span(
            seq.gather(1, pos), pos, exists, state.kv, state.valid & ~in_span
        )  # [B, n, dim]
        return model.head(h[:, : only.stop - only.start][want])
