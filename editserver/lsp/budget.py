"""Prompts within the model's tokens: the limits the model server reports, and how the LSP counts.

Floor 0 (see lsp/__init__.py): imports nothing of the language server.

Design decisions:
- The limits are the server's own: ``/v1/models`` reports ``context_length`` (a request over it is
  refused: 400 ``context_length_exceeded``, and the user gets nothing), ``window`` (the prompt
  tokens the model reads) and ``max_output_length`` (the longest canvas). The client reads them
  each time the server turns ready, before any request goes out (lsp/model_client.py); a server that does
  not say gets ``DEFAULT_LIMITS``, the 32K context the API documents.
- Counting: UTF-8 bytes first, the model's tokenizer only when the bytes are over budget. Every
  tokenizer served is byte-level BPE (ours and the open families': their alphabet is the 256 bytes
  and each token stands for at least one), so a text never costs more tokens than its UTF-8 bytes,
  and a layout tag (one token) costs ten bytes or more. The byte count is therefore a sound upper
  bound that needs no tokenizer and no round trip; CJK, emoji or random text, which cost up to a
  token a byte, can never slip past it (a tokenizer that could spend more tokens than bytes
  would break this; none of the families served can). It over-counts ASCII code 3-4 times, but a 32K context
  holds 32 KB, more than the LSP's usual prompt (its context is clipped to characters too,
  lsp/rewrite.py), so only unusual prompts are encoded. Those are counted exactly with the served
  tokenizer when the server offers it (``GET /v1/tokenizer``: our own family's tokenizer.json,
  fetched once per readiness in the background and loaded with the ``tokenizers`` library, no
  torch); until then, or for a family that offers none, the byte bound decides, cutting more than
  needed, never too little. Rejected: a count endpoint (a round trip per region prompt, on the
  latency path) and a characters-per-token guess (no ratio is sound: an emoji costs 3 tokens).
- The request's other tokens are reserved, not counted: the canvas (the region's cost plus the
  server's slack, at most ``max_output_length``) and ``<|rewrite|>`` or an open family's chat
  frame (``EDIT_SLACK``, ``EDIT_FRAME``); a FIM request reserves its canvas and tags.
- The window: with the exact tokenizer and a window shorter than the context, a next-edit prompt is
  first cut to ``window - 1`` tokens by ``fit_prompt``, the very cuts the server makes for the
  window (snippets, then outer file lines and old diffs). Those cuts nest (each keeps a part of what
  the one before kept) and the server's own budget (``window`` less the canvas) is no larger, so the
  server ends on the same prompt it would have cut from the whole one, from a smaller request.
  Without the exact tokenizer the window is left to the server: bytes would cut text it reads.
- Over the hard limit (no window, a region too long for the window, or bytes only), the farthest
  parts go first: the snippets in prompt order (the first is farthest from the file), the history's
  diffs oldest first down to the newest, the file's context by distance from the region (lines,
  long ones in ``CHUNK_CHARS`` pieces, so a long line next to the region keeps its near end), and
  last the newest diff. The fewest drops that fit in bytes are found by bisection (no encode);
  with the tokenizer, dropped parts are then taken back nearest first while their tokens, counted
  one by one, still fit, and the result is encoded once to check (bisecting on if adjacent parts
  merged into more tokens): the text encoded is about the budget's, not the prompt's (usually two
  encodes of about the budget's length: ~150 ms for 32K tokens of emoji; none for usual prompts).
  The region, its cursor and the file path always stay; when they alone are over, the region is
  not asked about (``None``).
- FIM: the server cuts a FIM prompt to its window itself, cheaply and exactly, so here only the hard
  limit is kept, by cutting the far ends (``fim_window``'s shares, in bytes when over).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass

import httpx
from tokenizers import Tokenizer as HFTokenizer

from editserver.protocol.prompt import (
    EditPrompt,
    build_prompt,
    encode_prompt,
    fim_window,
    fit_prompt,
    split_history,
)
from editserver.protocol.tokens import control_ids, min_tokens, text_only_json

log = logging.getLogger(__name__)

CONTEXT = 32_768  # the context of a server that does not report one (the API's documented window)
MAX_OUTPUT = 1024  # likewise, its longest canvas
EDIT_SLACK = 64  # canvas beyond the region's own tokens (the server's edit_slack_tokens: 32 shipped)
EDIT_FRAME = 64  # <|rewrite|>, or an open family's chat template around the prompt
FIM_FRAME = 8  # the FIM tags, or an open family's begin/end of text
CHUNK_CHARS = 256  # a long context line is dropped in pieces of this many characters, far end first
READ_TIMEOUT_S = 10.0


class ServedTokens:
    """The served model's tokenizer as the LSP counts with it: text as text, tags as their ids, as
    the server encodes a prompt (protocol/tokens.py), without importing the model."""

    def __init__(self, tokenizer_json: str):
        self.hf = HFTokenizer.from_str(tokenizer_json)
        self.plain = HFTokenizer.from_str(text_only_json(tokenizer_json))
        self.tags = control_ids(tokenizer_json)

    def encode(self, text: str) -> list[int]:
        return self.plain.encode(text, add_special_tokens=False).ids

    def encode_prompt(self, p: EditPrompt) -> list[int]:
        return encode_prompt(p, self.encode, self.tags.__getitem__)

    min_tokens = staticmethod(min_tokens)


@dataclass(frozen=True)
class Limits:
    context_length: int = CONTEXT
    window: int = CONTEXT  # prompt tokens the model reads; the context when it reads it all
    max_output: int = MAX_OUTPUT
    tokenizer: ServedTokens | None = None  # the served model's, for exact counts; None: bytes only


DEFAULT_LIMITS = Limits()


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _encode(tok: ServedTokens, p: EditPrompt) -> list[int] | None:
    try:
        return tok.encode_prompt(p)
    except (TypeError, ValueError):  # text the tokenizer refuses (a lone surrogate): bytes decide
        return None


def _cost(text: str, tok: ServedTokens | None) -> int:
    """Tokens of ``text``: exact with a tokenizer, else (or where it refuses the text) its bytes."""
    if tok is not None:
        try:
            return len(tok.encode(text))
        except (TypeError, ValueError):
            pass
    return utf8_len(text)


@functools.lru_cache(maxsize=4)
def _longest(tok: ServedTokens) -> int:
    """The most UTF-8 bytes one token stands for, tags included (an over-estimate is still sound)."""
    return max(len(t.encode("utf-8")) for t in tok.hf.get_vocab(with_added_tokens=True))


def _floor(tok: ServedTokens, text: str) -> int:
    """A lower bound on ``text``'s tokens that costs no encode: its whitespace-separated runs
    (``Tokenizer.min_tokens``), or its bytes over the longest token's (tokens cover the bytes)."""
    return max(tok.min_tokens(text), utf8_len(text) // _longest(tok))


def _fits(p: EditPrompt, budget: int, tok: ServedTokens | None) -> bool:
    """Whether ``p``'s prompt is at most ``budget`` tokens: by its bytes, else by its tokens."""
    text = build_prompt(p)
    if utf8_len(text) <= budget:
        return True
    if tok is None or _floor(tok, text) > budget:
        return False
    ids = _encode(tok, p)
    return ids is not None and len(ids) <= budget


def edit_budget(region: str, limits: Limits) -> int:
    """Prompt tokens a next-edit request for ``region`` may spend: the context less its canvas and frame."""
    canvas = min(_cost(region, limits.tokenizer) + EDIT_SLACK, limits.max_output)
    return limits.context_length - canvas - EDIT_FRAME


def fit_edit_prompt(p: EditPrompt, limits: Limits) -> EditPrompt | None:
    """``p`` within the model's window where the exact tokenizer allows, always within its context
    (the farthest parts dropped first); None when the region alone is over (module docstring)."""
    budget = edit_budget(p.region, limits)
    tok = limits.tokenizer
    size = utf8_len(build_prompt(p))  # bytes bound tokens
    if size <= min(budget, limits.window - 1):
        return p  # the usual prompt: under both limits, nothing to encode
    if tok is not None and limits.window < limits.context_length:
        try:
            fitted = fit_prompt(p, tok.encode_prompt, limits.window - 1, lambda t: _floor(tok, t))
        except (TypeError, ValueError):  # text the tokenizer refuses: the hard limit alone, in bytes
            fitted = None
        if fitted is not None and len(fitted[1]) <= budget:
            return fitted[0]
    if size <= budget:
        return p  # within the context by its bytes; the server cuts it to its window
    return _fit_hard(_Drops(p), budget, tok)


def _fit_hard(drops: _Drops, budget: int, tok: ServedTokens | None) -> EditPrompt | None:
    """The least cut (``_Drops.cut``) whose prompt fits ``budget``, or None. The least that fits in
    bytes is found by bisection (no encode); with a tokenizer, parts dropped for the bytes are taken
    back nearest first while their tokens, counted one by one, still fit, and the cut is encoded to
    check (adjacent parts can merge into fewer tokens or split into more), bisecting if it is over.
    So the tokens encoded are about the budget's, whatever the prompt's length."""
    bytes_hi = _least(0, drops.n, lambda k: utf8_len(build_prompt(drops.cut(k))) <= budget)
    hi = drops.n if bytes_hi is None else bytes_hi
    ids = None if tok is None else _encode(tok, drops.cut(hi))
    if tok is None or ids is None:  # no tokenizer, or text it refuses: the bytes decide
        return None if bytes_hi is None else drops.cut(bytes_hi)
    if len(ids) > budget:
        return None  # the region alone is over (a cut that fits in bytes fits in tokens)
    used, k = len(ids), hi
    while k > 0:
        more = drops.cost(k - 1, tok)
        if used + more > budget:
            break
        used, k = used + more, k - 1
    if k == hi or _fits(drops.cut(k), budget, tok):
        return drops.cut(k)
    least = _least(k + 1, hi, lambda m: _fits(drops.cut(m), budget, tok))
    return drops.cut(hi if least is None else least)


def _least(lo: int, hi: int, fits: Callable[[int], bool]) -> int | None:
    """The least ``k`` in [lo, hi] with ``fits(k)``, by bisection (fitting is taken as monotone:
    each cut drops more); None when ``hi`` does not fit."""
    if not fits(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


def _bounds(text: str) -> list[int]:
    """Offsets cutting ``text`` into droppable pieces: its lines, long ones every CHUNK_CHARS."""
    out, at = [0], 0
    for line in text.splitlines(keepends=True):
        end = at + len(line)
        out += range(at + CHUNK_CHARS, end, CHUNK_CHARS)
        out.append(end)
        at = end
    return out


class _Drops:
    """``p`` less its first ``k`` droppable parts, farthest first: snippets, old diffs, the file's
    context by distance from the region, the newest diff (``cut(k)``; ``n`` parts in all, part
    ``i``'s text ``parts[i]``)."""

    def __init__(self, p: EditPrompt):
        self.p = p
        self.diffs = split_history(p.history)
        self.above = _bounds(p.above)  # keep above[self.above[i]:] with i pieces dropped
        self.below = _bounds(p.below)  # keep below[:self.below[-1 - j]] with j pieces dropped
        a, b = len(self.above) - 1, len(self.below) - 1
        # each side's pieces far to near, keyed by their near end's distance from the region
        pieces = [
            (len(p.above) - self.above[i + 1], "a", p.above[self.above[i] : self.above[i + 1]])
            for i in range(a)
        ]
        pieces += [
            (self.below[j], "b", p.below[self.below[j] : self.below[j + 1]]) for j in range(b - 1, -1, -1)
        ]
        order = sorted(pieces, key=lambda d: -d[0])  # stable: each side's pieces stay in their order
        self.dropped = [(0, 0)]  # (above pieces, below pieces) dropped with the first c context pieces
        for _, side, _ in order:
            na, nb = self.dropped[-1]
            self.dropped.append((na + 1, nb) if side == "a" else (na, nb + 1))
        self.parts = [f"{s.path}\n{s.code}" for s in p.snippets] + self.diffs[:-1]
        self.parts += [text for _, _, text in order] + self.diffs[-1:]
        self.n = len(self.parts)

    def cost(self, i: int, tok: ServedTokens) -> int:
        """Part ``i``'s tokens counted alone (a snippet's with its two tags and newlines)."""
        return _cost(self.parts[i], tok) + (4 if i < len(self.p.snippets) else 0)

    def cut(self, k: int) -> EditPrompt:
        p = self.p
        s = min(k, len(p.snippets))
        k -= s
        d = min(k, max(0, len(self.diffs) - 1))
        k -= d
        c = min(k, len(self.dropped) - 1)
        k -= c
        na, nb = self.dropped[c]
        history = "".join(self.diffs[d:]) if self.diffs else p.history  # the diffs join back exactly
        return dataclasses.replace(
            p,
            snippets=p.snippets[s:],
            above=p.above[self.above[na] :],
            below=p.below[: self.below[len(self.below) - 1 - nb]],
            history="" if k > 0 else history,
        )


def tail_chars(text: str, limit: int) -> str:
    """The last ``limit`` characters of ``text``, from a line start where one falls inside them
    (the prompt's context above a region, a FIM prefix)."""
    if len(text) <= limit:
        return text
    cut = text[-limit:]
    nl = cut.find("\n")
    return cut[nl + 1 :] if 0 <= nl < len(cut) - 1 else cut


def head_chars(text: str, limit: int) -> str:
    """The first ``limit`` characters of ``text``, to a line end where one falls inside them (the
    context below a region, a FIM suffix)."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    nl = cut.rfind("\n")
    return cut[: nl + 1] if nl > 0 else cut


# ---- FIM -----------------------------------------------------------------------------------------
def fit_fim(prefix: str, suffix: str, max_tokens: int, limits: Limits) -> tuple[str, str]:
    """``prefix`` and ``suffix`` within the context less the canvas, their far ends cut first: the
    suffix keeps at least a quarter (``fim_window``), each side measured in bytes, so the cut is
    sound without a tokenizer. Unchanged when they fit (by bytes, else by exact tokens)."""
    budget = max(0, limits.context_length - max_tokens - FIM_FRAME)
    n_pre, n_suf = utf8_len(prefix), utf8_len(suffix)
    if n_pre + n_suf <= budget:
        return prefix, suffix
    tok = limits.tokenizer
    if tok is not None and _cost(prefix, tok) + _cost(suffix, tok) <= budget:
        return prefix, suffix
    keep_pre, keep_suf = fim_window(n_pre, n_suf, budget)
    return _tail_bytes(prefix, keep_pre), _head_bytes(suffix, keep_suf)


def _tail_bytes(text: str, limit: int) -> str:
    """The longest end of ``text`` of at most ``limit`` UTF-8 bytes, from a line start where one
    falls inside it (the prefix nearest the cursor)."""
    return _head_bytes(text[::-1], limit, reverse=True)[::-1]


def _head_bytes(text: str, limit: int, reverse: bool = False) -> str:
    """The longest start of ``text`` of at most ``limit`` UTF-8 bytes, to a line end where one falls
    inside it; ``reverse``: ``text`` is reversed, so the line break goes with the part cut off."""
    used = n = 0
    for ch in text:
        used += utf8_len(ch)
        if used > limit:
            break
        n += 1
    else:
        return text
    cut = text[:n]
    nl = cut.rfind("\n")
    if nl <= 0:
        return cut
    return cut[:nl] if reverse else cut[: nl + 1]


# ---- learning the limits -------------------------------------------------------------------------
def _positive(value: object, default: int) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if ok else default  # type: ignore[return-value]


async def read_limits(http: httpx.AsyncClient, url: str, model: str) -> Limits:
    """The served model's limits from its ``/v1/models`` card (``model``'s, else the first);
    ``DEFAULT_LIMITS`` where the server does not say."""
    try:
        r = await http.get(url + "/v1/models", timeout=READ_TIMEOUT_S)
        cards = [c for c in r.json().get("data", []) if isinstance(c, dict)] if r.status_code == 200 else []
    except (httpx.HTTPError, OSError, ValueError, AttributeError, TypeError):
        cards = []
    if not cards:
        log.warning("no model card at %s/v1/models; budgeting prompts for %d tokens", url, CONTEXT)
        return DEFAULT_LIMITS
    card = next((c for c in cards if c.get("id") == model), cards[0])
    context = _positive(card.get("context_length"), CONTEXT)
    window = min(_positive(card.get("window"), context), context)
    return Limits(context, window, _positive(card.get("max_output_length"), MAX_OUTPUT))


async def read_tokenizer(http: httpx.AsyncClient, url: str) -> ServedTokens | None:
    """The served model's tokenizer (``GET /v1/tokenizer``), or None where it offers none."""
    try:
        r = await http.get(url + "/v1/tokenizer", timeout=READ_TIMEOUT_S)
        if r.status_code != 200:
            return None
        return await asyncio.to_thread(lambda: ServedTokens(r.text))
    except Exception as e:  # noqa: BLE001 - whatever a server sends, the byte bound still holds
        log.warning("no tokenizer from %s/v1/tokenizer (%s); counting prompts in bytes", url, e)
        return None
