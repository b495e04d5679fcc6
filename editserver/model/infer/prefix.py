"""Context reuse across requests: every layer's keys/values of recent contexts, keyed by their tokens.

Two keystrokes apart, a document's requests share most of their tokens, so the second need not
recompute what the first computed. Design decisions:
- ``PrefixStore`` keeps, per recent sequence of token ids, each layer's keys/values [Hkv, L, D] of
  that one row, under a byte bound and an entry bound with least-recently-used eviction. It knows
  nothing of documents: a request finds the entry that shares the most tokens with it, so two
  documents typed at once each find their own (their first tokens already differ), and an entry
  never feeds a request it shares too little with (``min_reuse``).
- What is reused (``Reuse``): the longest common prefix at the same positions (``head``), then, when
  the layout moved the tokens that follow (a fixed window around the cursor drops the far end of the
  prefix as the user types, model/infer/layout.py), the longest run of old tokens ``shift`` positions
  further on (``run``). The canvas is always recomputed (the caller's ``limit``). Moved keys are
  rotated by their move: rotary embedding is a rotation by angle ``pos * theta_i`` per channel pair
  (RoFormer, Su et al. 2021, Eq. 34), so R(p + d) k = R(d) R(p) k and the re-rotation is exact up
  to rounding (``rotate``); values carry no position and are reused as they are.
- By default a changed token invalidates everything after it. A store made with ``suffix=True``
  reuses the text after the cursor too (``tail``): a keystroke inserts or deletes tokens before it,
  so the longest common suffix of old and new sits ``len(new) - len(old)`` positions away and is
  rotated by that much. The caller says where it may start (``tail_from``: after the canvas), so a
  cursor in the middle of a file computes a few tokens, not the whole suffix.
- For block-diffusion models (block-causal attention) reuse is exact: a block's keys/values depend
  only on it and the blocks before it, so ``lookup_blocks`` takes the longest shared prefix cut to
  whole blocks, with no margin, no moved run and no tail (model/infer/block_cache.py).
- For bidirectional models reuse is an approximation, as the dual cache is (model/infer/cache.py):
  a reused key saw the old text. It saw it most closely next to a change, so ``margin`` tokens are
  recomputed on either side of every seam (a typed change, the window's dropped tokens, the moved
  tail). On the shipped model's typing replay through HTTP this took identical answers from 52.8%
  to 99.2% and 95.4% on two sets of lines (docs/experiments.md). Whether it changes answers is measured
  (``editserver bench keystrokes``), and each family's default follows from that (``DEFAULT_MB``).
- Entries are copied out of the batch that computed them, so an entry's bytes are its own and the
  bound counts what is really held. One lock guards the store: the scheduler's worker decodes, but
  tests and benchmarks may call an engine from several threads.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch

from editserver.model.infer.transformer import rope_tables

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer (k, v) [1, Hkv, L, D]
# MiB of recent contexts kept for reuse by default, per family ("open": every open-weight family);
# 0 keeps reuse off. On for the shipped model: with the margin, its typing replay's FIM answers were
# identical to reuse off on 99.2% and 95.4% of requests (two sets of lines) at the same exact-match
# rate, and a held-out replay's 350 next-edit and FIM suggestions all identical (docs/experiments.md).
# 64 MiB holds about 45 of its 256-token contexts. Off for the bidirectional open families until a
# real checkpoint has been through the same replays (random-weight copies say nothing about answers).
# On for block-diffusion families ("block"), where reuse is exact (model/infer/block_cache.py): 1 GiB
# holds one 2,300-token context of a 1.7B Qwen3-shaped model in fp32 (28 layers x 2 x 8 heads x 128 x 4 B
# = 229 KB a token), about what one file's typing needs.
DEFAULT_MB = {"editserver": 64, "open": 0, "block": 1024}
PROBE = 8  # tokens the moved run is searched for by (a shorter run is not worth re-rotating)
MARGIN = 32  # tokens recomputed on either side of a seam (module docstring)
# entries kept at most, whatever their bytes: a lookup compares a request with every entry (about
# 60 us each for 256 tokens on a 2-core CPU), so a small model's small entries must not pile up
MAX_ENTRIES = 64


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
    """What a request of ``length`` tokens takes from an entry: old [0, head) at the same positions,
    then old [head + shift, head + shift + run) at new positions [head, head + run), and old's last
    ``tail`` tokens as its own last ``tail`` (``match``), each cut back by ``margin`` tokens at every
    seam (module docstring). The request computes the rest (``fresh``)."""

    entry: Entry
    head: int
    shift: int
    run: int
    tail: int = 0
    length: int = 0
    margin: int = 0

    @functools.cached_property
    def spans(self) -> list[tuple[int, int, int]]:
        """(new start, old start, length) of each reused span, seams cut back by ``margin``; computed
        once, since a lookup compares every entry's ``tokens`` and the caller then reads the rest
        (``fresh`` and ``reused``, read by the caller and by ``assemble``, are kept likewise)."""
        old, out = len(self.entry.ids), []
        raw = [(0, 0, self.head), (self.head, self.head + self.shift, self.run)]
        raw.append((self.length - self.tail, old - self.tail, self.tail))
        for new, was, n in raw:
            lead = 0 if new == was == 0 else self.margin  # a sequence's own start is no seam
            trail = 0 if new + n == self.length and was + n == old else self.margin
            if n - lead - trail > 0:
                out.append((new + lead, was + lead, n - lead - trail))
        return out

    @property
    def tokens(self) -> int:
        return sum(n for _, _, n in self.spans)

    @functools.cached_property
    def fresh(self) -> torch.Tensor:
        """[n] new positions the request computes itself, ascending."""
        taken = torch.zeros(self.length, dtype=torch.bool)
        for new, _, n in self.spans:
            taken[new : new + n] = True
        return (~taken).nonzero()[:, 0]

    @functools.cached_property
    def reused(self) -> torch.Tensor:
        """[tokens] new positions of ``kv``'s keys/values, in its order."""
        return torch.cat(
            [torch.arange(new, new + n) for new, _, n in self.spans] or [torch.zeros(0, dtype=torch.long)]
        )

    def kv(self, head_dim: int, theta: float) -> KV:
        """Per layer (k, v) [1, Hkv, tokens, D] at new positions ``reused``: a moved span's keys rotated
        by its move, R(p + d) k = R(d) R(p) k; values carry no position."""
        out = []
        for k, v in self.entry.kv:
            ks = [k[:, :, w : w + n] if w == p else rotate(k[:, :, w : w + n], p - w, head_dim, theta)
                  for p, w, n in self.spans]  # fmt: skip
            vs = [v[:, :, w : w + n] for _, w, n in self.spans]
            out.append((torch.cat(ks, dim=2), torch.cat(vs, dim=2)))
        return out

    def assemble(self, reused: KV, fresh: KV) -> KV:
        """Per layer (k, v) [1, Hkv, length, D] in position order from ``kv``'s and the fresh ones."""
        at, new = self.reused.to(reused[0][0].device), self.fresh.to(reused[0][0].device)
        out = []
        for i, (k, v) in enumerate(reused):
            fk, fv = fresh[i] if fresh else (k[:, :, :0], v[:, :, :0])
            K = k.new_empty((*k.shape[:2], self.length, k.shape[3]))
            V = v.new_empty((*v.shape[:2], self.length, v.shape[3]))
            K[:, :, at], V[:, :, at], K[:, :, new], V[:, :, new] = k, v, fk, fv
            out.append((K, V))
        return out


