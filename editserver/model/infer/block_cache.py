"""The block cache: block diffusion's keys/values, each finished block entered once (a cache policy of
model/infer/cache.py's protocol, for a model with ``cfg.block_size``: model/infer/hf/model.py).

Design decisions:
- Block diffusion (SDAR, JetAstra/SDAR @c2041a8 ``generate.py`` ``block_diffusion_generate``) attends
  block-causally on an absolute grid from position 0: a block sees itself and every earlier block,
  never a later one. So a finished block's keys/values never change again, and caching them is exact
  by construction, not an approximation like the dual cache's.
- ``prepare`` runs the context's whole blocks once (the publisher's prefill of ``floor(P/b) * b``
  tokens). The rest of the context, ``P mod b`` tokens, sits in the first decode block beside the
  first masks, as in the publisher's loop: the decode places each row's canvas ``lead = P mod b``
  columns into the loop's block grid (``Member.lead``, model/infer/loop_types.py), so canvas column
  c is absolute position ``floor(P/b) * b + c`` and the loop's blocks are the publisher's.
- Each step runs only the current block against the cache, its own keys/values fresh and not kept
  (the publisher's ``store_kv=False``). The publisher then runs a full block once more to store its
  keys/values (``store_kv=True``); here that pass happens lazily, at the next block's first step,
  over every block finished since (the same numbers, computed from the same tokens). A state cut to
  some rows (``rows``) carries its own count of entered blocks, so a state the loop cuts again from
  the full one enters what it lacks itself.
- Shifted logits (Fast-dLLM v2, NVlabs/Fast-dLLM ``v2/generation_functions.py``: ``logits =
  cat([logits[:, :1], logits[:, :-1]])`` inside the block; the first token of the next block is
  ``argmax(logits[:, -1])`` of the forward that stores a finished block): canvas column j reads the
  hidden state of j - 1 under the same block-causal mask. Inside the block that is the step's own
  span; for the block's first column it is the last position entered into the cache (the context's
  last whole-block token, or the last column of the blocks entered), kept as ``last`` when it is
  entered. So the shift is exact too: ``InPlaceNoCache`` reads the same position.
- The sequence is the in-place layout's (model/infer/cache.py ``in_place``): context then canvas at
  contiguous positions; block families take no suffix (their FIM goes through the chat template).
- Across requests (``store``, model/infer/prefix.py ``lookup_blocks``): a context that shares its first
  whole blocks with a recent one takes those blocks' keys/values and computes only the blocks after
  them, against the reused ones. Exact by the same argument (nothing after a block reaches it); the
  arithmetic differs only in rounding (one span against cached keys instead of one pass), and the
  typing replay's answers are compared with reuse on and off (docs/experiments.md). Rows are then
  computed one by one; each row's blocks are kept for later requests.
- The exact reference is ``InPlaceNoCache``: the whole sequence with the block-causal mask each step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from editserver.model.infer.cache import InPlaceState, Rows, in_place, stack_rows
from editserver.model.infer.prefix import PrefixStore


@dataclass
class BlockState:
    seq: InPlaceState  # where the context and each canvas column sit (cache.py ``in_place``)
    kv: list  # per layer (k, v) [B, Hkv, Lk, D]: the context's whole blocks, then entered canvas blocks
    valid: torch.Tensor  # [B, Lk] bool: cached keys that exist (padding of shorter contexts: False)
    upto: int  # canvas columns entered into ``kv`` (columns before it are finished blocks)
    last: torch.Tensor | None = None  # [B, dim] hidden state of the last position entered (shifted logits)

    def select(self, idx: torch.Tensor) -> BlockState:
        kv = [(k[idx], v[idx]) for k, v in self.kv]
        last = None if self.last is None else self.last[idx]
        return BlockState(self.seq.select(idx), kv, self.valid[idx], self.upto, last)


@dataclass(frozen=True)
class BlockCache:
    """Context and finished blocks' keys/values computed once; a step runs only its block (module
    docstring). Exact: equals ``InPlaceNoCache`` token for token (tests/model/test_block_diffusion.py)."""

    exact: bool = True
    # recent contexts' whole blocks (model/infer/prefix.py): a request computes only the blocks after
    # the longest prefix it shares with one of them; still exact (module docstring)
    store: PrefixStore | None = field(default=None, compare=False)

    @torch.no_grad()
    def prepare(self, model: torch.nn.Module, rows: Rows) -> BlockState:
        b = model.cfg.block_size
        if not b:
            raise ValueError("the block cache needs a block-diffusion model (cfg.block_size)")
        if rows.suffix is not None and bool((rows.suffix_lens > 0).any()):
            raise ValueError("the block cache decodes a context and a canvas, no suffix")
        st = in_place(rows)
        done = st.start  # [B] sequence index of canvas column 0: the context's whole blocks
        if bool((done % b != 0).any()) or bool((done < 0).any()):
            raise ValueError("a row's canvas must start on its block grid (Member.lead = context % block)")
        A = int(done.max())
        valid = torch.arange(A, device=done.device)[None, :] < done[:, None]  # [B, A]
        if self.store is not None and A > 0:
            kv, last = _reused_blocks(model, st.static, done, self.store)
            return BlockState(st, kv, valid, 0, last)
        w = model.embed_tokens.weight
        last = w.new_zeros((len(done), model.cfg.dim))  # [B, dim]
        if A > 0:
            h, kv = model.encode(st.static[:, :A], valid)  # h [B, A, dim]
            rows = torch.arange(len(done), device=done.device)
            last = torch.where((done > 0)[:, None], h[rows, (done - 1).clamp_min(0)], last)
        else:
            kv = _empty(model, len(done))
        return BlockState(st, kv, valid, 0, last)

    def _span(self, model, state: BlockState, seq: torch.Tensor, a: int, z: int, keep: list | None):
        """Hidden states [B, z - a, dim] of canvas columns [a, z) against the cache (``keep``: their
        keys/values are appended to it)."""
        st = state.seq
        pos = st.start[:, None] + torch.arange(a, z, device=seq.device)[None, :]  # [B, n]
        exists = pos < st.valid.sum(dim=1, keepdim=True)  # [B, n] past a row's canvas: padding
        ids = seq.gather(1, pos.clamp_max(seq.shape[1] - 1))
        return model.encode_span(ids, pos, exists, state.kv, state.valid, keep), exists

    @torch.no_grad()
    def logits(self, model, state, canvas, only, draft, want) -> torch.Tensor:
        assert isinstance(state, BlockState)
        seq = state.seq.sequence(canvas)  # [B, L]
        if only.start > state.upto:  # blocks finished since the last step enter the cache once
            fresh: list = []
            hf, exists = self._span(model, state, seq, state.upto, only.start, fresh)  # [B, m, dim]
            state.last = hf[:, -1]
            state.kv = [
                (torch.cat([k, fk], 2), torch.cat([v, fv], 2)) for (k, v), (fk, fv) in zip(state.kv, fresh)
            ]
            state.valid = torch.cat([state.valid, exists], dim=1)
            state.upto = only.start
        h, _ = self._span(model, state, seq, only.start, only.stop, None)  # [B, n, dim]
        if model.cfg.shift:  # column j reads j - 1; the block's first, the last entered (module docstring)
            h = torch.cat([state.last[:, None], h[:, :-1]], dim=1)  # [B, n, dim]
        return model.head(h[want])

    def rows(self, state: object, idx: torch.Tensor) -> BlockState:
        assert isinstance(state, BlockState)
        return state.select(idx)


def _empty(model, batch: int) -> list:
    w = model.embed_tokens.weight
    empty = w.new_zeros((batch, model.cfg.n_kv_heads, 0, model.cfg.head_dim))  # [B, Hkv, 0, D]
    return [(empty, empty) for _ in model.layers]


def _reused_blocks(model, static: torch.Tensor, done: torch.Tensor, store: PrefixStore):
    """(per-layer (k, v) [B, Hkv, A, D], last hidden states [B, dim]) of each row's context blocks
    ``static[b, :done[b]]``, computing only the blocks ``store`` lacks, then keeping each row's for
    later requests (module docstring). A shifted family reads the hidden state of the last context
    position, which the store does not hold, so its last whole block is always computed."""
    b, dim = model.cfg.block_size, model.cfg.dim
    per_row, last = [], static.new_zeros((len(done), dim), dtype=model.embed_tokens.weight.dtype)
    for r, n in enumerate(done.tolist()):
        x = static[r, :n]  # [n] whole blocks
        found = store.lookup_blocks(x, b, n - b if model.cfg.shift else n) if n else None
        head, kv = 0, _empty(model, 1)
        if found is not None:
            entry, head = found
            kv = [(k[:, :, :head].to(x.device), v[:, :, :head].to(x.device)) for k, v in entry.kv]
        if head < n:  # the blocks after the shared prefix, against the reused ones
            pos = torch.arange(head, n, device=x.device)[None]  # [1, n - head]
            keep: list = []
            cached = torch.ones((1, head), dtype=torch.bool, device=x.device)
            fresh = torch.ones_like(pos, dtype=torch.bool)
            h = model.encode_span(x[None, head:], pos, fresh, kv, cached, keep)  # [1, n - head, dim]
            kv = [(torch.cat([k, fk], 2), torch.cat([v, fv], 2)) for (k, v), (fk, fv) in zip(kv, keep)]
            last[r] = h[0, -1]
        if n:
            store.put(x, kv)
        per_row.append(kv)
    return stack_rows(per_row, int(done.max())), last
