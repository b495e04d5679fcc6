"""The language server's shared state: what the handlers and the logic modules read and change.

Floor 4 (see lsp/__init__.py): imports only the data modules below it, never the server, a handler
or a next-edit stage.

Design decisions:
- One object, ``ServerState``, holds what lives as long as the server: the settings, the open
  documents and their parse trees, the edit history and the recently viewed files, the exclusions,
  the workspace root(s) and index (with the task that builds it), the FIM scheduler, telemetry,
  the model server's HTTP client (``model``), the next-edit suggestions kept for
  ``editserver/applyEdits``, and per document the in-flight next-edit task and the history marker of
  its last request. The server (server.py) owns one as ``ls.state``; logic modules (fim.py,
  indexing.py, nextedit/) are handed it, or plain values, and never see the server class.
- Nothing here speaks LSP: what must reach the editor (a status notification, a message, a
  restarted model client) is the server's. Methods say what changed instead (``apply_settings``
  whether the model server moved, ``open`` and ``close`` whether the status lists the file) and the
  server acts on it.
- Documents enter here (``open``, ``change``, ``focus``, ``close``), so this is where excluded files
  (``excludeFiles``, lsp/privacy.py) are decided: kept in sync, but never in the edit history, never
  a recently viewed snippet, never searched for definitions (``others``).
- Superseding is written once per kind: ``FimScheduler.begin``/``cancel_inflight`` for completions
  and ``cancel_next_edit`` for next edits; a didChange calls both, a newer request of its own kind.
- FIM scheduling (``FimScheduler``): per document, the last suggestion with the prefix/suffix it
  answered (typing that matches it is answered from it, with no debounce and no HTTP), the in-flight
  task, and a request counter that makes older requests stale (lsp/fim.py).
- All handlers run on pygls' asyncio loop, so the state needs no locks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from editserver.lsp.documents import Document, DocumentStore, uri_to_path
from editserver.lsp.history import EditEvent, EditHistory, Marker, RecentlyViewed
from editserver.lsp.index import WorkspaceIndex
from editserver.lsp.model_client import DISABLED, READY, ModelClient
from editserver.lsp.privacy import Exclusions
from editserver.lsp.settings import Settings, parse_settings
from editserver.lsp.telemetry import Telemetry
from editserver.lsp.treesitter import ParsedDocument, definitions_for, grammar_name

Span = tuple[int, int, int, int]  # an LSP range: start line, start character, end line, end character


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
        self.cancel_inflight(uri)
        return n

    def cancel_inflight(self, uri: str) -> None:
        _cancel(self.inflight, uri)

    def current(self, uri: str, ticket: int) -> bool:
        return self.requests.get(uri) == ticket


def _cancel(inflight: dict[str, asyncio.Task], uri: str) -> None:
    """Cancel ``uri``'s in-flight task, if one is still running, and forget it."""
    task = inflight.pop(uri, None)
    if task is not None and not task.done():
        task.cancel()


