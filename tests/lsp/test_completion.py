"""Inline completion end to end: editor client -> editserver lsp (stdio) -> editserver serve (tiny model).

The tiny model writes gibberish; these tests check plumbing and the LSP's own guarantees (shape,
post-processing invariants, cache, debounce, cancellation, telemetry), not the model's quality.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from tests.lsp.conftest import lsp_session, serving

SRC = "def add(a, b):\n    return a + b\n\n\ndef main():\n    total = add(1, 2)\n    print(total)\n"
URI = "file:///work/calc.py"


def keeping(options: dict) -> dict:
    """``options`` with ``telemetry.keepPrompts``: these tests read the prompt the model was sent."""
    return {**options, "telemetry": {**options["telemetry"], "keepPrompts": True}}


def rows(path, sql):
    with sqlite3.connect(path) as db:
        return db.execute(sql).fetchall()


async def test_inline_completion_item_shape_and_telemetry(tiny_server, base_options, telemetry_path):
    async with lsp_session(tiny_server, keeping(base_options)) as s:
        caps = s.init_result.capabilities
        assert caps.inline_completion_provider is not None
        assert "editserver.inlineAccepted" in caps.execute_command_provider.commands
        s.open(URI, SRC, "python")
        res = await s.inline(URI, 6, 4)  # start of "print(total)": after indentation, mid-line
        assert res is not None and len(res.items) == 1
        item = res.items[0]
        assert item.insert_text and "\n" not in item.insert_text  # mid-line: one line only
        assert "\ufffd" not in item.insert_text
        assert item.range == types.Range(types.Position(6, 4), types.Position(6, 4))
        assert item.command.command == "editserver.inlineAccepted"
        sid = item.command.arguments[0]["id"]
        # the suggestion is stored with its prompt
        ((kind, prompt, suggestion),) = rows(
            telemetry_path, f"SELECT kind, prompt, suggestion FROM suggestions WHERE id='{sid}'"
        )
        assert kind == "fim" and '"prefix"' in prompt and "def add(a, b)" in prompt
        # a single line is asked for with the canvas the benchmarks measured best for one line
        asked = json.loads(prompt)
        assert (asked["max_tokens"], asked["stop"]) == (32, ["\n"])
        assert json.loads(suggestion) == item.insert_text
        # the client reports show and accept; the accept command lands too
        s.client.protocol.notify("editserver/didShow", {"id": sid})
        await s.client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="editserver.inlineAccepted", arguments=[{"id": sid}])
        )
        s.client.protocol.notify("editserver/didAccept", {"id": sid, "partial": "word", "acceptedText": "x"})
        s.client.protocol.notify("editserver/didReject", {"id": sid})
        await s.state(URI)  # a round trip: the notifications before it are handled
        events = rows(
            telemetry_path,
            f"SELECT event, partial, accepted_text FROM events WHERE suggestion_id='{sid}' ORDER BY id",
        )
        assert events == [
            ("show", None, None),
            ("accept", None, None),
            ("accept", "word", "x"),
            ("reject", None, None),
        ]


async def test_typing_along_reuses_the_cached_suggestion(tiny_server, base_options, telemetry_path):
    async with lsp_session(tiny_server, base_options) as s:
        s.open(URI, SRC, "python")
        first = (await s.inline(URI, 6, 4)).items[0]
        text = first.insert_text
        if len(text) < 2:
            pytest.skip("the tiny model produced a one-character completion")
        s.replace(URI, (6, 4), (6, 4), text[0])
        again = (await s.inline(URI, 6, 5)).items[0]
        assert again.insert_text == text[1:]
        assert again.command.arguments[0]["id"] == first.command.arguments[0]["id"]  # no new model call
        assert len(rows(telemetry_path, "SELECT id FROM suggestions")) == 1
        # typing something else misses the cache and asks the model again
        s.replace(URI, (6, 5), (6, 5), "\u00a7" if text[1] != "\u00a7" else "#")
        third = await s.inline(URI, 6, 6)
        assert all(i.command.arguments[0]["id"] != first.command.arguments[0]["id"] for i in third.items)


def fim_calls(url: str) -> float:
    """FIM requests the server has answered (its Prometheus counter)."""
    import urllib.request

    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("editserver_requests_total{") and 'endpoint="/v1/fim/completions"' in line
    )


async def test_newer_keystroke_supersedes_pending_request(tiny_server, base_options, telemetry_path):
    opts = {**base_options, "debounceMs": 400}
    async with lsp_session(tiny_server, opts) as s:
        s.open(URI, SRC, "python")
        before = fim_calls(tiny_server)
        stale = asyncio.ensure_future(s.inline(URI, 6, 4))
        await asyncio.sleep(0.05)  # the first request is waiting out its debounce
        s.replace(URI, (6, 4), (6, 4), "x")
        fresh = await s.inline(URI, 6, 5)
        assert not (await stale).items  # superseded: answered empty
        assert fim_calls(tiny_server) - before == 1, "one model call: the fresh request's, none for the stale"
        # the tiny model's answer may post-process to nothing; what is shown is what is recorded
        assert len(rows(telemetry_path, "SELECT id FROM suggestions")) == len(fresh.items) <= 1


async def test_cancel_request(tiny_server, base_options, telemetry_path):
    opts = {**base_options, "debounceMs": 500}
    async with lsp_session(tiny_server, opts) as s:
        s.open(URI, SRC, "python")
        params = types.InlineCompletionParams(
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
            text_document=types.TextDocumentIdentifier(uri=URI),
            position=types.Position(6, 4),
        )
        fut = asyncio.ensure_future(
            s.client.protocol.send_request_async(
                types.TEXT_DOCUMENT_INLINE_COMPLETION, params, msg_id="to-cancel"
            )
        )
        await asyncio.sleep(0.05)
        s.client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id="to-cancel"))
        with pytest.raises(JsonRpcException) as err:
            await fut
        assert err.value.code == -32800  # RequestCancelled
        assert rows(telemetry_path, "SELECT id FROM suggestions") == []
        # the server is fine afterwards
        assert len((await s.inline(URI, 6, 4)).items) == 1


async def test_disabled_by_settings_and_invalid_options_warn(tiny_server, base_options):
    opts = {**base_options, "debounceMs": "fast", "languages": "python"}
    async with lsp_session(tiny_server, opts) as s:
        warnings = [m.message for m in s.messages if m.type == types.MessageType.Warning]
        assert any("debounceMs" in w and "using 75" in w and len(w) <= 80 for w in warnings)
        assert any("languages" in w for w in warnings)
        s.open(URI, SRC, "python")
        s.client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"editserver": {"enableFim": False, "debounceMs": 0}})
        )
        assert not (await s.inline(URI, 6, 4)).items
        s.client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(
                settings={"editserver": {"enableFim": True, "enableNextEdit": 3}}
            )
        )
        assert len((await s.inline(URI, 6, 4)).items) == 1
        await asyncio.sleep(0.1)
        assert any("enableNextEdit" in m.message for m in s.messages)
        # a document in a language outside `languages` gets nothing
        s.client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"editserver": {"languages": ["go"]}})
        )
        assert not (await s.inline(URI, 6, 4)).items


async def test_telemetry_off_writes_nothing(tiny_server, tmp_path):
    path = tmp_path / "off.sqlite3"
    async with lsp_session(
        tiny_server, {"debounceMs": 0, "telemetry": {"enabled": False, "path": str(path)}}
    ) as s:
        s.open(URI, SRC, "python")
        item = (await s.inline(URI, 6, 4)).items[0]
        sid = item.command.arguments[0]["id"]
        s.client.protocol.notify("editserver/didShow", {"id": sid})
        s.client.protocol.notify("editserver/didAccept", {"id": sid})
        await s.state(URI)
    assert not path.exists()


async def test_prompt_carries_definitions_from_other_open_files(tiny_server, base_options, telemetry_path):
    async with lsp_session(tiny_server, keeping(base_options)) as s:
        s.open(
            "file:///work/geometry.py",
            "def scale(v, k):\n    return v * k\n\n\ndef unused():\n    pass\n",
            "python",
        )
        s.open(URI, "from geometry import scale\n\n\ndef main():\n    big = scale(3, 4)\n    \n", "python")
        res = await s.inline(URI, 5, 4)
        assert len(res.items) == 1
        sid = res.items[0].command.arguments[0]["id"]
        ((prompt,),) = rows(telemetry_path, f"SELECT prompt FROM suggestions WHERE id='{sid}'")
        asked = json.loads(prompt)
        prefix = asked["prefix"]
        # an empty line may take a block: the multi-line canvas and stop
        assert (asked["max_tokens"], asked["stop"]) == (64, ["\n\n\n"])
        assert prefix.startswith("# geometry.py\n# def scale(v, k):\n#     return v * k\n")
        assert "unused" not in prefix  # only definitions of names used near the cursor
        assert prefix.endswith("    big = scale(3, 4)\n    ")


@pytest.fixture(scope="module")
def strict_server(tiny_checkpoint, tmp_path_factory):
    """The tiny checkpoint served with ``--fim-threshold 1``: every FIM answer comes back as ""."""
    log = tmp_path_factory.mktemp("strict") / "serve.log"
    with serving(tiny_checkpoint, log, "--fim-threshold", "1") as url:
        yield url


async def test_a_completion_the_server_suppresses_shows_nothing(
    tiny_server, strict_server, base_options, telemetry_path
):
    async with lsp_session(tiny_server, base_options) as s:
        s.open(URI, SRC, "python")
        assert len((await s.inline(URI, 6, 4)).items) == 1  # the same request, shown at threshold 0
    async with lsp_session(strict_server, base_options) as s:
        s.open(URI, SRC, "python")
        assert not (await s.inline(URI, 6, 4)).items
        await s.state(URI)
    assert len(rows(telemetry_path, "SELECT id FROM suggestions")) == 1  # only the shown one is logged
