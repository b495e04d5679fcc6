"""The editserver language server: documents in, FIM and next-edit suggestions out (pygls 2.x).

Design decisions:
- ``create_server()`` builds a fresh ``EditLanguageServer``; handlers are thin and delegate to the
  modules that own each concern (documents, history, context, completion, nextedit, edit_requests,
  telemetry, workspace, client, settings). All handlers run on pygls' asyncio loop, so state needs
  no locks.
- Position encoding: pygls picks the client's first supported encoding; we move UTF-8 to the front
  whenever the client offers it, because tree-sitter and the HTTP payloads are UTF-8 anyway.
- Custom requests and notifications (``editserver/*``, ``textDocument/copilotInlineEdit``) keep their
  params as plain JSON dicts (a custom converter hook), validated by their handlers with clear LSP
  errors.
- Status: ``editserver/status`` on every client state change and after every model call (with the
  call's latency); state ``disabled`` when both features are off.
- Next-edit requests (``editserver/nextEdit``, ``textDocument/copilotInlineEdit``, their streamed
  partials and replies) live in lsp/edit_requests.py; a didChange here cancels the document's
  in-flight one (and its HTTP calls).
- Excluded files (``excludeFiles``, lsp/privacy.py) are decided here, where documents enter: kept in
  sync, but never asked about, never a snippet, never in the edit history or a definition search.
  ``editserver/status`` and ``editserver/info`` list the open ones with the pattern that matched, so
  the clients can say why no suggestion comes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections import OrderedDict
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.protocol import (
    JsonRPCNotification,
    JsonRPCRequestMessage,
    LanguageServerProtocol,
    default_converter,
)
from pygls.protocol.language_server import lsp_method

from editserver.lsp import fim
from editserver.lsp.documents import UTF8, UTF16, UTF32, DocumentStore, uri_to_path
from editserver.lsp.edit_requests import register_next_edit
from editserver.lsp.history import EditHistory, RecentlyViewed
from editserver.lsp.indexing import Offered, register_workspace, start_index, workspace_root, workspace_roots
from editserver.lsp.model_client import DISABLED, READY, ModelClient, short
from editserver.lsp.privacy import Exclusions
from editserver.lsp.settings import Settings, parse_settings, settings_from_change
from editserver.lsp.telemetry import Telemetry, register_telemetry
from editserver.lsp.treesitter import ParsedDocument, grammar_name

log = logging.getLogger(__name__)

INLINE_ACCEPTED = "editserver.inlineAccepted"
STATUS = "editserver/status"
DOCUMENT_STATE = "editserver/documentState"
INFO = "editserver/info"


class _Protocol(LanguageServerProtocol):
    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams):
        general = params.capabilities.general
        if general is not None and general.position_encodings and UTF8 in general.position_encodings:
            general.position_encodings = [UTF8, *[e for e in general.position_encodings if e != UTF8]]
        return (yield from super().lsp_initialize(params))


def _converter():
    """pygls' converter, but unknown methods keep their params as dicts (not namedtuples)."""
    conv = default_converter()
    conv.register_structure_hook(JsonRPCRequestMessage, lambda obj, cls: cls(**obj))
    conv.register_structure_hook(JsonRPCNotification, lambda obj, cls: cls(**obj))
    return conv


def _invalid(message: str) -> JsonRpcInvalidParams:
    return JsonRpcInvalidParams(message)


