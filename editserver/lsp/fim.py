"""Inline completion (FIM): prompt assembly, the model call, post-processing, debounce and staleness.

Floor 5 (see lsp/__init__.py): takes the server's state (lsp/state.py), never the server; the
handler (server.py ``inline_completion``) answers from the cache or starts ``answer`` and owns its
cancellation.

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
- Cache: the last suggestion per document is kept with the prefix/suffix it answered
  (``state.FimScheduler``). While the user types characters that match it, the rest of it is
  returned at once, with no debounce and no HTTP.
- The model client is looked up on the state after the debounce, never held from before it: a
  settings change may have replaced it meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from editserver.lsp.budget import fit_fim, head_chars, tail_chars
from editserver.lsp.documents import Document
from editserver.lsp.state import Cached, ServerState
from editserver.lsp.treesitter import grammar_name
from editserver.protocol.postprocess import indent_style, multiline_allowed, postprocess

__all__ = ["indent_style", "multiline_allowed", "postprocess", "answer", "context_header"]

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


async def answer(
    st: ServerState,
    doc: Document,
    offset: int,
    prefix: str,
    suffix: str,
    ticket: int,
    on_answered: Callable[[], None],
) -> Cached | None:
    """Debounce, check staleness, ask the model, post-process, cache and log one FIM suggestion;
    ``on_answered`` runs once the model has answered (the server's status carries its latency)."""
    s = st.settings
    version = doc.version
    if s.debounce_ms:
        await asyncio.sleep(s.debounce_ms / 1000)
    if not st.fim.current(doc.uri, ticket) or doc.version != version:
        return None
    grammar = grammar_name(doc.language_id, doc.uri) or doc.language_id
    line, _ = doc.position_at(offset)
    line_start, _ = doc.line_bounds(line)
    line_prefix = doc.text[line_start:offset]
    model_prefix = tail_chars(prefix, s.fim_prefix_chars)
    if len(model_prefix) < s.fim_prefix_chars:
        defs = st.definitions_near(doc.uri, max(0, line - 10), line + 3)
        model_prefix = context_header(grammar, defs, s.fim_prefix_chars - len(model_prefix)) + model_prefix
    model_suffix = head_chars(suffix, s.fim_suffix_chars)
    multi = multiline_allowed(line_prefix, suffix.split("\n", 1)[0], grammar)
    stop = ["\n\n\n"] if multi else ["\n"]
    max_tokens = s.fim_max_tokens if multi else s.fim_line_max_tokens
    model_prefix, model_suffix = fit_fim(model_prefix, model_suffix, max_tokens, st.model.limits)
    raw = await st.model.fim(model_prefix, model_suffix, max_tokens, stop, s.fim_timeout_ms / 1000)
    on_answered()
    if raw is None:
        return None
    text = postprocess(raw, prefix, suffix, grammar, indent_style(doc.text))
    if not text:
        return None
    cid = st.fim.remember(doc.uri, prefix, suffix, text)
    st.telemetry.suggestion(
        cid,
        "fim",
        doc.uri,
        doc.language_id,
        {"prefix": model_prefix, "suffix": model_suffix, "max_tokens": max_tokens, "stop": stop, "raw": raw},
        text,
        None,
    )
    return st.fim.cache[doc.uri]
