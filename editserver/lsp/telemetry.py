"""Local-only telemetry: suggestions and what the user did with them, in one SQLite file.

Design decisions:
- Nothing is ever sent anywhere: rows go to a SQLite file on this machine (the ``telemetry.path``
  setting), and with ``telemetry.enabled = false`` the file is not even opened.
- Each suggestion is stored when it is produced, with the exact prompt (FIM prefix/suffix or the
  next-edit prompts) and the suggestion, so accepted/rejected pairs can later become KTO training
  data. Events (``show``, ``accept`` with edit index / partial kind / accepted text, ``reject``) are
  rows of their own, referencing the suggestion by id; an event for an unknown id is still stored
  (the client may have cached a suggestion across a restart).
- The notifications that feed it (``editserver/didShow``, ``didAccept``, ``didReject`` and the inline
  items' accept command) are registered here, by ``register_telemetry``.
- WAL mode and one short transaction per write keep the cost per keystroke at a fraction of a
  millisecond and let a reader (a training export) run while the editor is open.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from editserver.lsp.server import EditLanguageServer

log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS suggestions (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,            -- 'fim' | 'next_edit'
    created REAL NOT NULL,         -- unix time
    uri TEXT NOT NULL,
    language TEXT,
    prompt TEXT NOT NULL,          -- JSON: {prefix, suffix} or {prompts: [...]}
    suggestion TEXT NOT NULL,      -- JSON: the text / edits offered
    score REAL
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    suggestion_id TEXT NOT NULL,
    event TEXT NOT NULL,           -- 'show' | 'accept' | 'reject'
    edit_index INTEGER,
    partial TEXT,                  -- NULL (whole) | 'word' | 'line'
    accepted_text TEXT,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_suggestion ON events (suggestion_id);
"""


class Telemetry:
    def __init__(self, path: str | None, enabled: bool = True):
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self.path: str | None = None
        self.configure(path, enabled)

    def configure(self, path: str | None, enabled: bool) -> None:
        with self._lock:
            if self._db is not None and (not enabled or path != self.path):
                self._db.close()
                self._db = None
            self.path = path
            if enabled and path and self._db is None:
                Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
                self._db = sqlite3.connect(str(Path(path).expanduser()), check_same_thread=False)
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.executescript(SCHEMA)

    @property
    def enabled(self) -> bool:
        return self._db is not None

    def suggestion(
        self, sid: str, kind: str, uri: str, language: str, prompt: Any, suggestion: Any, score: float | None
    ) -> None:
        self._write(
            "INSERT OR REPLACE INTO suggestions VALUES (?,?,?,?,?,?,?,?)",
            (sid, kind, time.time(), uri, language, json.dumps(prompt), json.dumps(suggestion), score),
        )

    def event(
        self,
        sid: str,
        event: str,
        edit_index: int | None = None,
        partial: str | None = None,
        accepted_text: str | None = None,
    ) -> None:
        self._write(
            "INSERT INTO events (suggestion_id, event, edit_index, partial, accepted_text, created) "
            "VALUES (?,?,?,?,?,?)",
            (sid, event, edit_index, partial, accepted_text, time.time()),
        )

    def _write(self, sql: str, row: tuple) -> None:
        with self._lock:
            if self._db is None:
                return
            with self._db:
                self._db.execute(sql, row)

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


def register_telemetry(ls: EditLanguageServer, inline_accepted: str) -> None:
    """The didShow / didAccept / didReject notifications and the inline items' accept command."""

    def _id(params: Any, method: str) -> str | None:
        if isinstance(params, dict) and isinstance(params.get("id"), str):
            return params["id"]
        log.warning("%s without a string id: %r", method, params)
        return None

    @ls.feature("editserver/didShow")
    def did_show(params: Any) -> None:
        if (sid := _id(params, "didShow")) is not None:
            ls.telemetry.event(sid, "show")

    @ls.feature("editserver/didAccept")
    def did_accept(params: Any) -> None:
        if (sid := _id(params, "didAccept")) is None:
            return
        idx = params.get("editIndex")
        partial = params.get("partial")
        text = params.get("acceptedText")
        ls.telemetry.event(
            sid,
            "accept",
            idx if isinstance(idx, int) else None,
            partial if partial in ("word", "line") else None,
            text if isinstance(text, str) else None,
        )

    @ls.feature("editserver/didReject")
    def did_reject(params: Any) -> None:
        if (sid := _id(params, "didReject")) is not None:
            ls.telemetry.event(sid, "reject")

    @ls.command(inline_accepted)
    def inline_accepted(*args):
        arg = args[0] if args else None
        if isinstance(arg, list) and arg:
            arg = arg[0]
        if isinstance(arg, dict) and isinstance(arg.get("id"), str):
            idx = arg.get("editIndex")
            ls.telemetry.event(arg["id"], "accept", idx if isinstance(idx, int) else None)