class EditLanguageServer(LanguageServer):
    def __init__(
        self, server_url: str | None = None, autostart: bool | None = None, model_dir: str | None = None
    ):
        super().__init__("editserver", "0.1.0", protocol_cls=_Protocol, converter_factory=_converter)
        self.cli_server_url, self.cli_autostart, self.model_dir = server_url, autostart, model_dir
        self.settings = Settings()
        self.docs = DocumentStore()
        self.parsed: dict[str, ParsedDocument] = {}
        self.history = EditHistory()
        self.viewed = RecentlyViewed()
        self.fim = fim.FimScheduler()
        self.telemetry = Telemetry(None, enabled=False, warn=self._warn)
        self.excluded = Exclusions()  # open documents that excludeFiles keeps out
        self.model: ModelClient | None = None
        self.next_inflight: dict[str, asyncio.Task] = {}
        self.next_marker: dict[str, tuple] = {}  # per document: the edit history seen by its last request
        self.pending_warnings: list[str] = []
        self.root = ""
        self.roots: list[str] = []  # workspace folders (lsp/indexing.py)
        self.index: Any = None  # the workspace symbol index, once initialized (lsp/index.py)
        self.index_task: asyncio.Task | None = None
        self.suggestions: OrderedDict[str, Offered] = OrderedDict()  # for editserver/applyEdits
        self.log_file: str | None = None  # the LSP's own debug log (--log-file), for editserver/info

    # ---- settings and status -------------------------------------------------------------------
    def apply_settings(self, raw: Any, initial: bool = False) -> list[str]:
        defaults = Settings()  # CLI flags replace the built-in defaults; client options override both
        if self.cli_server_url:
            defaults = _replace(defaults, server_url=self.cli_server_url)
        if self.cli_autostart is not None:
            defaults = _replace(defaults, autostart=self.cli_autostart)
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
        if not initial and self.model is not None:
            if settings.server_url != old.server_url or settings.autostart != old.autostart:
                asyncio.ensure_future(self._restart_model())
            self.send_status()
        return warnings

    def _warn(self, message: str) -> None:
        """A warning from telemetry: shown at once, or after ``initialized`` if it comes earlier."""
        if self.model is None:
            self.pending_warnings.append(message)
        else:
            self.show(2, message)

    def check_excluded(self, uri: str) -> str | None:
        """Whether excludeFiles keeps the open document ``uri`` out; an excluded one is forgotten by
        the edit history and the recently viewed snippets (it may have been in them before)."""
        paths = (self.path_of(uri), uri_to_path(uri))
        pattern = self.excluded.check(uri, paths, self.settings.excluded_patterns)
        if pattern is not None:
            self.history.forget(uri)
            self.viewed.forget(uri)
        return pattern

    async def _restart_model(self) -> None:
        if self.model is not None:
            await self.model.close()
        self.model = self._make_model()
        await self.model.start()

    def _make_model(self) -> ModelClient:
        return ModelClient(
            self.settings.server_url,
            self.settings.autostart,
            self.model_dir,
            on_state=lambda s, m: self.send_status(m),
            on_message=self.show,
            serve_log=os.environ.get("EDITSERVER_LSP_SERVE_LOG") or None,
        )

    def show(self, kind: int, message: str) -> None:
        """One short line (editors show longer ones with a "press ENTER" prompt)."""
        self.window_show_message(
            types.ShowMessageParams(type=types.MessageType(kind), message=short(message))
        )

    def send_status(self, message: str | None = None) -> None:
        if not (self.settings.enable_fim or self.settings.enable_next_edit):
            state, latency = DISABLED, None
        elif self.model is None:
            return
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
        self.protocol.notify(STATUS, payload)

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

    def path_of(self, uri: str) -> str:
        path = uri_to_path(uri)
        if self.root and path.startswith(self.root.rstrip("/") + "/"):
            return os.path.relpath(path, self.root)
        return path

    def others(self, uri: str) -> list[tuple[str, Any, ParsedDocument]]:
        return [
            (self.path_of(u), self.docs.docs[u], p)
            for u, p in self.parsed.items()
            if u != uri and u in self.docs.docs and u not in self.excluded
        ]

    def doc_for(self, uri: Any, where: str):
        if not isinstance(uri, str):
            raise _invalid(f"{where}: textDocument.uri must be a string")
        doc = self.docs.get(uri)
        if doc is None:
            raise _invalid(f"{where}: document {uri} is not open (send textDocument/didOpen first)")
        return doc

    def active(self, feature: bool, doc) -> bool:
        return (
            feature
            and self.settings.handles(doc.language_id)
            and self.model is not None
            and self.model.state == READY
        )


