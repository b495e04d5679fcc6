"""Next edits, stage 4: telemetry, the reply shapes, and the suggestions kept for ``editserver/applyEdits``.

Floor 7 (see lsp/__init__.py): takes ``RegionResult``s (nextedit/ask.py) as vet.py kept and ranked
them, and the server's state; imports no other stage. What goes over the wire is built here as
plain JSON; the handlers (server.py) send it.

Design decisions:
- One id per request, made by the handler: the telemetry row (``reply``), each
  ``editserver/nextEditPartial`` notification, the reply and ``applyEdits`` all carry it.
- The nextEdit reply carries, beside the contract's ``{id, edits, score}``, a diagnostic
  ``regions`` list (which places were asked about, their score and whether they were kept); clients
  ignore it. Each edit names its file and the version it applies to (null: its text on disk).
- Streaming: with ``partialResults: true`` each kept region goes out as a partial (same ``id`` as
  the final reply, with its ``rank``) as soon as it is vetted; the final reply still carries every
  kept edit, so a client that ignores partials loses nothing.
- Copilot's shape (``textDocument/copilotInlineEdit``) holds one document's edits, each with an
  Accept command naming its index, so acceptance is logged like an inline completion's. Its
  ``editIndex`` counts as the nextEdit reply's flat edits do (ranking puts the edited file's regions
  first, so its edits have the same indices in both).
- Edits to another file are shown by the client from the nextEdit reply and applied through
  ``editserver/applyEdits {id, uri}``: the LSP checks that the file still has the text the edits
  were computed on (the open document's version, or else its text on disk) and only then sends
  ``workspace/applyEdit``. An edit whose file changed since is dropped from the suggestion and
  never applied; the answer says why.
- Suggestions are kept for ``applyEdits`` by id, the newest 16 only, with their regions as the reply
  listed them (``Offered``): a file applied or refused is marked done rather than cut from the list,
  so each edit keeps its index in the reply's flat ``edits``. An applied file is logged as one
  ``accept`` per region, naming the region's first edit by that index, as a client's ``didAccept``
  names an edit (protocol/telemetry_log.py maps it to the region).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from editserver.lsp.documents import Document, uri_to_path
from editserver.lsp.nextedit.ask import RegionResult
from editserver.lsp.state import ServerState
from editserver.lsp.telemetry import Telemetry

NEXT_EDIT_PARTIAL = "editserver/nextEditPartial"
APPLY_EDITS = "editserver/applyEdits"
KEEP_SUGGESTIONS = 16


@dataclass
class Suggestion:
    id: str
    doc: Document
    version: int  # the edited document's version the in-file edits apply to
    kept: list[RegionResult] = field(default_factory=list)  # shown: in-file best first, then other files
    results: list[RegionResult] = field(default_factory=list)  # every region asked about
    skipped: str | None = None  # why no model was asked (an automatic request after a plain edit)


def reply(
    telemetry: Telemetry,
    sid: str,
    doc: Document,
    version: int,
    results: list[RegionResult],
    kept: list[RegionResult],
) -> Suggestion:
    """The suggestion (``kept`` as vet.py ranked them), logged to local telemetry under ``sid``."""
    if kept:
        telemetry.suggestion(
            sid,
            "next_edit",
            doc.uri,
            doc.language_id,
            {"prompts": [r.prompt for r in kept]},
            [
                {
                    "uri": r.uri,
                    "region": [r.region.first_line, r.region.last_line],
                    "rewritten": r.rewritten,
                    "score": r.score,
                    "edits": len(r.edits),  # maps a didAccept's editIndex to its region (telemetry_log)
                }
                for r in kept
            ],
            kept[0].score,
        )
    return Suggestion(sid, doc, version, kept, results)


# ---- reply shapes --------------------------------------------------------------------------------
def _edit_json(r: RegionResult) -> list[dict]:
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


def region_info(r: RegionResult, kept: list[RegionResult]) -> dict:
    """Diagnostic summary of one asked region (the nextEdit reply's ``regions``); ``cursor`` is where
    its prompt put ``<|cursor|>`` (for a use region: the use)."""
    line, character = r.ask.doc.position_at(r.ask.at)
    return {
        "uri": r.uri,
        "range": {
            "start": {"line": r.region.first_line, "character": 0},
            "end": {"line": r.region.last_line + 1, "character": 0},
        },
        "cursor": {"line": line, "character": character},
        "reason": r.region.reason,
        "distance": r.ask.distance,
        "score": r.score,
        "aboveThreshold": r.above_threshold,
        "kept": r in kept,
        "rejected": r.rejected,
    }


def next_edit_json(sug: Suggestion) -> dict:
    """``editserver/nextEdit``'s reply."""
    out = {
        "id": sug.id,
        "edits": [e for r in sug.kept for e in _edit_json(r)],
        "score": sug.kept[0].score if sug.kept else 0.0,
        "regions": [region_info(r, sug.kept) for r in sug.results],
    }
    if sug.skipped:
        out["skipped"] = sug.skipped
    return out


def copilot_json(sug: Suggestion, accept_command: str) -> dict:
    """``textDocument/copilotInlineEdit``'s reply: the edited document's edits, each with an Accept
    command (``accept_command``) naming its index."""
    doc, out = sug.doc, []
    for r in sug.kept:
        if r.uri != doc.uri:
            continue  # Copilot's shape is one document's edits
        for e in r.edits:
            arguments = [{"id": sug.id, "editIndex": len(out)}]
            out.append(
                {
                    "text": e.new_text,
                    "range": doc.lsp_range(e.start, e.end),
                    "textDocument": {"uri": doc.uri, "version": sug.version},
                    "command": {"title": "Accept", "command": accept_command, "arguments": arguments},
                }
            )
    return {"edits": out}


class Partials:
    """The callback that sends each kept region as ``editserver/nextEditPartial`` (its ``rank``
    counting from 0), for the document's version as it is now. It keeps what it sent: a request
    superseded after its first partials still files them under its id (``sent``), so the client's
    shows and accepts of those partials join a suggestion row."""

    def __init__(self, notify: Callable[[str, Any], None], sid: str, doc: Document):
        self.notify, self.sid, self.doc, self.version = notify, sid, doc, doc.version
        self.sent: list[RegionResult] = []

    def __call__(self, r: RegionResult) -> None:
        params = {
            "id": self.sid,
            "textDocument": {"uri": self.doc.uri, "version": self.version},
            "edits": _edit_json(r),
            "score": r.score,
            "rank": len(self.sent),
        }
        self.notify(NEXT_EDIT_PARTIAL, params)
        self.sent.append(r)


# ---- applyEdits ----------------------------------------------------------------------------------
@dataclass
class Offered:
    """A suggestion kept for ``applyEdits``: ``sug.kept`` stays as the reply listed it; ``done``
    holds the files applied or refused since."""

    sug: Suggestion
    done: set[str] = field(default_factory=set)

    def first_edit(self, region: RegionResult) -> int:
        """The index of ``region``'s first edit in the reply's flat ``edits``."""
        n = 0
        for r in self.sug.kept:
            if r is region:
                return n
            n += len(r.edits)
        raise ValueError("not a region of this suggestion")


def remember(st: ServerState, sug: Suggestion) -> None:
    """Keep a suggestion with edits for ``applyEdits`` (the newest ``KEEP_SUGGESTIONS``)."""
    if sug.kept:
        st.suggestions[sug.id] = Offered(sug)
        while len(st.suggestions) > KEEP_SUGGESTIONS:
            st.suggestions.popitem(last=False)


@dataclass
class Application:
    """One file's edits of a kept suggestion, checked and ready for ``workspace/applyEdit``."""

    offered: Offered
    uri: str
    regions: list[RegionResult]
    params: types.ApplyWorkspaceEditParams


def _unchanged(st: ServerState, r: RegionResult) -> str | None:
    """Why the edits of a region may no longer be applied, or None when its file is as they saw it."""
    uri = r.uri
    open_doc = st.docs.get(uri)
    if r.ask.version is not None:
        if open_doc is None or open_doc.version != r.ask.version:
            return "the file changed since the edit was computed"
        return None
    if open_doc is not None:
        return None if open_doc.text == r.ask.doc.text else "the file changed since the edit was computed"
    try:
        now = Path(uri_to_path(uri, real=True)).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return "the file is gone"
    return None if now == r.ask.doc.text else "the file changed on disk since the edit was computed"


def application(st: ServerState, params: Any) -> Application | dict:
    """``editserver/applyEdits {id, uri}``: the suggestion's edits to one file as a workspace edit,
    or the answer saying why there is none (a file that changed since is refused for good)."""
    if (
        not isinstance(params, dict)
        or not isinstance(params.get("id"), str)
        or not isinstance(params.get("uri"), str)
    ):
        raise JsonRpcInvalidParams(f"{APPLY_EDITS}: params must be {{id, uri}}")
    offered = st.suggestions.get(params["id"])
    if offered is None:
        return {"applied": False, "reason": "unknown or expired suggestion id"}
    sug, uri = offered.sug, params["uri"]
    regions = [r for r in sug.kept if r.uri == uri and uri not in offered.done]
    if not regions:
        return {"applied": False, "reason": "no edits for this file"}
    why = next((w for w in map(lambda r: _unchanged(st, r), regions) if w), None)
    if why is not None:
        offered.done.add(uri)  # dropped: never applied
        return {"applied": False, "reason": why}
    doc = regions[0].ask.doc
    open_doc = st.docs.get(uri)
    change = types.TextDocumentEdit(
        text_document=types.OptionalVersionedTextDocumentIdentifier(
            uri=uri, version=open_doc.version if open_doc is not None else None
        ),
        edits=[
            types.TextEdit(range=_range(doc.lsp_range(e.start, e.end)), new_text=e.new_text)
            for e in _edits(regions)
        ],
    )
    edit = types.WorkspaceEdit(document_changes=[change])
    return Application(
        offered, uri, regions, types.ApplyWorkspaceEditParams(edit=edit, label="editserver: next edit")
    )


def applied(st: ServerState, app: Application, result: types.ApplyWorkspaceEditResult) -> dict:
    """The ``applyEdits`` answer once the client applied (or refused) the edits; an applied file is
    done, and logged as one accept per region."""
    if result.applied:
        app.offered.done.add(app.uri)
        for r in app.regions:  # each region taken whole (module docstring)
            st.telemetry.event(app.offered.sug.id, "accept", app.offered.first_edit(r))
    edits = _edits(app.regions)
    return {
        "applied": bool(result.applied),
        "reason": result.failure_reason,
        "uri": app.uri,
        "range": app.regions[0].ask.doc.lsp_range(edits[0].start, edits[0].end),
        "edits": len(edits),
    }


def _edits(regions: list[RegionResult]) -> list:
    return sorted((e for r in regions for e in r.edits), key=lambda e: e.start)


def _range(r: dict) -> types.Range:
    return types.Range(
        types.Position(r["start"]["line"], r["start"]["character"]),
        types.Position(r["end"]["line"], r["end"]["character"]),
    )
