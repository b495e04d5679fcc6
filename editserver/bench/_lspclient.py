"""A real ``editserver lsp`` process driven over stdio, for the benchmarks that time it.

Design decisions:
- The benchmarks measure what a user waits for, so they start the LSP the way an editor does (a
  child process, pygls' ``LanguageClient`` over stdio) and never import the LSP's modules: the app's
  layers point the other way (editor -> lsp -> HTTP -> server).
- One ``start`` for every scenario: the options that differ (the workspace root, a log file, the
  child's environment, extra notification handlers) are arguments, and it returns once the LSP says
  it is ready (``editserver/status``) unless told not to wait (a server that is not running).
- Replies come back as pygls' attrs/named tuples; ``plain`` turns them into the JSON-shaped dicts
  and lists the scenarios check, and ``apply_edits`` applies LSP edits to a text. The scenarios'
  documents are ASCII, so UTF-16 code units are code points.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


async def start(
    server_url: str,
    *,
    options: dict | None = None,
    root: Path | None = None,
    log_file: str | None = None,
    env: dict | None = None,
    handlers: dict[str, Callable[[Any], None]] | None = None,
    ready_timeout: float | None = 120,
):
    """A started and initialized LSP client talking to ``server_url``; it waits for the LSP's ready
    status unless ``ready_timeout`` is None. ``options``: the initialization options (telemetry is
    always off); ``handlers``: notification method -> callback."""
    from lsprotocol import types
    from pygls.lsp.client import LanguageClient

    client = LanguageClient("editserver-bench", "0.1")
    ready = asyncio.Event()

    def status(params: Any) -> None:
        if getattr(params, "state", None) == "ready":
            ready.set()

    for method, fn in {
        "window/showMessage": lambda p: None,
        "editserver/status": status,
        **(handlers or {}),
    }.items():
        client.feature(method)(fn)
    cmd = [sys.executable, "-m", "editserver.cli", "lsp", "--server-url", server_url, "--no-autostart"]
    if log_file:
        cmd += ["--log-file", log_file]
    await client.start_io(*cmd, env=env)
    init = {**(options or {}), "telemetry": {"enabled": False}}
    await client.initialize_async(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(),
            initialization_options=init,
            root_uri=root.as_uri() if root is not None else None,
        )
    )
    client.initialized(types.InitializedParams())
    if ready_timeout is not None:
        await asyncio.wait_for(ready.wait(), ready_timeout)
    return client


async def stop(client) -> None:
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()


def open_document(client, uri: str, text: str) -> None:
    from lsprotocol import types

    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
        )
    )


def change(client, uri: str, version: int, start: tuple[int, int], end: tuple[int, int], text: str) -> None:
    """One incremental ``didChange``: ``text`` replaces (line, character) ``start`` to ``end``."""
    from lsprotocol import types

    rng = types.Range(types.Position(*start), types.Position(*end))
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(version=version, uri=uri),
            [types.TextDocumentContentChangePartial(range=rng, text=text)],
        )
    )


async def next_edit(client, uri: str, line: int, character: int):
    """``editserver/nextEdit`` at a position, automatic trigger, partial results streamed."""
    return await client.protocol.send_request_async(
        "editserver/nextEdit",
        {
            "textDocument": {"uri": uri},
            "position": {"line": line, "character": character},
            "trigger": "auto",
            "partialResults": True,
        },
    )


def since_ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


def plain(x: Any) -> Any:
    """A pygls reply as dicts and lists (named tuples and attrs classes alike)."""
    if hasattr(x, "_asdict"):
        return {k: plain(v) for k, v in x._asdict().items()}
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    return x


def apply_edits(text: str, edits: list[dict]) -> str:
    """LSP edits (``plain`` dicts, ranges in one document) applied to ``text``, last first."""
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def off(p: dict) -> int:
        return starts[min(p["line"], len(starts) - 1)] + p["character"]

    for e in sorted(edits, key=lambda e: off(e["range"]["start"]), reverse=True):
        text = text[: off(e["range"]["start"])] + e["newText"] + text[off(e["range"]["end"]) :]
    return text