def _replace(s: Settings, **kw) -> Settings:
    return dataclasses.replace(s, **kw)


def create_server(
    server_url: str | None = None, autostart: bool | None = None, model_dir: str | None = None
) -> EditLanguageServer:
    """A fresh server; CLI flags (when given) override the defaults that client options start from."""
    server = EditLanguageServer(server_url, autostart, model_dir)
    _register_lifecycle(server)
    _register_documents(server)
    _register_completion(server)
    register_next_edit(server, INLINE_ACCEPTED)
    register_telemetry(server, INLINE_ACCEPTED)
    register_workspace(server)
    _register_diagnostics(server)
    return server


# ---- lifecycle and settings ---------------------------------------------------------------------
def _register_lifecycle(ls: EditLanguageServer) -> None:
    @ls.feature(types.INITIALIZE)
    def initialize(params: types.InitializeParams) -> None:
        ls.pending_warnings += ls.apply_settings(params.initialization_options, initial=True)
        enc = ls.workspace.position_encoding
        ls.docs.encoding = {"utf-8": UTF8, "utf-32": UTF32}.get(str(getattr(enc, "value", enc)), UTF16)
        ls.root = workspace_root(params)
        ls.roots = workspace_roots(params)

    @ls.feature(types.INITIALIZED)
    async def initialized(params: types.InitializedParams) -> None:
        for w in ls.pending_warnings:
            ls.show(2, w)
        ls.model = ls._make_model()
        ls.send_status()
        start_index(ls)
        await ls.model.start()

    @ls.feature(types.SHUTDOWN)
    async def shutdown(*args) -> None:
        if ls.model is not None:
            await ls.model.close()
        ls.telemetry.close()

    @ls.feature(types.EXIT)
    def exit_(*args) -> None:
        if ls.model is not None:
            ls.model.stop_child()

    @ls.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(params: types.DidChangeConfigurationParams) -> None:
        raw = settings_from_change(params.settings)
        ws = ls.client_capabilities.workspace
        if not isinstance(raw, dict) and ws is not None and ws.configuration:
            # pull model (VS Code without `synchronize`): the notification only says "changed"
            try:
                (raw,) = await ls.workspace_configuration_async(
                    types.ConfigurationParams(items=[types.ConfigurationItem(section="editserver")])
                )
            except Exception as e:  # a client that advertises but fails: keep the current settings
                log.warning("workspace/configuration failed: %s", e)
                return
        for w in ls.apply_settings(raw):
            ls.show(2, w)


