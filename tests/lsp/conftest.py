"""Fixtures for the language-server tests: a real ``editserver serve`` on loopback and a real
``editserver lsp`` process driven over stdio by pytest-lsp's client.

Design decisions:
- The HTTP server runs the tiny random-weight checkpoint for plumbing tests (milliseconds per call)
  with one torch thread, once per test run; the shipped checkpoint is used only by ``slow`` tests.
- Each test gets its own LSP process (cheap: ~1 s) so state never leaks between tests; telemetry goes
  to the test's tmp dir.
- Custom requests come back from pygls as namedtuples; ``plain`` turns them into dicts.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient
from pytest_lsp.client import make_test_lsp_client

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def plain(x: Any) -> Any:
    """pygls' namedtuple results as plain JSON-like values."""
    if hasattr(x, "_asdict"):
        return {k: plain(v) for k, v in x._asdict().items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    return x


def quiet_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def start_http(model: Path, port: int, log: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "editserver.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--model", str(model), "--threads", "1", "--log-level", "warning", *extra]
    return subprocess.Popen(cmd, cwd=REPO, env=quiet_env(), stdout=log.open("ab"), stderr=subprocess.STDOUT)


def wait_healthy(url: str, proc: subprocess.Popen | None = None, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"editserver serve exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url}/health did not answer within {timeout} s")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def serving(model: Path, log: Path, *extra: str, timeout: float = 180.0) -> Iterator[str]:
    """A real ``editserver serve`` of ``model`` on a free loopback port; yields its URL."""
    port = free_port()
    proc = start_http(model, port, log, *extra)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout=timeout)
        yield url
    finally:
        stop(proc)


@pytest.fixture(scope="session")
def tiny_server(tiny_checkpoint, tmp_path_factory) -> Any:
    """URL of a real ``editserver serve`` running the tiny checkpoint."""
    with serving(tiny_checkpoint, tmp_path_factory.mktemp("serve") / "serve.log") as url:
        yield url


@pytest.fixture(scope="session")
def shipped_server(shipped_checkpoint, tmp_path_factory):
    """URL of a real ``editserver serve`` running the shipped checkpoint (slow tests only)."""
    # --fim-threshold 0: the shipped tuned threshold hides every FIM answer, and these tests check
    # what the LSP does with the model's real text (the edit threshold stays the shipped one)
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with serving(shipped_checkpoint, log, "--fim-threshold", "0", timeout=600) as url:
        yield url


class LspConnection:
    """A started LSP with the notifications a test may look at."""

    def __init__(self, client: LanguageClient):
        self.client = client
        self.statuses: list[dict] = []
        self.partials: list[dict] = []  # editserver/nextEditPartial notifications, in arrival order
        self.versions: dict[str, int] = {}

    @property
    def messages(self) -> list[types.ShowMessageParams]:
        return self.client.messages

    async def request(self, method: str, params: dict) -> Any:
        return plain(await self.client.protocol.send_request_async(method, params))

    def open(self, uri: str, text: str, language: str) -> None:
        self.versions[uri] = 1
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                types.TextDocumentItem(uri=uri, language_id=language, version=1, text=text)
            )
        )

    def change(self, uri: str, changes: list[Any]) -> None:
        self.versions[uri] += 1
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
                content_changes=changes,
            )
        )

    def replace(self, uri: str, start: tuple[int, int], end: tuple[int, int], text: str) -> None:
        rng = types.Range(types.Position(*start), types.Position(*end))
        self.change(uri, [types.TextDocumentContentChangePartial(range=rng, text=text)])

    async def state(self, uri: str) -> dict:
        return await self.request("editserver/documentState", {"uri": uri})

    async def wait_status(self, state: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(s.get("state") == state for s in self.statuses):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no editserver/status {state!r}; got {self.statuses}")
            await asyncio.sleep(0.05)

    async def inline(self, uri: str, line: int, character: int) -> types.InlineCompletionList | None:
        return await self.client.text_document_inline_completion_async(
            types.InlineCompletionParams(
                context=types.InlineCompletionContext(
                    trigger_kind=types.InlineCompletionTriggerKind.Automatic
                ),
                text_document=types.TextDocumentIdentifier(uri=uri),
                position=types.Position(line, character),
            )
        )


@asynccontextmanager
async def lsp_session(
    server_url: str,
    options: dict | None = None,
    *,
    autostart: bool = False,
    encodings: list[str] | None = None,
    extra_args: list[str] | None = None,
    wait_ready: bool = True,
    env: dict[str, str] | None = None,
    launcher: list[str] | None = None,
    root_uri: str = "file:///work",
    on_apply_edit: Any = None,
) -> AsyncIterator[LspConnection]:
    """An LSP over stdio. Its root is not indexed (``crossFile`` off) unless the options turn the
    workspace index on, as the cross-file tests do with a workspace of their own. ``launcher``: a
    command the LSP's command line is appended to (e.g. a shell that sets limits)."""
    client = make_test_lsp_client()
    conn = LspConnection(client)
    options = {"crossFile": False, **(options or {})}

    if on_apply_edit is not None:
        client.feature("workspace/applyEdit")(on_apply_edit)

    @client.feature("editserver/status")
    def _status(params: Any) -> None:
        conn.statuses.append(plain(params))

    @client.feature("editserver/nextEditPartial")
    def _partial(params: Any) -> None:
        conn.partials.append(plain(params))

    cmd = [sys.executable, "-m", "editserver.cli", "lsp"]
    if server_url:  # empty: the LSP picks a free port for a server of its own
        cmd += ["--server-url", server_url]
    if not autostart:
        cmd.append("--no-autostart")
    cmd = [*(launcher or []), *cmd, *(extra_args or [])]
    await client.start_io(*cmd, env={**quiet_env(), **(env or {})}, cwd=str(REPO))
    caps = types.ClientCapabilities(
        general=types.GeneralClientCapabilities(position_encodings=encodings) if encodings else None,
        workspace=types.WorkspaceClientCapabilities(
            configuration=True,
            apply_edit=on_apply_edit is not None,
            workspace_edit=types.WorkspaceEditClientCapabilities(document_changes=True),
        ),
    )
    result = await client.initialize_session(
        types.InitializeParams(capabilities=caps, initialization_options=options, root_uri=root_uri)
    )
    conn.init_result = result
    try:
        if wait_ready:
            await conn.wait_status("ready")
        yield conn
    finally:
        await asyncio.wait_for(client.shutdown_session(), 30)
        await client.stop()


@pytest.fixture
def telemetry_path(tmp_path) -> Path:
    return tmp_path / "telemetry.sqlite3"


@pytest.fixture
def base_options(telemetry_path) -> dict:
    return {"debounceMs": 0, "telemetry": {"enabled": True, "path": str(telemetry_path)}}
