"""The editserver language server (pygls 2.x): every LSP handler, registered in one place.

Floor 8 (see lsp/__init__.py), the top of the house but for the command line: imports the state,
the logic modules and the next-edit stages; none of them imports it.

Design decisions:
- ``create_server()`` builds a fresh ``EditLanguageServer`` and registers every handler of the
  ``FEATURES`` table (filled by ``@handles``) and the one command, so what the server answers is
  listed in one place. The server holds its state as ``ls.state`` (lsp/state.py) and adds only what
  speaks to the editor: messages, the status notification, the model client's lifecycle.
- A handler is a thin function with the server first, as pygls documents: the parameter is named
  ``ls``, which is how pygls 2 knows to pass it (``feature_manager.wrap_with_server`` checks the
  first parameter's name, else its annotation). Each goes params -> a helper over the state or
  plain values -> LSP types (or plain JSON for our own methods). All run on pygls' asyncio loop.
- Position encoding: pygls picks the client's first supported encoding; we move UTF-8 to the front
  whenever the client offers it, because tree-sitter and the HTTP payloads are UTF-8 anyway.
- Custom requests and notifications (``editserver/*``, ``textDocument/copilotInlineEdit``) keep their
  params as plain JSON dicts (a custom converter hook), validated here with clear LSP errors
  (InvalidParams), against the JSON, not against generated types.
- Status: ``editserver/status`` on every model client state change and after every model call
  (with the call's latency); state ``disabled`` when both features are off. ``editserver/status``
  and ``editserver/info`` list the open excluded files with the pattern that matched, so the
  clients can say why no suggestion comes.
- Superseded work: a newer request for the same document, or a change to it, cancels the older
  request's task (and its HTTP calls), which answers empty (FIM) or ``skipped: "superseded by a
  newer edit"`` (next edits); a client's ``$/cancelRequest`` is passed through to pygls, which
  answers RequestCancelled. Written once, in ``_unless_superseded``.
- Next edits run the stages of lsp/nextedit/ in order (``_next_edits``): plan, ask with a vetting
  callback, reply; the handler makes the request's one id and owns its cancellation.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

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

from editserver.lsp import fim, indexing
from editserver.lsp.documents import UTF8, UTF16, UTF32, Document
from editserver.lsp.model_client import ModelClient, short
from editserver.lsp.nextedit import plan as plan_stage
from editserver.lsp.nextedit.ask import ask
from editserver.lsp.nextedit.reply import (
    APPLY_EDITS,
    Partials,
    Suggestion,
    application,
    applied,
    copilot_json,
    next_edit_json,
    remember,
    reply,
)
from editserver.lsp.nextedit.vet import Vetter
from editserver.lsp.settings import settings_from_change
from editserver.lsp.state import ServerState

log = logging.getLogger(__name__)

INLINE_ACCEPTED = "editserver.inlineAccepted"
STATUS = "editserver/status"
DOCUMENT_STATE = "editserver/documentState"
INFO = "editserver/info"
NEXT_EDIT = "editserver/nextEdit"
COPILOT_INLINE_EDIT = "textDocument/copilotInlineEdit"
T = TypeVar("T")


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


class EditLanguageServer(LanguageServer):
    def __init__(
        self, server_url: str | None = None, autostart: bool | None = None, model_dir: str | None = None
    ):
        super().__init__("editserver", "0.1.0", protocol_cls=_Protocol, converter_factory=_converter)
        self.state = ServerState(server_url, autostart, model_dir, warn=self._warn)

    def apply_settings(self, raw: Any, initial: bool = False) -> list[str]:
        """Client options applied to the state; a moved model server gets a new client."""
        warnings, moved = self.state.apply_settings(raw, initial)
        if not initial and self.state.model is not None:
            if moved:
                asyncio.ensure_future(self._restart_model())
            self.send_status()
        return warnings

    def _warn(self, message: str) -> None:
        """A warning from telemetry: shown at once, or after ``initialized`` if it comes earlier."""
        if self.state.model is None:
            self.state.pending_warnings.append(message)
        else:
            self.show(2, message)

    async def _restart_model(self) -> None:
        if self.state.model is not None:
            await self.state.model.close()
        self.state.model = self.make_model()
        await self.state.model.start()

    def make_model(self) -> ModelClient:
        return ModelClient(
            self.state.settings.server_url,
            self.state.settings.autostart,
            self.state.model_dir,
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
        payload = self.state.status(message)
        if payload is not None:
            self.protocol.notify(STATUS, payload)


FEATURES: list[tuple[str, Any, Callable]] = []  # (method, options, handler), registered by create_server


def handles(method: str, options: Any = None) -> Callable[[Callable], Callable]:
    """Enter a handler in ``FEATURES`` (pygls' ``@server.feature``, for the server create_server makes)."""

    def enter(handler: Callable) -> Callable:
        FEATURES.append((method, options, handler))
        return handler

    return enter


def create_server(
    server_url: str | None = None, autostart: bool | None = None, model_dir: str | None = None
) -> EditLanguageServer:
    """A fresh server; CLI flags (when given) override the defaults that client options start from."""
    server = EditLanguageServer(server_url, autostart, model_dir)
    for method, options, handler in FEATURES:
        server.feature(method, options)(handler)
    server.command(INLINE_ACCEPTED)(inline_accepted)
    return server


# ---- helpers over params -------------------------------------------------------------------------
def _document(st: ServerState, uri: Any, where: str) -> Document:
    """The open document ``uri``, or a clear InvalidParams error."""
    if not isinstance(uri, str):
        raise JsonRpcInvalidParams(f"{where}: textDocument.uri must be a string")
    doc = st.docs.get(uri)
    if doc is None:
        raise JsonRpcInvalidParams(f"{where}: document {uri} is not open (send textDocument/didOpen first)")
    return doc


def _position(p: Any, where: str) -> tuple[int, int]:
    if not isinstance(p, dict) or not all(
        isinstance(p.get(k), int) and p[k] >= 0 for k in ("line", "character")
    ):
        raise JsonRpcInvalidParams(
            f"{where}: position must be {{line, character}} with non-negative integers"
        )
    return p["line"], p["character"]


def _next_edit_request(st: ServerState, params: Any, where: str) -> tuple[Document, int, int, bool]:
    """(document, line, character, automatic) of a next-edit request, or InvalidParams."""
    if not isinstance(params, dict) or not isinstance(params.get("textDocument"), dict):
        raise JsonRpcInvalidParams(f"{where}: params must be {{textDocument: {{uri}}, position}}")
    doc = _document(st, params["textDocument"].get("uri"), where)
    line, char = _position(params.get("position"), where)
    trigger = params.get("trigger", "manual")
    if trigger not in ("auto", "manual"):
        raise JsonRpcInvalidParams(f'{where}: trigger must be "auto" or "manual"')
    return doc, line, char, trigger == "auto"


def _id(params: Any, method: str) -> str | None:
    if isinstance(params, dict) and isinstance(params.get("id"), str):
        return params["id"]
    log.warning("%s without a string id: %r", method, params)
    return None


async def _unless_superseded(task: asyncio.Future[T]) -> tuple[bool, T | None]:
    """(True, its result) once ``task`` is done; (False, None) when it was cancelled because a newer
    request or edit superseded it. A client's ``$/cancelRequest`` (this handler's own task cancelled)
    goes on to pygls, which answers RequestCancelled."""
    try:
        return True, await task
    except asyncio.CancelledError:
        task.cancel()
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
        return False, None


# ---- lifecycle and settings ----------------------------------------------------------------------
@handles(types.INITIALIZE)
def initialize(ls: EditLanguageServer, params: types.InitializeParams) -> None:
    st = ls.state
    st.pending_warnings += ls.apply_settings(params.initialization_options, initial=True)
    enc = ls.workspace.position_encoding
    st.docs.encoding = {"utf-8": UTF8, "utf-32": UTF32}.get(str(getattr(enc, "value", enc)), UTF16)
    st.root = indexing.workspace_root(params)
    st.roots = indexing.workspace_roots(params)


@handles(types.INITIALIZED)
async def initialized(ls: EditLanguageServer, params: types.InitializedParams) -> None:
    for w in ls.state.pending_warnings:
        ls.show(2, w)
    ls.state.model = ls.make_model()
    ls.send_status()
    if indexing.start_index(ls.state):
        asyncio.ensure_future(indexing.watch(ls.client_capabilities, ls.client_register_capability_async))
    await ls.state.model.start()


@handles(types.SHUTDOWN)
async def shutdown(ls: EditLanguageServer, *args: Any) -> None:
    if ls.state.model is not None:
        await ls.state.model.close()
    ls.state.telemetry.close()


@handles(types.EXIT)
def exit_(ls: EditLanguageServer, *args: Any) -> None:
    if ls.state.model is not None:
        ls.state.model.stop_child()


@handles(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
async def did_change_configuration(
    ls: EditLanguageServer, params: types.DidChangeConfigurationParams
) -> None:
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


# ---- documents and the workspace -----------------------------------------------------------------
@handles(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: EditLanguageServer, params: types.DidOpenTextDocumentParams) -> None:
    td = params.text_document
    if ls.state.open(td.uri, td.text, td.version, td.language_id):
        ls.send_status()  # the clients say why this file gets no suggestions


@handles(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: EditLanguageServer, params: types.DidChangeTextDocumentParams) -> None:
    changes = []
    for change in params.content_changes:
        if isinstance(change, types.TextDocumentContentChangePartial):
            r = change.range
            changes.append((change.text, (r.start.line, r.start.character, r.end.line, r.end.character)))
        else:
            changes.append((change.text, None))
    td = params.text_document
    if not ls.state.change(td.uri, td.version, changes):
        log.warning("didChange for unopened %s", td.uri)


@handles(types.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: EditLanguageServer, params: types.DidSaveTextDocumentParams) -> None:
    indexing.files_changed(ls.state, [params.text_document.uri])


@handles("textDocument/didFocus")
def did_focus(ls: EditLanguageServer, params: Any) -> None:
    """Copilot's focus notification (``{textDocument: {uri}}``): a recently viewed file."""
    td = params.get("textDocument") if isinstance(params, dict) else None
    if isinstance(td, dict):
        ls.state.focus(td.get("uri"))


@handles(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: EditLanguageServer, params: types.DidCloseTextDocumentParams) -> None:
    if ls.state.close(params.text_document.uri):
        ls.send_status()


@handles(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
def did_change_watched_files(ls: EditLanguageServer, params: types.DidChangeWatchedFilesParams) -> None:
    indexing.files_changed(ls.state, [ch.uri for ch in params.changes])


@handles(indexing.INDEX_STATE)
async def index_state(ls: EditLanguageServer, params: Any) -> dict:
    """The index's state and build figures; ``{wait: true}`` answers once the build is done."""
    return await indexing.index_state(ls.state, isinstance(params, dict) and bool(params.get("wait")))


# ---- inline completion ---------------------------------------------------------------------------
@handles(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
async def inline_completion(
    ls: EditLanguageServer, params: types.InlineCompletionParams
) -> types.InlineCompletionList:
    st, pos = ls.state, params.position
    doc = _document(st, params.text_document.uri, "textDocument/inlineCompletion")
    offset = doc.offset_at(pos.line, pos.character)
    prefix, suffix = doc.text[:offset], doc.text[offset:]
    if not st.settings.enable_fim or not st.settings.handles(doc.language_id) or doc.uri in st.excluded:
        return types.InlineCompletionList(items=[])
    st.viewed.view(doc.uri, st.path_of(doc.uri), doc.text, pos.line)
    answer = st.fim.from_cache(doc.uri, prefix, suffix)
    if answer is None and st.model_ready():
        task = asyncio.ensure_future(
            fim.answer(st, doc, offset, prefix, suffix, st.fim.begin(doc.uri), ls.send_status)
        )
        st.fim.inflight[doc.uri] = task
        _, answer = await _unless_superseded(task)  # superseded: by a newer keystroke or request
    if answer is None:
        return types.InlineCompletionList(items=[])
    accept = types.Command(title="Accept", command=INLINE_ACCEPTED, arguments=[{"id": answer.id}])
    item = types.InlineCompletionItem(
        insert_text=answer.text, range=types.Range(start=pos, end=pos), command=accept
    )
    return types.InlineCompletionList(items=[item])


# ---- next edits ----------------------------------------------------------------------------------
@handles(NEXT_EDIT)
async def next_edit(ls: EditLanguageServer, params: Any) -> dict:
    stream = isinstance(params, dict) and params.get("partialResults") is True
    return next_edit_json(await _next_edits(ls, params, NEXT_EDIT, stream))


@handles(COPILOT_INLINE_EDIT)
async def copilot_inline_edit(ls: EditLanguageServer, params: Any) -> dict:
    return copilot_json(await _next_edits(ls, params, COPILOT_INLINE_EDIT), INLINE_ACCEPTED)


@handles(APPLY_EDITS)
async def apply_edits(ls: EditLanguageServer, params: Any) -> dict:
    """``editserver/applyEdits {id, uri}``: a kept suggestion's edits to one file, through
    ``workspace/applyEdit``."""
    app = application(ls.state, params)
    if isinstance(app, dict):
        return app  # why nothing is applied
    return applied(ls.state, app, await ls.workspace_apply_edit_async(app.params))


async def _next_edits(ls: EditLanguageServer, params: Any, where: str, stream: bool = False) -> Suggestion:
    """Validate, make the request's one id, supersede the document's older request, run the stages,
    keep the suggestion for applyEdits. With ``stream`` each kept region goes out as a partial."""
    st = ls.state
    doc, line, char, auto = _next_edit_request(st, params, where)
    sid = uuid.uuid4().hex  # the request's one id: telemetry, partials, the reply and applyEdits
    if doc.uri in st.excluded:
        why = f"excluded: matches excludeFiles pattern {st.excluded[doc.uri]!r}; nothing was sent"
        return Suggestion(sid, doc, doc.version, skipped=why)
    st.cancel_next_edit(doc.uri)  # a newer request for the same document supersedes the older one
    on_kept = Partials(ls.protocol.notify, sid, doc) if stream else None
    task = asyncio.ensure_future(_run_stages(ls, sid, doc, line, char, auto, on_kept))
    st.next_inflight[doc.uri] = task
    done, sug = await _unless_superseded(task)
    if not done:
        if on_kept is not None and on_kept.sent:  # shown already: filed, so its events join a row
            reply(st.telemetry, sid, doc, on_kept.version, on_kept.sent, on_kept.sent)
        return Suggestion(sid, doc, doc.version, skipped="superseded by a newer edit")
    remember(st, sug)
    return sug


async def _run_stages(
    ls: EditLanguageServer,
    sid: str,
    doc: Document,
    line: int,
    char: int,
    auto: bool,
    on_kept: Callable | None,
) -> Suggestion:
    """plan -> ask, each answer vetted as it arrives -> reply (lsp/nextedit/). ``auto`` requests ask
    the model only when the edits since the last request could propagate (nextedit/plan.py)."""
    st = ls.state
    ready = st.model_ready()
    if not (ready and st.settings.enable_next_edit and st.settings.handles(doc.language_id)):
        return Suggestion(sid, doc, doc.version, skipped="not ready")
    version = doc.version
    st.viewed.view(doc.uri, st.path_of(doc.uri), doc.text, line)
    p = plan_stage.plan(st, doc, doc.offset_at(line, char), auto)
    if isinstance(p, str):
        return Suggestion(sid, doc, version, skipped=p)
    vetter = Vetter(on_kept)
    await ask(st, p, vetter.take, head_start=on_kept is not None)
    ls.send_status()
    return reply(st.telemetry, sid, doc, version, *vetter.ranked())


# ---- telemetry: what the user did with a suggestion -----------------------------------------------
@handles("editserver/didShow")
def did_show(ls: EditLanguageServer, params: Any) -> None:
    if (sid := _id(params, "didShow")) is not None:
        ls.state.telemetry.event(sid, "show")


@handles("editserver/didAccept")
def did_accept(ls: EditLanguageServer, params: Any) -> None:
    if (sid := _id(params, "didAccept")) is None:
        return
    idx, partial, text = params.get("editIndex"), params.get("partial"), params.get("acceptedText")
    ls.state.telemetry.event(
        sid,
        "accept",
        idx if isinstance(idx, int) else None,
        partial if partial in ("word", "line") else None,
        text if isinstance(text, str) else None,
    )


@handles("editserver/didReject")
def did_reject(ls: EditLanguageServer, params: Any) -> None:
    if (sid := _id(params, "didReject")) is not None:
        ls.state.telemetry.event(sid, "reject")


def inline_accepted(ls: EditLanguageServer, *args: Any) -> None:
    """The Accept command of inline items and Copilot's edits (``{id, editIndex?}``)."""
    arg = args[0] if args else None
    if isinstance(arg, list) and arg:
        arg = arg[0]
    if isinstance(arg, dict) and isinstance(arg.get("id"), str):
        idx = arg.get("editIndex")
        ls.state.telemetry.event(arg["id"], "accept", idx if isinstance(idx, int) else None)


# ---- diagnostics ---------------------------------------------------------------------------------
@handles(INFO)
def info(ls: EditLanguageServer, params: Any) -> dict:
    """Live state: server URL and whether it is our own, the serve log, restarts, withheld count."""
    return ls.state.info()


@handles(DOCUMENT_STATE)
def document_state(ls: EditLanguageServer, params: Any) -> dict:
    """The server's view of a document (text, version, parse counts): for tests and bug reports."""
    doc = _document(ls.state, params.get("uri") if isinstance(params, dict) else None, DOCUMENT_STATE)
    return ls.state.document_state(doc)