# ---- documents ----------------------------------------------------------------------------------
def _register_documents(ls: EditLanguageServer) -> None:
    @ls.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(params: types.DidOpenTextDocumentParams) -> None:
        td = params.text_document
        doc = ls.docs.open(td.uri, td.text, td.version, td.language_id)
        grammar = grammar_name(td.language_id, td.uri)
        if grammar is not None:
            ls.parsed[td.uri] = ParsedDocument(grammar, doc.text)
        if ls.check_excluded(td.uri) is not None:
            ls.send_status()  # the clients say why this file gets no suggestions
            return
        ls.viewed.view(td.uri, ls.path_of(td.uri), doc.text, 0)

    @ls.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(params: types.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        doc = ls.docs.get(uri)
        if doc is None:
            log.warning("didChange for unopened %s", uri)
            return
        parsed = ls.parsed.get(uri)
        for change in params.content_changes:
            before = doc.text
            if isinstance(change, types.TextDocumentContentChangePartial):
                r = change.range
                edit = doc.apply(change.text, (r.start.line, r.start.character, r.end.line, r.end.character))
                full = False
            else:
                edit = doc.apply(change.text, None)
                full = True
            if parsed is not None:
                parsed.update(edit, doc.text, full=full)
            if uri not in ls.excluded:
                ls.history.record(uri, ls.path_of(uri), before, doc.text, edit.start, edit.new_end)
        doc.version = params.text_document.version
        ls.fim.cancel_inflight(uri)  # a newer keystroke makes in-flight completions stale
        older = ls.next_inflight.pop(uri, None)
        if older is not None and not older.done():
            older.cancel()  # so do next edits planned on the old text

    @ls.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(params: types.DidSaveTextDocumentParams) -> None:
        if ls.index is not None:
            ls.index.update(uri_to_path(params.text_document.uri))

    @ls.feature("textDocument/didFocus")
    def did_focus(params: Any) -> None:
        """Copilot's focus notification (``{textDocument: {uri}}``): a recently viewed file."""
        td = params.get("textDocument") if isinstance(params, dict) else None
        doc = ls.docs.get(td.get("uri")) if isinstance(td, dict) else None
        if doc is not None and doc.uri not in ls.excluded:
            ls.viewed.view(doc.uri, ls.path_of(doc.uri), doc.text, ls.viewed.line_of(doc.uri))

    @ls.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        ls.docs.close(uri)
        ls.parsed.pop(uri, None)
        ls.fim.forget(uri)
        if ls.excluded.forget(uri):
            ls.send_status()


# ---- inline completion --------------------------------------------------------------------------
def _register_completion(ls: EditLanguageServer) -> None:
    @ls.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(params: types.InlineCompletionParams) -> types.InlineCompletionList:
        empty = types.InlineCompletionList(items=[])
        uri = params.text_document.uri
        doc = ls.doc_for(uri, "textDocument/inlineCompletion")
        offset = doc.offset_at(params.position.line, params.position.character)
        prefix, suffix = doc.text[:offset], doc.text[offset:]
        if not ls.settings.enable_fim or not ls.settings.handles(doc.language_id) or uri in ls.excluded:
            return empty
        ls.viewed.view(uri, ls.path_of(uri), doc.text, params.position.line)
        cached = ls.fim.from_cache(uri, prefix, suffix)
        if cached is None:
            if ls.model is None or ls.model.state != READY:
                if ls.model is not None:
                    ls.model.nudge()  # never waits: recovery runs in the background
                return empty
            ticket = ls.fim.begin(uri)
            task = asyncio.ensure_future(fim.answer(ls, doc, offset, prefix, suffix, ticket))
            ls.fim.inflight[uri] = task
            try:
                cached = await task
            except asyncio.CancelledError:
                task.cancel()
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # $/cancelRequest: pygls answers RequestCancelled
                return empty  # superseded by a newer keystroke or request
            if cached is None:
                return empty
        pos = params.position
        return types.InlineCompletionList(
            items=[
                types.InlineCompletionItem(
                    insert_text=cached.text,
                    range=types.Range(start=pos, end=pos),
                    command=types.Command(
                        title="Accept", command=INLINE_ACCEPTED, arguments=[{"id": cached.id}]
                    ),
                )
            ]
        )


# ---- diagnostics -------------------------------------------------------------------------------
def _register_diagnostics(ls: EditLanguageServer) -> None:
    @ls.feature(INFO)
    def info(params: Any) -> dict:
        """Live state: server URL and whether it is our own, the serve log, restarts, withheld count."""
        return ls.info()

    @ls.feature(DOCUMENT_STATE)
    def document_state(params: Any) -> dict:
        """The server's view of a document (text, version, parse counts): for tests and bug reports."""
        doc = ls.doc_for(params.get("uri") if isinstance(params, dict) else None, DOCUMENT_STATE)
        parsed = ls.parsed.get(doc.uri)
        return {
            "text": doc.text,
            "version": doc.version,
            "encoding": doc.encoding,
            "grammar": parsed.grammar if parsed else None,
            "fullParses": parsed.full_parses if parsed else 0,
            "incrementalParses": parsed.incremental_parses if parsed else 0,
            "history": ls.history.render(ls.settings.history_events),
            "historyEvents": len(ls.history.recent(ls.settings.history_events)),
            "recentlyViewed": [sn.path for sn in ls.viewed.snippets(doc.uri, ls.settings.recent_snippets)],
        }