class ServerState:
    def __init__(
        self,
        server_url: str | None = None,
        autostart: bool | None = None,
        model_dir: str | None = None,
        warn: Callable[[str], None] | None = None,
    ):
        self.cli_server_url, self.cli_autostart, self.model_dir = server_url, autostart, model_dir
        self.settings = Settings()
        self.docs = DocumentStore()
        self.parsed: dict[str, ParsedDocument] = {}
        self.history = EditHistory()
        self.viewed = RecentlyViewed()
        self.fim = FimScheduler()
        self.telemetry = Telemetry(None, enabled=False, warn=warn)
        self.excluded = Exclusions()  # open documents that excludeFiles keeps out
        self.model: ModelClient | None = None  # the model server's HTTP client, once initialized
        self.next_inflight: dict[str, asyncio.Task] = {}
        self.next_marker: dict[str, Marker] = {}  # per document: the edit history seen by its last request
        self.pending_warnings: list[str] = []  # shown once the client is initialized
        self.root = ""
        self.roots: list[str] = []  # workspace folders (lsp/indexing.py)
        self.index: WorkspaceIndex | None = None  # the workspace symbol index, once initialized
        self.index_task: asyncio.Task | None = None
        self.suggestions: OrderedDict[str, Any] = OrderedDict()  # id -> nextedit/reply.py's Offered
        self.log_file: str | None = None  # the LSP's own debug log (--log-file), for editserver/info

    # ---- settings --------------------------------------------------------------------------------
    def apply_settings(self, raw: Any, initial: bool = False) -> tuple[list[str], bool]:
        """(warnings, whether the model server's URL or autostart changed) for client options."""
        defaults = Settings()  # CLI flags replace the built-in defaults; client options override both
        if self.cli_server_url:
            defaults = dataclasses.replace(defaults, server_url=self.cli_server_url)
        if self.cli_autostart is not None:
            defaults = dataclasses.replace(defaults, autostart=self.cli_autostart)
        settings, warnings = parse_settings(raw, defaults if initial else self.settings, defaults)
        old = self.settings
        self.settings = settings
        self.history.max_events = settings.history_events
        t = settings.telemetry
        self.telemetry.configure(
            t.path, t.enabled, t.keep_prompts, t.retention_days, int(t.max_megabytes * (1 << 20))
        )
        if settings.excluded_patterns != old.excluded_patterns:
            for uri in list(self.docs.docs):
                self.check_excluded(uri)
        return warnings, settings.server_url != old.server_url or settings.autostart != old.autostart

    # ---- documents -------------------------------------------------------------------------------
    def open(self, uri: str, text: str, version: int, language_id: str) -> bool:
        """Open a document; True when excludeFiles keeps it out (the status then says so)."""
        doc = self.docs.open(uri, text, version, language_id)
        grammar = grammar_name(language_id, uri)
        if grammar is not None:
            self.parsed[uri] = ParsedDocument(grammar, doc.text)
        if self.check_excluded(uri) is not None:
            return True
        self.viewed.view(uri, self.path_of(uri), doc.text, 0)
        return False

    def change(self, uri: str, version: int, changes: list[tuple[str, Span | None]]) -> bool:
        """Apply a didChange's changes (a range, or None for the whole text) in order: the text, its
        parse and the edit history follow each; in-flight work planned on the old text is cancelled.
        False when the document is not open."""
        doc = self.docs.get(uri)
        if doc is None:
            return False
        parsed = self.parsed.get(uri)
        for text, span in changes:
            before = doc.text
            edit = doc.apply(text, span)
            if parsed is not None:
                parsed.update(edit, doc.text, full=span is None)
            if uri not in self.excluded:
                self.history.record(uri, self.path_of(uri), before, doc.text, edit.start, edit.new_end)
        doc.version = version
        self.fim.cancel_inflight(uri)  # a newer keystroke makes in-flight completions stale
        self.cancel_next_edit(uri)  # so do next edits planned on the old text
        return True

    def focus(self, uri: Any) -> None:
        """Copilot's didFocus: the document is a recently viewed file (unless it is excluded)."""
        doc = self.docs.get(uri)
        if doc is not None and doc.uri not in self.excluded:
            self.viewed.view(doc.uri, self.path_of(doc.uri), doc.text, self.viewed.line_of(doc.uri))

    def close(self, uri: str) -> bool:
        """Forget a closed document; True when it was excluded (the status lists it no more)."""
        self.docs.close(uri)
        self.parsed.pop(uri, None)
        self.fim.forget(uri)
        return self.excluded.forget(uri)

    def check_excluded(self, uri: str) -> str | None:
        """Whether excludeFiles keeps the open document ``uri`` out; an excluded one is forgotten by
        the edit history and the recently viewed snippets (it may have been in them before)."""
        paths = (self.path_of(uri), uri_to_path(uri))
        pattern = self.excluded.check(uri, paths, self.settings.excluded_patterns)
        if pattern is not None:
            self.history.forget(uri)
            self.viewed.forget(uri)
        return pattern

    def path_of(self, uri: str) -> str:
        """The file as prompts name it: relative to the workspace root when inside it."""
        path = uri_to_path(uri)
        if self.root and path.startswith(self.root.rstrip("/") + "/"):
            return os.path.relpath(path, self.root)
        return path

    def others(self, uri: str) -> list[tuple[str, Any, ParsedDocument]]:
        """(path, document, parse) of every other open, parsed, not excluded document."""
        return [
            (self.path_of(u), self.docs.docs[u], p)
            for u, p in self.parsed.items()
            if u != uri and u in self.docs.docs and u not in self.excluded
        ]

    def definitions_near(self, uri: str, first_line: int, last_line: int) -> list[tuple[str, str]]:
        """(path, code) of the definitions, in the other open documents, of the names used in lines
        [first_line, last_line] of ``uri``: the FIM prompt's header and a next-edit prompt's snippets."""
        parsed = self.parsed.get(uri)
        if parsed is None:
            return []
        names = {
            n.text.decode("utf-8", "replace") for n in parsed.identifiers(first_line, last_line) if n.text
        }
        return definitions_for(names, self.others(uri))

    # ---- requests --------------------------------------------------------------------------------
    def model_ready(self) -> bool:
        """Whether the model server answers now; when it does not, recovery is nudged (never waits:
        it runs in the background)."""
        if self.model is not None and self.model.state != READY:
            self.model.nudge()
        return self.model is not None and self.model.state == READY

    def cancel_next_edit(self, uri: str) -> None:
        """A newer request or edit supersedes ``uri``'s in-flight next edit (and its HTTP calls)."""
        _cancel(self.next_inflight, uri)

    def fresh_edits(self, uri: str) -> list[EditEvent]:
        """The edits a next-edit request for ``uri`` has not seen yet (then marked as seen)."""
        fresh = self.history.since(self.next_marker.get(uri), uri)
        self.next_marker[uri] = self.history.marker()
        return fresh

    # ---- what the clients are told --------------------------------------------------------------
    def status(self, message: str | None = None) -> dict[str, Any] | None:
        """``editserver/status``: the model's state and latest latency, what was withheld, which open
        files are excluded; None until the model client exists (unless both features are off)."""
        if not (self.settings.enable_fim or self.settings.enable_next_edit):
            state, latency = DISABLED, None
        elif self.model is None:
            return None
        else:
            state, latency = self.model.state, self.model.last_latency_ms
        payload: dict[str, Any] = {"state": state}
        if message:
            payload["message"] = message
        if latency is not None:
            payload["latencyMs"] = round(latency, 1)
        if self.model is not None:
            # completions withheld below the server's threshold in the last minute, and that threshold
            payload["withheld"] = self.model.withheld()
            if self.model.fim_threshold is not None:
                payload["fimThreshold"] = self.model.fim_threshold
        payload["excluded"] = self.excluded.listing(self.path_of)
        return payload

    def info(self) -> dict[str, Any]:
        """``editserver/info``: live state for health checks (never a cached status)."""
        out: dict[str, Any] = {
            "state": DISABLED if not (self.settings.enable_fim or self.settings.enable_next_edit) else None
        }
        if self.model is not None:
            out = {**self.model.info(), **({"state": out["state"]} if out["state"] else {})}
        out["lspLog"] = self.log_file
        out["excluded"] = self.excluded.listing(self.path_of)
        out["excludeFiles"] = list(self.settings.excluded_patterns)
        out["thresholdHelp"] = "editserver serve --fim-threshold X (0 shows every completion)"
        return out

    def document_state(self, doc: Document) -> dict[str, Any]:
        """``editserver/documentState``: the server's view of a document, for tests and bug reports."""
        parsed = self.parsed.get(doc.uri)
        return {
            "text": doc.text,
            "version": doc.version,
            "encoding": doc.encoding,
            "grammar": parsed.grammar if parsed else None,
            "fullParses": parsed.full_parses if parsed else 0,
            "incrementalParses": parsed.incremental_parses if parsed else 0,
            "history": self.history.render(self.settings.history_events),
            "historyEvents": len(self.history.recent(self.settings.history_events)),
            "recentlyViewed": [
                sn.path for sn in self.viewed.snippets(doc.uri, self.settings.recent_snippets)
            ],
        }
