"""The workspace symbol index's life: its roots, its background build, and files re-read as they change.

Floor 5 (see lsp/__init__.py): takes the server's state (lsp/state.py) or plain values, never the
server; the handlers (server.py) call it from ``initialize``, ``initialized``, ``didSave``,
``workspace/didChangeWatchedFiles`` and ``editserver/indexState``.

Design decisions:
- The index (lsp/index.py) is created from the workspace folders (or the root) given at
  ``initialize`` and built in the background once the client is ``initialized``; the LSP answers
  from the first moment, and cross-file edits start once the build is done (nextedit/plan.py waits
  for it a little).
- ``didSave`` and ``workspace/didChangeWatchedFiles`` re-read the files they name (``files_changed``).
  File watching is registered dynamically (``watch``), only when the client says it can; a client
  that advertises it but refuses keeps the index current through didSave alone.
- Only ``file:`` folders are roots: a folder of another scheme (a remote or virtual workspace) is
  not indexed.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from lsprotocol import types
from pygls.uris import to_fs_path

from editserver.lsp.documents import uri_to_path
from editserver.lsp.index import WorkspaceIndex
from editserver.lsp.state import ServerState
from editserver.lsp.treesitter import _EXT

log = logging.getLogger(__name__)

INDEX_STATE = "editserver/indexState"
WATCH_GLOB = "**/*.{" + ",".join(sorted(e[1:] for e in _EXT)) + "}"


def workspace_roots(params: types.InitializeParams) -> list[str]:
    """Folders to index: the workspace folders, else the root."""
    folders = [to_fs_path(f.uri) for f in params.workspace_folders or []]
    return [f for f in folders or [workspace_root(params)] if f]


def workspace_root(params: types.InitializeParams) -> str:
    """The root the client names (``rootUri``, else the older ``rootPath``); "" when it names none."""
    return (to_fs_path(params.root_uri) if params.root_uri else params.root_path) or ""


def start_index(st: ServerState) -> bool:
    """Create the index from the roots given at initialize and build it in the background; True when
    a build started (the files are then worth watching)."""
    s = st.settings
    if not s.cross_file or not st.roots:
        return False
    st.index = WorkspaceIndex(st.roots, max_files=s.index_max_files, max_bytes=s.index_max_bytes)
    if not st.index.roots:
        return False
    st.index_task = asyncio.ensure_future(st.index.build())
    return True


async def watch(
    capabilities: types.ClientCapabilities,
    register: Callable[[types.RegistrationParams], Awaitable[Any]],
) -> None:
    """Ask the client to report changes to source files (``workspace/didChangeWatchedFiles``), when
    it can register that dynamically; ``register`` is the server's client_register_capability_async."""
    ws = capabilities.workspace
    watched = ws.did_change_watched_files if ws is not None else None
    if watched is None or not watched.dynamic_registration:
        return
    options = types.DidChangeWatchedFilesRegistrationOptions(
        watchers=[types.FileSystemWatcher(glob_pattern=WATCH_GLOB)]
    )
    registration = types.Registration(
        id="editserver-index", method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES, register_options=options
    )
    try:
        await register(types.RegistrationParams(registrations=[registration]))
    except Exception as e:  # a client that advertises but refuses: didSave still keeps the index current
        log.warning("file watching not registered: %s", e)


def files_changed(st: ServerState, uris: list[str]) -> None:
    """Re-read files that were saved or changed on disk (a missing one leaves the index)."""
    if st.index is not None:
        for uri in uris:
            st.index.update(uri_to_path(uri))


async def index_state(st: ServerState, wait: bool) -> dict[str, Any]:
    """The index's state and build figures; with ``wait``, once the build is done."""
    if st.index is None:
        return {"state": "off", "files": 0}
    if wait and st.index_task is not None:
        await asyncio.shield(st.index_task)
    return {
        "state": st.index.state,
        "files": len(st.index.files),
        "roots": st.index.roots,
        "cache": str(st.index.cache_file()),
        "stats": st.index.stats,
        "pid": os.getpid(),
    }
