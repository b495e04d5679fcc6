"""Server down, slow, back again; autostart of `editserver serve` and its stop on exit."""

from __future__ import annotations

import asyncio
import os
import signal

import httpx
from lsprotocol import types

from tests.lsp.conftest import free_port, lsp_session, start_http, stop, wait_healthy

SRC = "def add(a, b):\n    return a + b\n\n\ndef main():\n    total = add(1, 2)\n    print(total)\n"
URI = "file:///work/calc.py"


def warnings(s) -> list[str]:
    return [m.message for m in s.messages if m.type == types.MessageType.Warning]


async def test_down_then_recovers_with_one_message_per_outage(tiny_checkpoint, base_options, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    async with lsp_session(url, base_options, wait_ready=False) as s:
        await s.wait_status("unreachable")
        assert any(url in st.get("message", "") for st in s.statuses if st["state"] == "unreachable")
        s.open(URI, SRC, "python")
        for _ in range(5):  # typing while the server is down: empty answers, no pile of messages
            assert not (await s.inline(URI, 6, 4)).items
            nxt = await s.request(
                "editserver/nextEdit", {"textDocument": {"uri": URI}, "position": {"line": 6, "character": 4}}
            )
            assert nxt["edits"] == []
        down = warnings(s)
        assert len(down) == 1 and "no answer" in down[0] and url in down[0] and len(down[0]) <= 80

        proc = start_http(tiny_checkpoint, port, tmp_path / "serve.log")
        try:
            wait_healthy(url, proc)
            s.statuses.clear()
            await s.wait_status("ready")  # recovered by itself, no client action
            assert len((await s.inline(URI, 6, 4)).items) == 1
            assert any("is back" in m.message for m in s.messages)
            assert any(st.get("latencyMs") is not None for st in s.statuses)
        finally:
            stop(proc)

        # a second outage is reported once more, again only once
        s.replace(URI, (6, 4), (6, 4), "x")
        for _ in range(3):
            assert not (await s.inline(URI, 6, 5)).items
        await s.wait_status("unreachable")
        assert len(warnings(s)) == 2


async def test_autostart_spawns_and_stops_the_http_server(tiny_checkpoint, base_options):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    async with lsp_session(
        url, base_options, autostart=True, extra_args=["--model", str(tiny_checkpoint)], wait_ready=False
    ) as s:
        await s.wait_status("starting")
        await s.wait_status("ready", timeout=180)
        assert httpx.get(url + "/health", timeout=2).status_code == 200
        s.open(URI, SRC, "python")
        assert len((await s.inline(URI, 6, 4)).items) == 1
        assert not warnings(s)
    # the LSP stopped its child on exit
    for _ in range(100):
        try:
            httpx.get(url + "/health", timeout=0.5)
        except httpx.HTTPError:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the autostarted editserver is still answering after the LSP exited")


async def test_slow_server_gives_empty_results_and_one_message(tiny_server, base_options):
    # a 1 ms budget: every answer from the (real) server is too late
    async with lsp_session(tiny_server, {**base_options, "fimTimeoutMs": 1}) as s:
        s.open(URI, SRC, "python")
        for i in range(4):
            s.replace(URI, (6, 4 + i), (6, 4 + i), "x")
            assert not (await s.inline(URI, 6, 5 + i)).items
        slow = [w for w in warnings(s) if "take over" in w]
        assert len(slow) == 1
        s.client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"editserver": {"fimTimeoutMs": 5000}})
        )
        assert len((await s.inline(URI, 6, 8)).items) == 1  # still "ready": slowness is not an outage


async def test_own_server_on_a_free_port_restarted_after_every_crash(tiny_checkpoint, base_options, tmp_path):
    """No server URL: the LSP starts a server of its own on a free port, logs it under the state
    directory, and starts it again (with back-off) however often it dies; every message is one
    short line that promises only what happens."""
    state = tmp_path / "state"
    async with lsp_session(
        "",
        base_options,
        autostart=True,
        extra_args=["--model", str(tiny_checkpoint)],
        wait_ready=False,
        env={"XDG_STATE_HOME": str(state)},
    ) as s:
        await s.wait_status("ready", timeout=180)
        info = await s.request("editserver/info", {})
        assert info["ownPort"] is True and info["serverUrl"] != "http://127.0.0.1:8000"
        assert info["serveLog"] == str(state / "editserver" / "serve.log")
        for crash in range(1, 4):
            pid = info["serverPid"]
            os.kill(pid, signal.SIGKILL)  # the server this LSP started (its child)
            s.statuses.clear()
            await s.wait_status("unreachable", timeout=30)
            await s.wait_status("ready", timeout=240)
            info = await s.request("editserver/info", {})
            assert info["state"] == "ready" and info["serverPid"] != pid and info["restarts"] == crash
        assert all(len(m.message) <= 80 and "\n" not in m.message for m in s.messages)
        assert any("restarting in" in w for w in warnings(s))
        log = (state / "editserver" / "serve.log").read_text()
        assert log.count("---- ") == 4  # the first start and three restarts, each with its command line
