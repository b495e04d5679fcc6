"""HTTP client for the editserver API, with autostart and a failure/recovery state machine.

Floor 1 (see lsp/__init__.py): over lsp/budget.py; the state holds one as ``state.model``.

Design decisions:
- The LSP reaches the model only over HTTP (``/v1/fim/completions``, ``/v1/edit/completions``,
  ``/health``), exactly as any other client would, so the server can be shared or remote.
- Autostart: when nothing answers ``/health`` at the configured URL, the URL is on this machine and
  autostart is on, we start ``editserver serve`` as a child process (same interpreter), wait for
  ``/health`` in the background and stop it when the LSP exits. On Linux the child also gets
  ``PR_SET_PDEATHSIG`` so a killed LSP never leaves a model server behind.
- Own server, own port: with no server URL configured, the autostarted ``editserver serve`` listens
  on a free loopback port of its own, so the LSP never silently uses whatever another user or model
  left listening on a well-known port. A configured URL is used as given (and autostarted there when
  nothing answers and it is local).
- The autostarted server's output goes to ``serve_log`` (default
  ``$XDG_STATE_HOME/editserver/serve.log``), which clients open with their log command.
- Failure never blocks typing: while the server is down (or still starting) every call returns
  ``None`` at once without touching the network, a single background loop polls ``/health``, and
  the first success flips the state back to ``ready``. An autostarted server that exits is started
  again with exponential back-off (1 s doubling to 60 s), with no limit on attempts; the back-off resets
  once it has served for a minute. The user hears about an outage once (one ``window/showMessage``
  per outage, not per keystroke), in one line of at most 80 characters that says only what the
  LSP will really do; status-bar clients get ``editserver/status`` on every state change.
- Slow answers are cut by a per-call timeout (the FIM one is short); repeated timeouts produce one
  "slow" message, then stay quiet until a call succeeds again.
- The model's limits: each time the server turns ready, its ``/v1/models`` card is read before
  any request goes out (``context_length``, ``window``, ``max_output_length``), and its tokenizer
  afterwards, in the background; prompts are budgeted against them (lsp/budget.py).
- Withheld completions: each FIM answer's ``editserver`` field says its outcome and the threshold in
  force; answers withheld below the threshold in the last minute are counted for the status line.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx

from editserver.lsp.budget import DEFAULT_LIMITS, Limits, read_limits, read_tokenizer
from editserver.protocol.prompt import parse_edit_response

log = logging.getLogger(__name__)

STARTING, READY, UNREACHABLE, DISABLED = "starting", "ready", "unreachable", "disabled"
MODEL_NAME = "editserver"
HEALTH_POLL_S = 1.0  # recovery probe period while the server is down
AUTOSTART_WAIT_S = 300.0  # loading a checkpoint on a busy CPU can take a while
SLOW_TIMEOUTS = 2  # consecutive timeouts before the one "slow" message
BACKOFF_S = (1.0, 60.0)  # restart delay of a crashed autostarted server: first, most
HEALTHY_RESET_S = 60.0  # a server that served this long gets its back-off reset
WITHHELD_WINDOW_S = 60.0
MESSAGE_MAX = 80  # editors show longer messages with a "press ENTER" prompt


def short(message: str) -> str:
    """One line of at most MESSAGE_MAX characters."""
    line = " ".join(message.split())
    return line if len(line) <= MESSAGE_MAX else line[: MESSAGE_MAX - 1] + "…"


def default_serve_log() -> str:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return str(Path(base) / "editserver" / "serve.log")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class EditAnswer:
    region: str | None  # the rewritten region (code fence removed); None if the reply had no fence
    score: float
    above_threshold: bool
    raw: dict


def _find_score(body: dict) -> tuple[float, bool]:
    """The suggestion's score and threshold verdict, wherever the server put them."""
    choice = (body.get("choices") or [{}])[0]
    places = [choice, body]
    for d in (choice, body):
        for key in ("editserver", "metadata", "edit", "suggestion"):
            if isinstance(d.get(key), dict):
                places.append(d[key])
    score, above = None, None
    for d in places:
        if score is None and isinstance(d.get("score"), (int, float)):
            score = float(d["score"])
        if above is None and isinstance(d.get("above_threshold"), bool):
            above = d["above_threshold"]
    return (score if score is not None else 0.0), (above if above is not None else True)