def _moved(old: torch.Tensor, new: torch.Tensor, head: int, limit: int) -> tuple[int, int]:
    """(shift, run): the longest run of ``new`` from ``head`` found ``shift`` > 0 tokens on in ``old``."""
    if head >= limit or head >= len(new):
        return 0, 0
    probe = new[head : head + PROBE]
    if len(probe) < PROBE:
        return 0, 0
    at = _find(probe, old, head + 1)
    if at < 0:
        return 0, 0
    return at - head, min(_common(old[at:], new[head:]), limit - head)


def match(
    old: torch.Tensor, new: torch.Tensor, limit: int, tail_from: int | None = None
) -> tuple[int, int, int, int]:
    """(head, shift, run, tail) of ``new`` against ``old`` (1-D ids): at most ``limit`` tokens from
    the start, and a common suffix of ``tail`` tokens starting at or after new position ``tail_from``
    (None: no suffix is reused)."""
    head = min(_common(old, new), limit)
    shift, run = _moved(old, new, head, limit)
    if tail_from is None:
        return head, shift, run, 0
    room = min(len(new) - max(head + run, tail_from), len(old) - (head + shift + run))
    tail = min(_common(old.flip(0), new.flip(0)), max(room, 0))
    return head, shift, run, tail if tail >= PROBE else 0


