"""Local-only telemetry: suggestions and what the user did with them, in one SQLite file.

Floor 0 (see lsp/__init__.py): imports nothing of the language server.

Design decisions:
- Nothing is ever sent anywhere: rows go to a SQLite file on this machine (the ``telemetry.path``
  setting), and with ``telemetry.enabled = false`` the file is not even opened.
- By default no code is stored: a suggestion's prompt and text are kept as their shape, with each
  string replaced by its size and a short SHA-256 (``redact``; the prompt JSON then carries
  ``"omitted": true``), next to the kind, file, language, score and events, which is what the
  acceptance figures need. ``telemetry.keepPrompts`` opts in to the exact prompt (FIM prefix/suffix
  or the next-edit prompts), the suggestion and accepted text, so accepted/rejected pairs can become
  KTO training data; kept text is bounded by ``retentionDays`` (older text is redacted) and
  ``maxMegabytes`` (the oldest text is redacted first), checked on open and every ``PRUNE_EVERY``
  writes. KTO data otherwise comes from replay. ``editserver telemetry purge`` deletes and
  ``editserver telemetry stats`` says what the file holds (telemetry_cli.py). Events (``show``,
  ``accept`` with edit index / partial kind / accepted text, ``reject``) are rows of their own,
  referencing the suggestion by id; an event for an unknown id is still stored (the client may have
  cached a suggestion across a restart).
- The file's layout (``SCHEMA``) and the rule that turns its rows into KTO examples live in
  protocol/telemetry_log.py, shared with ``editserver align``, which may not import the LSP.
- The notifications that feed it (``editserver/didShow``, ``didAccept``, ``didReject`` and the inline
  items' accept command) are handlers in server.py; this module only writes.
- WAL mode and one short transaction per write keep the cost per keystroke at a fraction of a
  millisecond and let a reader (a training export) run while the editor is open.
- Telemetry never stops a suggestion: a corrupt file (SQLite says "not a database" or "malformed")
  is moved aside to ``PATH.corrupt-UNIXTIME`` and a new one is started; a write that fails for any
  other reason (a full disk) is dropped. Each kind of trouble is reported once (``warn``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from editserver.protocol.telemetry_log import KEPT, OMITTED, SCHEMA

log = logging.getLogger(__name__)

PRUNE_EVERY = 200  # writes between retention checks
CORRUPT = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB}


def redact(value: Any) -> Any:
    """``value``'s JSON shape with every string replaced by its size and a short SHA-256."""
    if isinstance(value, str):
        return {
            "chars": len(value),
            "sha256": hashlib.sha256(value.encode("utf-8", "replace")).hexdigest()[:16],
        }
    if isinstance(value, dict):
        return {k: redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    return value


def prune(db: sqlite3.Connection, retention_days: float, max_bytes: int) -> int:
    """Redact kept text older than ``retention_days`` and then the oldest until the kept text fits in
    ``max_bytes``; returns how many suggestions were redacted."""
    kept = KEPT
    cutoff = time.time() - retention_days * 86400
    with db:
        n = db.execute(
            f"UPDATE suggestions SET prompt=?, suggestion=? WHERE created < ? AND {kept}",
            (OMITTED, OMITTED, cutoff),
        ).rowcount
        db.execute("UPDATE events SET accepted_text=NULL WHERE created < ?", (cutoff,))
        total = db.execute(
            f"SELECT COALESCE(SUM(length(prompt) + length(suggestion)), 0) FROM suggestions WHERE {kept}"
        )
        excess = total.fetchone()[0] - max_bytes
        rows = db.execute(
            f"SELECT id, length(prompt) + length(suggestion) FROM suggestions WHERE {kept} ORDER BY created"
        ).fetchall()
        for sid, size in rows:
            if excess <= 0:
                break
            db.execute("UPDATE suggestions SET prompt=?, suggestion=? WHERE id=?", (OMITTED, OMITTED, sid))
            excess -= size
            n += 1
    return n


class Telemetry:
    def __init__(
        self,
        path: str | None,
        enabled: bool = True,
        warn: Callable[[str], None] | None = None,
        keep_prompts: bool = False,
    ):
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self.path: str | None = None
        self.keep_prompts, self.retention_days, self.max_bytes = False, 30.0, 100 << 20
        self.warn = warn or (lambda message: log.warning("%s", message))
        self._warned: set[str] = set()
        self._writes = 0
        self.configure(path, enabled, keep_prompts)

    def configure(
        self,
        path: str | None,
        enabled: bool,
        keep_prompts: bool = False,
        retention_days: float = 30.0,
        max_bytes: int = 100 << 20,
    ) -> None:
        with self._lock:
            self.keep_prompts, self.retention_days, self.max_bytes = keep_prompts, retention_days, max_bytes
            if self._db is not None and (not enabled or path != self.path):
                self._db.close()
                self._db = None
            self.path = path
            if enabled and path and self._db is None:
                self._guard(self._open)
            if self._db is not None:
                self._guard(lambda: prune(self._db, self.retention_days, self.max_bytes))

    def _open(self) -> None:
        file = Path(self.path).expanduser()
        file.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(str(file), check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(SCHEMA)
        except BaseException:
            db.close()
            raise
        self._db = db

    def _guard(self, action: Callable[[], Any]) -> None:
        """Run a database action; a corrupt file is moved aside and the action runs once more on a new
        one, any other failure (a full disk, a read-only directory) drops it. One warning per kind."""
        try:
            action()
            return
        except (sqlite3.Error, OSError) as exc:
            code = getattr(exc, "sqlite_errorcode", None)
            if code is None or code & 0xFF not in CORRUPT:
                return self._once("write", f"editserver: telemetry not recorded ({exc}); suggestions go on")
        aside = f"{Path(self.path).expanduser()}.corrupt-{int(time.time())}"
        if self._db is not None:
            self._db.close()
            self._db = None
        try:
            for suffix in ("-wal", "-shm"):  # the journal of a corrupt file belongs to it
                Path(str(Path(self.path).expanduser()) + suffix).unlink(missing_ok=True)
            Path(self.path).expanduser().rename(aside)
            self._open()
            action()
        except (sqlite3.Error, OSError) as exc:
            return self._once("write", f"editserver: telemetry not recorded ({exc}); suggestions go on")
        self._once("corrupt", f"editserver: telemetry file was corrupt, moved to {aside}; a new one started")

    def _once(self, kind: str, message: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            self.warn(message)

    @property
    def enabled(self) -> bool:
        return self._db is not None

    def suggestion(
        self, sid: str, kind: str, uri: str, language: str, prompt: Any, suggestion: Any, score: float | None
    ) -> None:
        if not self.keep_prompts:
            prompt, suggestion = {"omitted": True, **redact(prompt)}, redact(suggestion)
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
        if not self.keep_prompts:
            accepted_text = None
        self._write(
            "INSERT INTO events (suggestion_id, event, edit_index, partial, accepted_text, created) "
            "VALUES (?,?,?,?,?,?)",
            (sid, event, edit_index, partial, accepted_text, time.time()),
        )

    def _write(self, sql: str, row: tuple) -> None:
        def write() -> None:
            with self._db:
                self._db.execute(sql, row)

        with self._lock:
            if self._db is None:
                return
            self._guard(write)
            self._writes += 1
            if self._writes % PRUNE_EVERY == 0 and self._db is not None:
                self._guard(lambda: prune(self._db, self.retention_days, self.max_bytes))

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
