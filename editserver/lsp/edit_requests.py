"""Next-edit requests of the language server: ``editserver/nextEdit`` and Copilot's
``textDocument/copilotInlineEdit``, from raw params to the reply (the suggestion itself is
lsp/nextedit.py).

Design decisions:
- Both requests share one path, ``suggest_edits``: validate the params (a clear LSP
  InvalidParams error for anything malformed), skip excluded files (nothing is sent), supersede the
  document's older in-flight request, ask, and remember the suggestion for ``editserver/applyEdits``
  (lsp/indexing.py). Only the reply's shape differs.
- Custom methods keep their params as plain JSON dicts (lsp/server.py's converter), so validation
  is written here, against the JSON, not against generated types.
- The nextEdit reply carries, beside the contract's ``{id, edits, score}``, a diagnostic ``regions``
  list (which places were asked about, their score and whether they were kept); clients ignore it.
- Streaming: with ``partialResults: true`` each kept region goes out as an
  ``editserver/nextEditPartial`` notification (same ``id`` as the final reply, with its ``rank``) as
  soon as it is vetted; the final reply still carries every kept edit, so a client that ignores
  partials loses nothing.
- Cancellation: a newer request for the same document cancels the older one (and its HTTP calls),
  which answers ``skipped: "superseded by a newer edit"``; a client's ``$/cancelRequest`` is passed
  on to pygls, which answers RequestCancelled. The server's didChange cancels the same task.
- Copilot's shape holds one document's edits, each with an Accept command naming its index, so
  acceptance is logged like an inline completion's.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any

from pygls.exceptions import JsonRpcInvalidParams

from editserver.lsp.indexing import remember
from editserver.lsp.nextedit import Suggestion, region_info, suggest

if TYPE_CHECKING:
    from editserver.lsp.server import EditLanguageServer

NEXT_EDIT = "editserver/nextEdit"
NEXT_EDIT_PARTIAL = "editserver/nextEditPartial"
COPILOT_INLINE_EDIT = "textDocument/copilotInlineEdit"


def _position(p: Any, where: str) -> tuple[int, int]:
    if not isinstance(p, dict) or not all(
        isinstance(p.get(k), int) and p[k] >= 0 for k in ("line", "character")
    ):
        raise JsonRpcInvalidParams(
            f"{where}: position must be {{line, character}} with non-negative integers"
        )
    return p["line"], p["character"]


def _edit_json(r) -> list[dict]:
    """A region's edits; each names its file and the version they apply to (null: its text on disk)."""
    doc = r.ask.doc
    return [
        {
            "textDocument": {"uri": doc.uri, "version": r.ask.version},
            "range": doc.lsp_range(e.start, e.end),
            "newText": e.new_text,
        }
        for e in r.edits
    ]


async def suggest_edits(ls: EditLanguageServer, params: Any, where: str, stream: bool = False) -> Suggestion:
    """Validate params, then ask (shared by editserver/nextEdit and copilotInlineEdit).

    ``trigger: "auto"`` (a client's own request after an edit) is gated on the edit history (see
    lsp/nextedit.py); with ``stream`` each kept region is sent as ``editserver/nextEditPartial``."""
    if not isinstance(params, dict) or not isinstance(params.get("textDocument"), dict):
        raise JsonRpcInvalidParams(f"{where}: params must be {{textDocument: {{uri}}, position}}")
    doc = ls.doc_for(params["textDocument"].get("uri"), where)
    line, char = _position(params.get("position"), where)
    trigger = params.get("trigger", "manual")
    if trigger not in ("auto", "manual"):
        raise JsonRpcInvalidParams(f'{where}: trigger must be "auto" or "manual"')
    sid = uuid.uuid4().hex  # the request's one id: telemetry, partials, the reply and applyEdits
    if doc.uri in ls.excluded:
        why = f"excluded: matches excludeFiles pattern {ls.excluded[doc.uri]!r}; nothing was sent"
        return Suggestion(sid, doc, doc.version, skipped=why)
    # a newer next-edit request for the same document supersedes this one (and its HTTP calls)
    older = ls.next_inflight.pop(doc.uri, None)
    if older is not None and not older.done():
        older.cancel()
    version = doc.version
    sent = [0]

    def on_kept(r) -> None:
        ls.protocol.notify(
            NEXT_EDIT_PARTIAL,
            {
                "id": sid,
                "textDocument": {"uri": doc.uri, "version": version},
                "edits": _edit_json(r),
                "score": r.score,
                "rank": sent[0],
            },
        )
        sent[0] += 1

    task = asyncio.ensure_future(
        suggest(ls, sid, doc, line, char, auto=trigger == "auto", on_kept=on_kept if stream else None)
    )
    ls.next_inflight[doc.uri] = task
    try:
        sug = await task
    except asyncio.CancelledError:
        task.cancel()
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise  # $/cancelRequest
        return Suggestion(sid, doc, doc.version, skipped="superseded by a newer edit")
    remember(ls, sug)
    return sug


def register_next_edit(ls: EditLanguageServer, inline_accepted: str) -> None:
    """``editserver/nextEdit`` and ``textDocument/copilotInlineEdit``; ``inline_accepted`` is the
    command each Copilot-shaped edit carries (registered by lsp/telemetry.py)."""

    @ls.feature(NEXT_EDIT)
    async def next_edit(params: Any) -> dict:
        stream = isinstance(params, dict) and params.get("partialResults") is True
        sug = await suggest_edits(ls, params, NEXT_EDIT, stream)
        sid, kept, results = sug.id, sug.kept, sug.results
        out = {
            "id": sid,
            "edits": [e for r in kept for e in _edit_json(r)],
            "score": kept[0].score if kept else 0.0,
            "regions": [region_info(r, kept) for r in results],
        }
        if sug.skipped:
            out["skipped"] = sug.skipped
        return out

    @ls.feature(COPILOT_INLINE_EDIT)
    async def copilot_inline_edit(params: Any) -> dict:
        sug = await suggest_edits(ls, params, COPILOT_INLINE_EDIT)
        sid, doc, version, kept = sug.id, sug.doc, sug.version, sug.kept
        out = []
        # editIndex counts as the nextEdit reply's flat edits do (what telemetry maps to a region):
        # rank puts the edited file's regions first, so its edits have the same indices in both
        for r in kept:
            if r.uri != doc.uri:
                continue  # Copilot's shape is one document's edits
            for e in r.edits:
                out.append(
                    {
                        "text": e.new_text,
                        "range": doc.lsp_range(e.start, e.end),
                        "textDocument": {"uri": doc.uri, "version": version},
                        "command": {
                            "title": "Accept",
                            "command": inline_accepted,
                            "arguments": [{"id": sid, "editIndex": len(out)}],
                        },
                    }
                )
        return {"edits": out}