class PrefixStore:
    """Keys/values of recent contexts under a byte bound, least recently used evicted first."""

    def __init__(
        self,
        max_bytes: int,
        min_reuse: int = 16,
        suffix: bool = False,
        margin: int = MARGIN,
        max_entries: int = MAX_ENTRIES,
    ):
        if max_bytes < 1 or max_entries < 1:
            raise ValueError(f"max_bytes and max_entries must be at least 1, got {max_bytes}, {max_entries}")
        self.max_bytes, self.min_reuse, self.margin, self.max_entries = (
            max_bytes,
            min_reuse,
            margin,
            max_entries,
        )
        self.suffix = suffix  # reuse the text after a difference too (``match``'s tail); else recompute it
        self._entries: OrderedDict[int, Entry] = OrderedDict()
        self._next = 0
        self._lock = threading.Lock()
        self.nbytes = 0
        self.hits = self.misses = self.evictions = 0
        self.reused_tokens = self.computed_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(
        self, ids: torch.Tensor, limit: int | None = None, tail_from: int | None = None
    ) -> Reuse | None:
        """The entry sharing the most tokens with ``ids`` [L] (at most ``limit`` from the start, and
        a common end from ``tail_from`` on; ``match``), or None when none shares ``min_reuse``; a hit
        becomes the most recently used entry."""
        ids = ids.cpu()
        limit = len(ids) if limit is None else min(limit, len(ids))
        with self._lock:
            best, best_key = None, None
            for key, e in self._entries.items():
                found = match(e.ids, ids, limit, tail_from if self.suffix else None)
                r = Reuse(e, *found, length=len(ids), margin=self.margin)
                if best is None or r.tokens > best.tokens:
                    best, best_key = r, key
            if best is None or best.tokens < min(self.min_reuse, limit) or best.tokens == 0:
                self._count(None, 0, len(ids))
                return None
            self._count(best_key, best.tokens, len(ids))
            return best

    def lookup_blocks(self, ids: torch.Tensor, block: int, limit: int) -> tuple[Entry, int] | None:
        """(entry, n) of the entry sharing the longest common prefix with ``ids`` [L], ``n`` that
        prefix cut down to whole ``block``-token blocks and to ``limit``; None when it is under
        ``min_reuse`` tokens (or none). No margin and no moved runs: under block-causal attention a
        block's keys/values depend only on it and the blocks before it, so a shared prefix of whole
        blocks is exact and anything after a difference is not (model/infer/block_cache.py)."""
        ids = ids.cpu()
        limit = min(limit, len(ids))
        with self._lock:
            best, best_key = 0, None
            for key, e in self._entries.items():
                n = min(_common(e.ids, ids), limit) // block * block
                if n > best:
                    best, best_key = n, key
            if best_key is None or best < min(self.min_reuse, limit):
                self._count(None, 0, len(ids))
                return None
            self._count(best_key, best, len(ids))
            return self._entries[best_key], best

    def _count(self, key: int | None, reused: int, length: int) -> None:
        """Count a lookup of ``length`` tokens that reuses ``reused`` of them from entry ``key`` (None:
        a miss), which becomes the most recently used. Called under the lock."""
        self.computed_tokens += length - reused
        if key is None:
            self.misses += 1
            return
        self._entries.move_to_end(key)
        self.hits += 1
        self.reused_tokens += reused

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
            while self._entries and (
                self.nbytes + nbytes > self.max_bytes or len(self._entries) >= self.max_entries
            ):
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
                "max_bytes": self.max_bytes,
                "max_entries": self.max_entries,
                "suffix": self.suffix,
                "hits": self.hits,
                "misses": self.misses,
                "evictions": self.evictions,
                "reused_tokens": self.reused_tokens,
                "computed_tokens": self.computed_tokens,
            }