def _pdeathsig() -> None:  # runs in the child between fork and exec
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


class ModelClient:
    def __init__(
        self,
        server_url: str,
        autostart: bool = True,
        model_dir: str | None = None,
        on_state: Callable[[str, str | None], None] | None = None,
        on_message: Callable[[int, str], None] | None = None,
        serve_log: str | None = None,
    ):
        # no URL: an autostarted server of our own on a free port (or the conventional one, without autostart)
        self.own_port = not server_url and autostart
        if not server_url:
            server_url = f"http://127.0.0.1:{free_port()}" if autostart else "http://127.0.0.1:8000"
        self.server_url = server_url.rstrip("/")
        self.autostart = autostart
        self.model_dir = model_dir
        self.on_state = on_state or (lambda s, m: None)
        self.on_message = on_message or (lambda t, m: short(m))
        self.serve_log = serve_log or default_serve_log()
        self.state = STARTING
        self.message: str | None = None
        self.child: subprocess.Popen | None = None
        self.restarts = 0  # autostarted servers started after the first one
        self._backoff = BACKOFF_S[0]
        self._next_spawn = 0.0
        self._ready_since: float | None = None
        self._withheld: deque[float] = deque()
        self.fim_threshold: float | None = None
        self._http = httpx.AsyncClient(timeout=10.0, trust_env=False)
        self._recovery: asyncio.Task | None = None
        self._watcher: asyncio.Task | None = None
        self.limits: Limits = DEFAULT_LIMITS  # the served model's (lsp/budget.py); read when ready
        self._learning: asyncio.Task | None = None
        self._outage_told = False
        self._timeouts = 0
        self._slow_told = False
        self.last_latency_ms: float | None = None

    # ---- state ---------------------------------------------------------------------------------
    def _set_state(self, state: str, message: str | None = None) -> None:
        if state == self.state:
            return
        self.state, self.message = state, message
        self._ready_since = time.monotonic() if state == READY else None
        self.on_state(state, message)

    def _tell(self, kind: int, message: str) -> None:
        self.on_message(kind, short(message))

    def withheld(self) -> int:
        """FIM answers withheld below the threshold in the last WITHHELD_WINDOW_S seconds."""
        cutoff = time.monotonic() - WITHHELD_WINDOW_S
        while self._withheld and self._withheld[0] < cutoff:
            self._withheld.popleft()
        return len(self._withheld)

    async def health(self, timeout: float = 1.0) -> bool:
        try:
            r = await self._http.get(self.server_url + "/health", timeout=timeout)
            return r.status_code == 200
        except (httpx.HTTPError, OSError):
            return False

    async def start(self) -> None:
        """Find (or start) the server; never raises. Runs the wait in the background."""
        if await self.health():
            await self._learn()
            self._set_state(READY)
            return
        if self.autostart and self._local():
            self._spawn()
            self._set_state(STARTING, f"starting editserver at {self.server_url}")
        else:
            self._down(f"editserver: no answer at {self.server_url}; retrying")
        self._ensure_recovery()

    async def _learn(self) -> None:
        """The served model's limits, read before the state turns ready (no prompt may go out over
        them); its tokenizer after, in the background (until then prompts are counted in bytes)."""
        self.limits = await read_limits(self._http, self.server_url, MODEL_NAME)
        if self._learning is not None:
            self._learning.cancel()
        self._learning = asyncio.ensure_future(self._learn_tokenizer(self.limits))

    async def _learn_tokenizer(self, limits: Limits) -> None:
        tok = await read_tokenizer(self._http, self.server_url)
        if tok is not None and self.limits is limits:  # not a server that came after
            self.limits = dataclasses.replace(limits, tokenizer=tok)

    def _local(self) -> bool:
        host = urlparse(self.server_url).hostname or ""
        return host in ("127.0.0.1", "localhost", "::1")

    def _spawn(self) -> None:
        u = urlparse(self.server_url)
        cmd = [sys.executable, "-m", "editserver.cli", "serve", "--host", u.hostname or "127.0.0.1"]
        cmd += ["--port", str(u.port or 80)]
        if self.model_dir:
            cmd += ["--model", self.model_dir]
        Path(self.serve_log).parent.mkdir(parents=True, exist_ok=True)
        out = open(self.serve_log, "ab")  # noqa: SIM115 - the child keeps it
        out.write(f"---- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n".encode())
        out.flush()
        log.info("autostart: %s (log %s)", " ".join(cmd), self.serve_log)
        self.child = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_pdeathsig if sys.platform.startswith("linux") else None,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        out.close()

    def _down(self, message: str) -> None:
        if not self._outage_told:
            self._outage_told = True
            self._tell(2, message)
        self._set_state(UNREACHABLE, message)

    def _schedule_respawn(self, why: str) -> None:
        """Start our server again after the back-off delay (doubling up to BACKOFF_S[1])."""
        self._next_spawn = time.monotonic() + self._backoff
        self._down(f"{why}; restarting in {self._backoff:.0f} s")
        self.message = f"{why}; restarting in {self._backoff:.0f} s (see :Editserver log)"
        self._backoff = min(self._backoff * 2, BACKOFF_S[1])

    def _ensure_recovery(self) -> None:
        if self._recovery is None or self._recovery.done():
            self._recovery = asyncio.ensure_future(self._recover())

    async def _recover(self) -> None:
        started = time.monotonic()
        while True:
            if await self.health():
                was_down = self._outage_told
                self._outage_told = False
                await self._learn()  # a server started again may serve another model
                self._set_state(READY, f"editserver is ready at {self.server_url}")
                if was_down:
                    self._tell(3, "editserver: model server is back")
                if self.child is not None:
                    self._watcher = asyncio.ensure_future(self._watch())
                return
            ours = self.autostart and self._local()
            if self.child is not None and self.child.poll() is not None:
                code = self.child.returncode
                self.child = None
                self._schedule_respawn(f"editserver: model server exited ({code})")
            elif self.child is None and ours and time.monotonic() >= self._next_spawn:
                # ours crashed (after its back-off) or the one we shared went away: start ours
                self.restarts += 1
                self._spawn()
                self._set_state(STARTING, f"starting editserver at {self.server_url}")
                started = time.monotonic()
            elif (
                self.child is not None
                and self.state == STARTING
                and time.monotonic() - started > AUTOSTART_WAIT_S
            ):
                self.stop_child()
                self._schedule_respawn(f"editserver: not healthy after {AUTOSTART_WAIT_S:.0f} s")
            await asyncio.sleep(HEALTH_POLL_S)

    async def _watch(self) -> None:
        """While ready: notice at once when our own server exits (nobody may be asking it then),
        and reset the back-off once it has served for HEALTHY_RESET_S."""
        while self.state == READY and self.child is not None:
            if self.child.poll() is not None:
                self._ensure_recovery()  # sees the exit and restarts it after the back-off
                return
            if self._ready_since is not None and time.monotonic() - self._ready_since >= HEALTHY_RESET_S:
                self._backoff = BACKOFF_S[0]
            await asyncio.sleep(HEALTH_POLL_S / 2)

    def nudge(self) -> None:
        """Make sure a recovery probe is running (cheap; called by requests made while down)."""
        if self.state != READY:
            self._ensure_recovery()

    # ---- calls ---------------------------------------------------------------------------------
    async def _post(self, path: str, body: dict, timeout_s: float) -> dict | None:
        if self.state != READY:
            self._ensure_recovery()
            return None
        t0 = time.perf_counter()
        try:
            r = await self._http.post(self.server_url + path, json=body, timeout=timeout_s)
        except httpx.TimeoutException:
            self._timeouts += 1
            if self._timeouts >= SLOW_TIMEOUTS and not self._slow_told:
                self._slow_told = True
                self._tell(2, f"editserver: answers take over {timeout_s:.1f} s; skipping them")
            return None
        except (httpx.HTTPError, OSError):
            self._down(f"editserver: no answer at {self.server_url}; retrying")
            self._ensure_recovery()
            return None
        self.last_latency_ms = (time.perf_counter() - t0) * 1000
        self._timeouts, self._slow_told = 0, False
        if r.status_code != 200:
            log.warning("%s -> HTTP %s: %s", path, r.status_code, r.text[:500])
            return None
        try:
            return r.json()
        except ValueError:
            log.warning("%s -> invalid JSON", path)
            return None

    async def fim(
        self, prefix: str, suffix: str, max_tokens: int, stop: list[str], timeout_s: float
    ) -> str | None:
        body = {
            "model": MODEL_NAME,
            "prompt": prefix,
            "suffix": suffix,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "stop": stop,
            "stream": False,
        }
        res = await self._post("/v1/fim/completions", body, timeout_s)
        if not res:
            return None
        info = res.get("editserver") if isinstance(res, dict) else None
        if isinstance(info, dict):
            if isinstance(info.get("threshold"), (int, float)):
                self.fim_threshold = float(info["threshold"])
            if info.get("outcome") == "below_threshold":
                self._withheld.append(time.monotonic())
        try:
            return str(res["choices"][0]["text"])
        except (KeyError, IndexError, TypeError):
            log.warning("FIM reply without choices[0].text: %s", str(res)[:300])
            return None

    async def edit(
        self, prompt: str, timeout_s: float, cursor_index: int = 0, cross_file: bool = False
    ) -> EditAnswer | None:
        """``cursor_index``: which ``<|cursor|>`` of the region is the cursor, so a file whose text
        spells the tag is asked like any other (protocol/prompt.py). ``cross_file``: the region is in
        another file than the one edited, so the server holds it to its cross-file threshold."""
        body = {
            "model": MODEL_NAME,
            "messages": [{"role": "user", "content": prompt}],
            "cursor_index": cursor_index,
            "edit_kind": "cross_file" if cross_file else "in_file",
        }
        res = await self._post("/v1/edit/completions", body, timeout_s)
        if not res:
            return None
        try:
            content = res["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            log.warning("edit reply without choices[0].message.content: %s", str(res)[:300])
            return None
        score, above = _find_score(res)
        return EditAnswer(parse_edit_response(content or ""), score, above, res)

    async def close(self) -> None:
        for task in (self._recovery, self._watcher, self._learning):
            if task is not None:
                task.cancel()
        await self._http.aclose()
        self.stop_child()

    def stop_child(self) -> None:
        child, self.child = self.child, None
        if child is None or child.poll() is not None:
            return
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()

    def info(self) -> dict[str, Any]:
        """Live state for health checks (``editserver/info``)."""
        return {
            "state": self.state,
            "message": self.message,
            "latencyMs": self.last_latency_ms,
            "serverUrl": self.server_url,
            "ownPort": self.own_port,
            "autostart": self.autostart,
            "serverRunning": self.child is not None and self.child.poll() is None,
            "serverPid": self.child.pid if self.child is not None else None,
            "serveLog": self.serve_log,
            "restarts": self.restarts,
            "withheld": self.withheld(),
            "withheldWindowS": WITHHELD_WINDOW_S,
            "fimThreshold": self.fim_threshold,
            # what prompts are budgeted against (lsp/budget.py); exactTokens: the served tokenizer counts
            "contextLength": self.limits.context_length,
            "window": self.limits.window,
            "exactTokens": self.limits.tokenizer is not None,
        }
