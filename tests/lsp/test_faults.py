"""Faults inside a request: the model server killed (SIGKILL) while the language server waits on it."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time

import httpx
from lsprotocol import types

from tests.lsp.conftest import lsp_session

SRC = "def add(a, b):\n    return a + b\n\n\ndef main():\n    total = add(1, 2)\n    print(total)\n"
BIG = SRC + "".join(f"value_{i} = add({i}, {i + 1})\n" for i in range(200))
URI, OTHER = "file:///work/calc.py", "file:///work/big.py"


async def _restarted(s, old_pid: int, timeout: float = 240) -> dict:
    """``editserver/info`` once a new server is up. A status sent after a model call that finished
    just before the kill still says ready, so the ready status alone does not mean the restart."""
    deadline = time.monotonic() + timeout
    while True:
        info = await s.request("editserver/info", {})
        if info["state"] == "ready" and info["serverPid"] not in (None, old_pid):
            return info
        assert time.monotonic() < deadline, info
        await asyncio.sleep(0.1)


async def test_server_killed_mid_request(tiny_checkpoint, base_options, tmp_path):
    """Requests in flight when the LSP's own server dies answer (empty) in bounded time, the outage is
    reported once, the server is started again and the next request is served."""
    options = {**base_options, "fimTimeoutMs": 20000, "nextEditTimeoutMs": 20000}  # a busy machine
    async with lsp_session(
        "",
        options,
        autostart=True,
        extra_args=["--model", str(tiny_checkpoint)],
        wait_ready=False,
        env={"XDG_STATE_HOME": str(tmp_path / "state")},
    ) as s:
        await s.wait_status("ready", timeout=180)
        s.open(URI, SRC, "python")
        first = await s.inline(URI, 6, 4)
        assert len(first.items) == 1, (s.statuses[-3:], [m.message for m in s.messages])
        s.open(OTHER, BIG, "python")
        pid = (await s.request("editserver/info", {}))["serverPid"]
        for kill_after in (0.0, 0.05, 0.2):  # before, around and during the model's work
            s.replace(URI, (6, 4), (6, 4), "x")
            t0 = time.monotonic()
            inline = asyncio.ensure_future(s.inline(URI, 6, 5))
            nxt = asyncio.ensure_future(
                s.request(
                    "editserver/nextEdit",
                    {"textDocument": {"uri": OTHER}, "position": {"line": 100, "character": 4}},
                )
            )
            await asyncio.sleep(kill_after)
            s.statuses.clear()
            os.kill(pid, signal.SIGKILL)
            got_inline, got_next = await asyncio.wait_for(asyncio.gather(inline, nxt), 60)
            assert time.monotonic() - t0 < 45  # never hangs the editor (bounded by the timeouts)
            assert got_inline is not None and isinstance(got_next["edits"], list)
            await s.wait_status("ready", timeout=240)  # started again with back-off
            info = await _restarted(s, pid)
            pid = info["serverPid"]
            s.statuses.clear()
            s.replace(URI, (6, 4), (6, 4), "y")
            await s.inline(URI, 6, 5)  # the new server answers (the tiny model may answer blank)
            metrics = httpx.get(f"{info['serverUrl']}/metrics", timeout=10).text
            assert re.search(
                r'^editserver_requests_total\{endpoint="/v1/fim/completions",status="200"\} [1-9]',
                metrics,
                re.M,
            )
        warned = [m.message for m in s.messages if m.type == types.MessageType.Warning]
        errors = [m.message for m in s.messages if m.type == types.MessageType.Error]
        assert not errors, errors
        assert 1 <= len(warned) <= 3 and all("\n" not in w for w in warned), warned  # once per outage
        assert info["restarts"] == 3
