"""Inline completion (FIM): prompt assembly, post-processing, debounce, cancellation and caching.

Design decisions:
- Prefix and suffix are cut at line boundaries within character budgets; definitions of identifiers
  near the cursor, found in *other* open documents, are prepended to the prefix as a comment block in
  the file's language (so the prefix stays valid code for the model).
- Post-processing (pure functions, unit-tested without a model): broken characters (U+FFFD from
  tokens that do not decode, control characters) are dropped;
  single line when the cursor is mid-line or the line does not open a block, multi-line (up to
  ``MAX_LINES``, stopping where the code dedents below the cursor's block) otherwise; trailing text that
  repeats the start of the suffix is dropped (overlap), as are closing brackets the rest of the line
  already has and lines that repeat the suffix's next line; indentation is converted to the file's
  style (tabs or spaces of its width); the first line loses indentation the cursor already typed.
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

from lsp.context import definitions_for, grammar_name
from lsp.documents import Document

if TYPE_CHECKING:
    from lsp.server import EditLanguageServer

MAX_LINES = 12
_OPENERS = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = {v: k for k, v in _OPENERS.items()}
_BLOCK_OPENERS = {
    "python": (":", "(", "[", "{", ","),
}
_C_BLOCK = ("{", "(", "[", "=>", ",")
_COMMENT = {"python": "#", "go": "//", "rust": "//", "javascript": "//", "typescript": "//", "tsx": "//"}


def indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def indent_style(text: str) -> tuple[str, int]:
    """("\\t", 0) for tab-indented files, (" ", width) for spaces (width of the smallest indent step)."""
    tabs = spaces = 0
    widths: dict[int, int] = {}
    for line in text.splitlines()[:2000]:
        ind = indent_of(line)
        if not ind or not line.strip():
            continue
        if ind.startswith("\t"):
            tabs += 1
        else:
            spaces += 1
            widths[len(ind)] = widths.get(len(ind), 0) + 1
    if tabs > spaces:
        return "\t", 0
    width = min(widths) if widths else 4
    return " ", width if width in (2, 3, 4, 8) else 4


def _convert_indent(line: str, style: tuple[str, int]) -> str:
    ind = indent_of(line)
    if not ind:
        return line
    char, width = style
    width = width or 4
    if char == "\t" and " " in ind:
        cols = sum(width if c == "\t" else 1 for c in ind)
        ind = "\t" * (cols // width) + " " * (cols % width)
    elif char == " " and "\t" in ind:
        ind = ind.replace("\t", " " * width)
    return ind + line[len(indent_of(line)) :]


def _clean(text: str) -> str:
    """Drop broken characters: U+FFFD (tokens that do not decode to whole UTF-8 characters) and control
    characters other than tab/newline. Inserting them would corrupt the user's file."""
    return "".join(ch for ch in text if ch != "\ufffd" and (ord(ch) >= 32 or ch in "\t\n") and ord(ch) != 127)


def multiline_allowed(line_prefix: str, line_suffix: str, language: str) -> bool:
    """Multi-line only at the end of a line that is empty so far or that opens a block."""
    if line_suffix.strip():
        return False
    stripped = line_prefix.rstrip()
    if not stripped:
        return True
    return stripped.endswith(_BLOCK_OPENERS.get(language, _C_BLOCK))


def _overlap(text: str, suffix: str) -> int:
    """Length of the longest tail of ``text`` equal to a head of ``suffix``. Short overlaps count only
    when they are punctuation (``)``, ``";``): a shared letter or two is more often a coincidence
    (``x + y`` before ``y + 1``) than a repeat."""
    best = 0
    for k in range(1, min(len(text), len(suffix), 400) + 1):
        head = suffix[:k]
        if text.endswith(head) and head.strip():
            if k >= 3 or not any(ch.isalnum() or ch == "_" for ch in head):
                best = k
    return best


