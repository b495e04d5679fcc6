"""Context reuse across requests: every layer's keys/values of recent contexts, keyed by their tokens.

Two keystrokes apart, a document's requests share most of their tokens, so the second need not
recompute what the first computed. Design decisions:
- ``PrefixStore`` keeps, per recent sequence of token ids, each layer's keys/values [Hkv, L, D] of
  that one row, under a byte bound with least-recently-used eviction. It knows nothing of documents:
  a request finds the entry that shares the most tokens with it, so two documents typed at once each
  find their own (their first tokens already differ), and an entry never feeds a request it shares
  too little with (``min_reuse``).
- What is reused (``Reuse``): the longest common prefix at the same positions (``head``), then, when
  the layout moved the tokens that follow (a fixed window around the cursor drops the far end of the
  prefix as the user types, model/infer/layout.py), the longest run of old tokens ``shift`` positions
  further on (``run``). Everything after the first difference is recomputed, and so is the canvas
  (the caller's ``limit``). The moved run's keys are rotated back by ``shift`` positions: rotary
  embedding is a rotation by angle ``pos * theta_i`` per channel pair (RoFormer, Su et al. 2021,
  Eq. 34), so R(p - d) k = R(-d) R(p) k and the re-rotation is exact up to rounding
  (``rotate``); values carry no position and are reused as they are.
- For bidirectional models this is an approximation, as the dual cache is (model/infer/cache.py):
  the reused keys/values were computed beside the old text after the first difference. Whether it
  changes answers is measured (``editserver bench keystrokes``), and each family's default follows
  from that measurement (model/infer/engine.py).
- Entries are copied out of the batch that computed them, so an entry's bytes are its own and the
  bound counts what is really held. One lock guards the store: the scheduler's worker decodes, but
  tests and benchmarks may call an engine from several threads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch

from editserver.model.infer.transformer import rope_tables

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer (k, v) [1, Hkv, L, D]
# MiB of recent contexts kept for reuse by default, per family ("open": every open-weight family);
# 0 keeps reuse off. Off for the shipped model: its answers changed on about half of the typing
# replay's requests with reuse on (``editserver bench keystrokes``, docs/experiments.md), far from
# "within noise". Off for the open families until a real checkpoint has been through the same replay
# (random-weight copies say nothing about answers).
DEFAULT_MB = {"editserver": 0, "open": 0}
PROBE = 8  # tokens the moved run is searched for by (a shorter run is not worth re-rotating)


def rotate(k: torch.Tensor, delta: int, head_dim: int, theta: float) -> torch.Tensor:
    """Keys k [..., L, D] rotated by ``delta`` positions (rotary, NeoX pair layout (x_i, x_{i+D/2}))."""
    cos, sin = rope_tables(head_dim, torch.full((1, 1), delta, device=k.device), theta)  # [1, 1, D/2]
    c, s = cos[0], sin[0]  # [1, D/2], broadcast over L
    d2 = k.shape[-1] // 2
    x1, x2 = k[..., :d2].float(), k[..., d2:].float()
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(k.dtype)


def _common(a: torch.Tensor, b: torch.Tensor) -> int:
    """Length of the common prefix of two 1-D id tensors."""
    n = min(len(a), len(b))
    diff = (a[:n] != b[:n]).nonzero()
    return int(diff[0]) if len(diff) else n


def _find(needle: torch.Tensor, hay: torch.Tensor, start: int) -> int:
    """First index >= ``start`` where ``needle`` occurs in ``hay`` (1-D ids), -1 when nowhere."""
    h = np.asarray(hay.tolist(), dtype=">i4").tobytes()
    n = np.asarray(needle.tolist(), dtype=">i4").tobytes()
    at = h.find(n, 4 * start)
    while at >= 0 and at % 4:  # a match across two ids' bytes: look on
        at = h.find(n, at + 1)
    return -1 if at < 0 else at // 4


@dataclass
class Entry:
    ids: torch.Tensor  # [L] long, on CPU
    kv: KV  # per layer (k, v) [1, Hkv, L, D]
    nbytes: int


@dataclass
class Reuse:
    """What a request takes from an entry: old [0, head) at the same positions, then old
    [head + shift, head + shift + run) at new positions [head, head + run)."""

    entry: Entry
    head: int
    shift: int
    run: int

    @property
    def tokens(self) -> int:
        return self.head + self.run

    def kv(self, head_dim: int, theta: float) -> KV:
        """Per layer (k, v) [1, Hkv, tokens, D] for new positions [0, tokens)."""
        out = []
        h, a, b = self.head, self.head + self.shift, self.head + self.shift + self.run
        for k, v in self.entry.kv:
            if not self.run:
                out.append((k[:, :, :h], v[:, :, :h]))
                continue
            moved = rotate(k[:, :, a:b], -self.shift, head_dim, theta)  # back to positions [h, h + run)
            out.append(
                (torch.cat([k[:, :, :h], moved], dim=2), torch.cat([v[:, :, :h], v[:, :, a:b]], dim=2))
            )
        return out


def match(old: torch.Tensor, new: torch.Tensor, limit: int) -> tuple[int, int, int]:
    """(head, shift, run) of ``new`` against ``old`` (1-D ids), reusing at most ``limit`` tokens."""
    head = min(_common(old, new), limit)
    if head >= limit or head >= len(new):
        return head, 0, 0
    probe = new[head : head + PROBE]
    if len(probe) < PROBE:
        return head, 0, 0
    at = _find(probe, old, head + 1)
    if at < 0:
        return head, 0, 0
    shift = at - head
    run = min(_common(old[at:], new[head:]), limit - head)
    return head, shift, run


class PrefixStore:
    """Keys/values of recent contexts under a byte bound, least recently used evicted first."""

    def __init__(self, max_bytes: int, min_reuse: int = 16):
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be at least 1, got {max_bytes}")
        self.max_bytes, self.min_reuse = max_bytes, min_reuse
        self._entries: OrderedDict[int, Entry] = OrderedDict()
        self._next = 0
        self._lock = threading.Lock()
        self.nbytes = 0
        self.hits = self.misses = self.evictions = 0
        self.reused_tokens = self.computed_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, ids: torch.Tensor, limit: int | None = None) -> Reuse | None:
        """The entry sharing the most tokens with ``ids`` [L] (at most ``limit``), or None when none
        shares ``min_reuse``; a hit becomes the most recently used entry."""
        ids = ids.cpu()
        limit = len(ids) if limit is None else min(limit, len(ids))
        with self._lock:
            best, best_key = None, None
            for key, e in self._entries.items():
                head, shift, run = match(e.ids, ids, limit)
                if best is None or head + run > best.tokens:
                    best, best_key = Reuse(e, head, shift, run), key
            if best is None or best.tokens < min(self.min_reuse, limit) or best.tokens == 0:
                self.misses += 1
                self.computed_tokens += len(ids)
                return None
            self._entries.move_to_end(best_key)
            self.hits += 1
            self.reused_tokens += best.tokens
            self.computed_tokens += len(ids) - best.tokens
            return best

    def put(self, ids: torch.Tensor, kv: KV) -> bool:
        """Keep ``kv`` (per layer (k, v) [1, Hkv, L, D], copied) for ``ids`` [L]; False when one entry
        alone exceeds the bound. An entry for the same ids is replaced."""
        kv = [(k.detach().clone(), v.detach().clone()) for k, v in kv]
        nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)
        if nbytes > self.max_bytes:
            return False
        ids = ids.detach().cpu().clone()
        with self._lock:
            for key, e in list(self._entries.items()):
                if len(e.ids) == len(ids) and bool((e.ids == ids).all()):
                    self.nbytes -= e.nbytes
                    del self._entries[key]
            while self._entries and self.nbytes + nbytes > self.max_bytes:
                _, old = self._entries.popitem(last=False)
                self.nbytes -= old.nbytes
                self.evictions += 1
            self._entries[self._next] = Entry(ids, kv, nbytes)
            self._next += 1
            self.nbytes += nbytes
        return True

    def stats(self) -> dict:
        with self._lock:
            return {
                "entries": len(self._entries),
                "bytes": self.nbytes,
                "hits": self.hits,
                "misses": self.misses,
                "evictions": self.evictions,
                "reused_tokens": self.reused_tokens,
                "computed_tokens": self.computed_tokens,
            }
