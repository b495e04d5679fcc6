"""Inline completion (FIM): prompt assembly, post-processing, debounce, cancellation and caching.

Design decisions:
- Prefix and suffix are cut at line boundaries within character budgets; definitions of identifiers
  near the cursor, found in *other* open documents, are prepended to the prefix as a comment block in
  the file's language (so the prefix stays valid code for the model). Characters do not bound
  tokens (an emoji costs 3), so the two are then held within the model's context less the canvas,
  counted in bytes, else in the served tokenizer's tokens (lsp/budget.py ``fit_fim``); the window is
  the server's to cut, as it does exactly.
- Post-processing is protocol/postprocess.py, the same rules the HTTP server applies to every FIM
  answer (so Zed or curl get what the editor shows); here it runs again with the file's indentation
  style, which only the LSP knows. The rules are idempotent, so the double pass changes nothing else.
- Debounce and staleness: each request sleeps ``debounceMs`` first, and is answered empty if a newer
  keystroke (document version) or a newer request for the same document arrived meanwhile; the newer
  request also cancels the older one's HTTP call. ``$/cancelRequest`` cancels the handler's task,
  which cancels the HTTP call with it.
- Cache: the last suggestion per document is kept with the prefix/suffix it answered. While the user
  types characters that match it, the rest of it is returned at once, with no debounce and no HTTP.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from editserver.lsp.budget import fit_fim, head_chars, tail_chars
from editserver.lsp.documents import Document
from editserver.lsp.treesitter import definitions_for, grammar_name
from editserver.protocol.postprocess import indent_style, multiline_allowed, postprocess

__all__ = ["indent_style", "multiline_allowed", "postprocess", "FimScheduler", "answer"]

if TYPE_CHECKING:
    from editserver.lsp.server import EditLanguageServer

_COMMENT = {"python": "#", "go": "//", "rust": "//", "javascript": "//", "typescript": "//", "tsx": "//"}


def context_header(language: str, snippets: list[tuple[str, str]], budget: int) -> str:
    """Definitions from other files as a comment block (the prefix stays valid code)."""
    mark = _COMMENT.get(language, "//")
    out = []
    used = 0
    for path, code in snippets:
        block = f"{mark} {path}\n" + "".join(f"{mark} {ln}\n" for ln in code.rstrip("\n").split("\n"))
        if used + len(block) > budget:
            break
        out.append(block)
        used += len(block)
    return "".join(out) + ("\n" if out else "")


@dataclass
class Cached:
    prefix: str
    suffix: str
    text: str
    id: str


@dataclass
class Answer:
    text: str
    id: str
    from_cache: bool = False
    prompt: dict | None = None


class FimScheduler:
    """Per-document debounce, staleness and cache around one FIM call."""

    def __init__(self) -> None:
        self.cache: dict[str, Cached] = {}
        self.inflight: dict[str, asyncio.Task] = {}
        self.requests: dict[str, int] = {}  # per-uri request counter: a newer request makes older ones stale

    def from_cache(self, uri: str, prefix: str, suffix: str) -> Answer | None:
        c = self.cache.get(uri)
        if c is None or c.suffix != suffix or not prefix.startswith(c.prefix):
            return None
        typed = prefix[len(c.prefix) :]
        if len(typed) < len(c.text) and c.text.startswith(typed):
            return Answer(c.text[len(typed) :], c.id, from_cache=True)
        return None

    def remember(self, uri: str, prefix: str, suffix: str, text: str) -> str:
        cid = uuid.uuid4().hex
        self.cache[uri] = Cached(prefix, suffix, text, cid)
        return cid

    def forget(self, uri: str) -> None:
        self.cache.pop(uri, None)
        task = self.inflight.pop(uri, None)
        if task is not None:
            task.cancel()

    def begin(self, uri: str) -> int:
        """Register a new request for ``uri``: cancels the previous one's work; returns its ticket."""
        n = self.requests.get(uri, 0) + 1
        self.requests[uri] = n
        old = self.inflight.pop(uri, None)
        if old is not None and not old.done():
            old.cancel()
        return n

    def cancel_inflight(self, uri: str) -> None:
        task = self.inflight.pop(uri, None)
        if task is not None and not task.done():
            task.cancel()

    def current(self, uri: str, ticket: int) -> bool:
        return self.requests.get(uri) == ticket


async def answer(
    ls: EditLanguageServer, doc: Document, offset: int, prefix: str, suffix: str, ticket: int
) -> Cached | None:
    """Debounce, check staleness, ask the model, post-process, cache and log one FIM suggestion."""
    s = ls.settings
    version = doc.version
    if s.debounce_ms:
        await asyncio.sleep(s.debounce_ms / 1000)
    if not ls.fim.current(doc.uri, ticket) or doc.version != version:
        return None
    grammar = grammar_name(doc.language_id, doc.uri) or doc.language_id
    line, _ = doc.position_at(offset)
    line_start, _ = doc.line_bounds(line)
    line_prefix = doc.text[line_start:offset]
    model_prefix = tail_chars(prefix, s.fim_prefix_chars)
    parsed = ls.parsed.get(doc.uri)
    if parsed is not None and len(model_prefix) < s.fim_prefix_chars:
        names = {
            n.text.decode("utf-8", "replace")
            for n in parsed.identifiers(max(0, line - 10), line + 3)
            if n.text
        }
        defs = definitions_for(names, ls.others(doc.uri))
        model_prefix = context_header(grammar, defs, s.fim_prefix_chars - len(model_prefix)) + model_prefix
    model_suffix = head_chars(suffix, s.fim_suffix_chars)
    multi = multiline_allowed(line_prefix, suffix.split("\n", 1)[0], grammar)
    stop = ["\n\n\n"] if multi else ["\n"]
    max_tokens = s.fim_max_tokens if multi else s.fim_line_max_tokens
    model_prefix, model_suffix = fit_fim(model_prefix, model_suffix, max_tokens, ls.model.limits)
    raw = await ls.model.fim(
        model_prefix,
        model_suffix,
        max_tokens,
        stop,
        s.fim_timeout_ms / 1000,
    )
    ls.send_status()
    if raw is None:
        return None
    text = postprocess(raw, prefix, suffix, grammar, indent_style(doc.text))
    if not text:
        return None
    cid = ls.fim.remember(doc.uri, prefix, suffix, text)
    ls.telemetry.suggestion(
        cid,
        "fim",
        doc.uri,
        doc.language_id,
        {"prefix": model_prefix, "suffix": model_suffix, "max_tokens": max_tokens, "stop": stop, "raw": raw},
        text,
        None,
    )
    return ls.fim.cache[doc.uri]