def postprocess(
    completion: str,
    line_prefix: str,
    suffix: str,
    language: str,
    style: tuple[str, int] = (" ", 4),
) -> str:
    """Clean a raw FIM completion for insertion at the cursor; "" means nothing worth showing."""
    text = _clean(completion.replace("\r\n", "\n"))
    line_suffix = suffix.split("\n", 1)[0]
    if not multiline_allowed(line_prefix, line_suffix, language):
        text = text.split("\n", 1)[0]
    else:
        lines = text.split("\n")
        opens_block = bool(line_prefix.strip())  # multi-line after text only when the line opens a block
        base = (
            len(indent_of(line_prefix).expandtabs(style[1] or 4))
            if opens_block
            else len(line_prefix.expandtabs(style[1] or 4))
        )
        next_line = next((ln.strip() for ln in suffix.split("\n")[1:] if ln.strip()), "")
        kept = [lines[0]]
        for ln in lines[1:]:
            if ln.strip():
                depth = len(indent_of(ln).expandtabs(style[1] or 4))
                if depth < base or (opens_block and depth <= base):
                    break  # dedented out of the cursor's block: the rest belongs elsewhere
                if next_line and ln.strip() == next_line:
                    break  # the suffix already has this line
            kept.append(ln)
            if len(kept) >= MAX_LINES:
                break
        text = "\n".join(kept)
        text = "\n".join([text.split("\n")[0]] + [_convert_indent(ln, style) for ln in text.split("\n")[1:]])
    if line_prefix and not line_prefix.strip():
        text = text.lstrip(" \t")  # the cursor already stands at the line's indentation
    text = "\n".join(ln.rstrip() for ln in text.split("\n")).rstrip("\n")
    # text that merely repeats what follows the cursor
    k = _overlap(text, suffix.lstrip(" \t") if not line_suffix.strip() else line_suffix)
    if k:
        text = text[:-k].rstrip(" \t")
    # closing brackets the rest of the line already has
    text = _drop_duplicate_closers(line_prefix, text, line_suffix)
    return text if text.strip() else ""


def _drop_duplicate_closers(line_prefix: str, text: str, line_suffix: str) -> str:
    ahead = line_suffix.lstrip()
    if not ahead or ahead[0] not in _CLOSERS:
        return text
    depth = {c: 0 for c in _OPENERS}
    for ch in line_prefix + text:
        if ch in _OPENERS:
            depth[ch] += 1
        elif ch in _CLOSERS:
            depth[_CLOSERS[ch]] -= 1
    stripped = text.rstrip()
    while (
        stripped
        and stripped[-1] in _CLOSERS
        and depth[_CLOSERS[stripped[-1]]] < 0
        and ahead[:1] == stripped[-1]
    ):
        depth[_CLOSERS[stripped[-1]]] += 1
        stripped = stripped[:-1].rstrip()
    return stripped if stripped != text.rstrip() else text


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


def clip_prefix(prefix: str, budget: int) -> str:
    if len(prefix) <= budget:
        return prefix
    cut = prefix[-budget:]
    nl = cut.find("\n")
    return cut[nl + 1 :] if 0 <= nl < len(cut) - 1 else cut


def clip_suffix(suffix: str, budget: int) -> str:
    if len(suffix) <= budget:
        return suffix
    cut = suffix[:budget]
    nl = cut.rfind("\n")
    return cut[: nl + 1] if nl > 0 else cut


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
    model_prefix = clip_prefix(prefix, s.fim_prefix_chars)
    parsed = ls.parsed.get(doc.uri)
    if parsed is not None and len(model_prefix) < s.fim_prefix_chars:
        names = {
            n.text.decode("utf-8", "replace")
            for n in parsed.identifiers(max(0, line - 10), line + 3)
            if n.text
        }
        defs = definitions_for(names, ls.others(doc.uri))
        model_prefix = context_header(grammar, defs, s.fim_prefix_chars - len(model_prefix)) + model_prefix
    model_suffix = clip_suffix(suffix, s.fim_suffix_chars)
    multi = multiline_allowed(line_prefix, suffix.split("\n", 1)[0], grammar)
    stop = ["\n\n\n"] if multi else ["\n"]
    max_tokens = s.fim_max_tokens if multi else s.fim_line_max_tokens
    raw = await ls.client.fim(
        model_prefix,
        model_suffix,
        max_tokens,
        stop,
        s.fim_timeout_ms / 1000,
    )
    ls.send_status()
    if raw is None:
        return None
    text = postprocess(raw, line_prefix, suffix, grammar, indent_style(doc.text))
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
