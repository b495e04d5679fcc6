"""The workspace side of the language server: the symbol index's life and edits to other files.

Design decisions:
- The index (lsp/index.py) is created at ``initialize`` from the workspace folders (or the root)
  and built in the background once the client is ``initialized``; the LSP answers from the first
  moment, and cross-file edits start once the build is done. ``didSave`` and
  ``workspace/didChangeWatchedFiles`` (registered dynamically when the client can watch files)
  re-read the files they name.
- Edits to another file are shown by the client from the nextEdit reply (each edit carries its
  ``uri``; ``version`` null when it was computed on the text on disk) and applied through
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

import asyncio
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.uris import to_fs_path

from editserver.lsp.documents import uri_to_path
from editserver.lsp.index import WorkspaceIndex
from editserver.lsp.treesitter import _EXT

if TYPE_CHECKING:
    from editserver.lsp.nextedit import Suggestion
    from editserver.lsp.server import EditLanguageServer

log = logging.getLogger(__name__)

APPLY_EDITS = "editserver/applyEdits"
INDEX_STATE = "editserver/indexState"
KEEP_SUGGESTIONS = 16
WATCH_GLOB = "**/*.{" + ",".join(sorted(e[1:] for e in _EXT)) + "}"


def workspace_roots(params: types.InitializeParams) -> list[str]:
    """Folders to index: the workspace folders, else the root."""
    folders = [to_fs_path(f.uri) for f in params.workspace_folders or []]
    return [f for f in folders or [workspace_root(params)] if f]


def workspace_root(params: types.InitializeParams) -> str:
    """The root the client names (``rootUri``, else the older ``rootPath``); "" when it names none."""
    return (to_fs_path(params.root_uri) if params.root_uri else params.root_path) or ""


@dataclass
class Offered:
    """A suggestion kept for ``applyEdits``: ``sug.kept`` stays as the reply listed it; ``done``
    holds the files applied or refused since."""

    sug: Suggestion
    done: set[str] = field(default_factory=set)

    def first_edit(self, region) -> int:
        """The index of ``region``'s first edit in the reply's flat ``edits``."""
        n = 0
        for r in self.sug.kept:
            if r is region:
                return n
            n += len(r.edits)
        raise ValueError("not a region of this suggestion")


def remember(ls: EditLanguageServer, sug: Suggestion) -> None:
    if sug.kept:
        ls.suggestions[sug.id] = Offered(sug)
        while len(ls.suggestions) > KEEP_SUGGESTIONS:
            ls.suggestions.popitem(last=False)


def _unchanged(ls: EditLanguageServer, r) -> str | None:
    """Why the edits of a region may no longer be applied, or None when its file is as they saw it."""
    uri = r.uri
    open_doc = ls.docs.get(uri)
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


async def apply_edits(ls: EditLanguageServer, params: Any) -> dict:
    """``editserver/applyEdits {id, uri}``: the suggestion's edits to one file, through workspace/applyEdit."""
    if (
        not isinstance(params, dict)
        or not isinstance(params.get("id"), str)
        or not isinstance(params.get("uri"), str)
    ):
        raise JsonRpcInvalidParams(f"{APPLY_EDITS}: params must be {{id, uri}}")
    offered = ls.suggestions.get(params["id"])
    if offered is None:
        return {"applied": False, "reason": "unknown or expired suggestion id"}
    sug, uri = offered.sug, params["uri"]
    regions = [r for r in sug.kept if r.uri == uri and uri not in offered.done]
    if not regions:
        return {"applied": False, "reason": "no edits for this file"}
    why = next((w for w in map(lambda r: _unchanged(ls, r), regions) if w), None)
    if why is not None:
        offered.done.add(uri)  # dropped: never applied
        return {"applied": False, "reason": why}
    doc = regions[0].ask.doc
    edits = sorted((e for r in regions for e in r.edits), key=lambda e: e.start)
    open_doc = ls.docs.get(uri)
    change = types.TextDocumentEdit(
        text_document=types.OptionalVersionedTextDocumentIdentifier(
            uri=uri, version=open_doc.version if open_doc is not None else None
        ),
        edits=[
            types.TextEdit(range=_range(doc.lsp_range(e.start, e.end)), new_text=e.new_text) for e in edits
        ],
    )
    res = await ls.workspace_apply_edit_async(
        types.ApplyWorkspaceEditParams(
            edit=types.WorkspaceEdit(document_changes=[change]), label="editserver: next edit"
        )
    )
    if res.applied:
        offered.done.add(uri)
        for r in regions:  # each region taken whole (module docstring)
            ls.telemetry.event(sug.id, "accept", offered.first_edit(r))
    return {
        "applied": bool(res.applied),
        "reason": res.failure_reason,
        "uri": uri,
        "range": doc.lsp_range(edits[0].start, edits[0].end),
        "edits": len(edits),
    }


def _range(r: dict) -> types.Range:
    return types.Range(
        types.Position(r["start"]["line"], r["start"]["character"]),
        types.Position(r["end"]["line"], r["end"]["character"]),
    )


async def _watch(ls: EditLanguageServer) -> None:
    ws = ls.client_capabilities.workspace
    watched = ws.did_change_watched_files if ws is not None else None
    if watched is None or not watched.dynamic_registration:
        return
    try:
        await ls.client_register_capability_async(
            types.RegistrationParams(
                registrations=[
                    types.Registration(
                        id="editserver-index",
                        method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                        register_options=types.DidChangeWatchedFilesRegistrationOptions(
                            watchers=[types.FileSystemWatcher(glob_pattern=WATCH_GLOB)]
                        ),
                    )
                ]
            )
        )
    except Exception as e:  # a client that advertises but refuses: didSave still keeps the index current
        log.warning("file watching not registered: %s", e)


def start_index(ls: EditLanguageServer) -> None:
    """Create the index from the roots given at initialize and build it in the background."""
    s = ls.settings
    if not s.cross_file or not ls.roots:
        return
    ls.index = WorkspaceIndex(ls.roots, max_files=s.index_max_files, max_bytes=s.index_max_bytes)
    if ls.index.roots:
        ls.index_task = asyncio.ensure_future(ls.index.build())
        asyncio.ensure_future(_watch(ls))


def register_workspace(ls: EditLanguageServer) -> None:
    @ls.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def did_change_watched_files(params: types.DidChangeWatchedFilesParams) -> None:
        if ls.index is not None:
            for ch in params.changes:
                ls.index.update(uri_to_path(ch.uri))

    @ls.feature(APPLY_EDITS)
    async def apply(params: Any) -> dict:
        return await apply_edits(ls, params)

    @ls.feature(INDEX_STATE)
    async def index_state(params: Any) -> dict:
        """The index's state and build figures; ``{wait: true}`` answers once the build is done."""
        if ls.index is None:
            return {"state": "off", "files": 0}
        if isinstance(params, dict) and params.get("wait") and ls.index_task is not None:
            await asyncio.shield(ls.index_task)
        return {
            "state": ls.index.state,
            "files": len(ls.index.files),
            "roots": ls.index.roots,
            "cache": str(ls.index.cache_file()),
            "stats": ls.index.stats,
            "pid": os.getpid(),
        }
