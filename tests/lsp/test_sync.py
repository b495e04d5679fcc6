"""Document sync over stdio: incremental and full changes, UTF-16/UTF-8 positions, never out of sync."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lsprotocol import types

from tests.lsp.conftest import lsp_session

DEAD_URL = "http://127.0.0.1:9"  # discard port: nothing answers; sync needs no model


def position(text: str, offset: int, encoding: str) -> types.Position:
    """Independent reference: LSP position of a code point offset (lines split on \\r\\n, \\r, \\n)."""
    line, start, i = 0, 0, 0
    while i < offset:
        ch = text[i]
        if ch == "\r" and i + 1 < len(text) and text[i + 1] == "\n":
            if i + 1 < offset:
                i += 2
                line, start = line + 1, i
                continue
            break
        if ch in "\r\n":
            line, start = line + 1, i + 1
        i += 1
    chunk = text[start:offset]
    n = len(chunk.encode("utf-16-le")) // 2 if encoding == "utf-16" else len(chunk.encode("utf-8"))
    return types.Position(line=line, character=n)


ALPHABET = st.sampled_from(list("ab xy_(){}") + ["\n", "\r\n", "\r", "é", "日本", "😀", "𝔘", "\t"])
TEXT = st.lists(ALPHABET, max_size=12).map("".join)


@st.composite
def edit_scripts(draw):
    """(initial text, steps): each step is ("full", text) or ("range", start, end, text) in code points."""
    text = initial = draw(TEXT)
    steps = []
    for _ in range(draw(st.integers(1, 12))):
        if draw(st.integers(0, 9)) == 0:
            text = draw(TEXT)
            steps.append(("full", 0, 0, text))
            continue
        a = draw(st.integers(0, len(text)))
        b = draw(st.integers(a, min(len(text), a + 6)))
        # a client's positions never point between \r and \n
        if 0 < a < len(text) and text[a - 1] == "\r" and text[a] == "\n":
            a -= 1
        if 0 < b < len(text) and text[b - 1] == "\r" and text[b] == "\n":
            b += 1
        new = draw(TEXT)
        steps.append(("range", a, b, new))
        text = text[:a] + new + text[b:]
    return initial, steps


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8"])
async def test_server_text_equals_client_text(encoding, base_options):
    offered = ["utf-8", "utf-16"] if encoding == "utf-8" else None
    async with lsp_session(DEAD_URL, base_options, encodings=offered, wait_ready=False) as s:
        negotiated = s.init_result.capabilities.position_encoding
        assert str(getattr(negotiated, "value", negotiated)) == encoding
        loop = asyncio.get_running_loop()
        counter = {"n": 0}

        def on_loop(fn, *args):
            async def call():
                return fn(*args)

            return asyncio.run_coroutine_threadsafe(call(), loop).result(30)

        # hypothesis drives a plain function in a worker thread; LSP traffic runs on the test's loop
        @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
        @given(script=edit_scripts())
        def check(script):
            initial, steps = script
            counter["n"] += 1
            uri = f"file:///work/prop{counter['n']}.py"
            text = initial
            on_loop(s.open, uri, text, "python")
            for kind, a, b, new in steps:
                if kind == "full":
                    on_loop(s.change, uri, [types.TextDocumentContentChangeWholeDocument(text=new)])
                else:
                    rng = types.Range(position(text, a, encoding), position(text, b, encoding))
                    on_loop(s.change, uri, [types.TextDocumentContentChangePartial(range=rng, text=new)])
                    new = text[:a] + new + text[b:]
                text = new
            state = asyncio.run_coroutine_threadsafe(s.state(uri), loop).result(30)
            assert state["text"] == text
            assert state["version"] == s.versions[uri]
            on_loop(
                s.client.text_document_did_close,
                types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri=uri)),
            )

        await asyncio.to_thread(check)


async def test_batched_changes_and_clamping(base_options):
    async with lsp_session(DEAD_URL, base_options, wait_ready=False) as s:
        uri = "file:///work/a.py"
        s.open(uri, "x = 1\ny = 2\n", "python")
        # two changes in one notification apply in order; a position past the end of a line clamps
        s.change(
            uri,
            [
                types.TextDocumentContentChangePartial(
                    range=types.Range(types.Position(0, 4), types.Position(0, 5)), text="10"
                ),
                types.TextDocumentContentChangePartial(
                    range=types.Range(types.Position(1, 99), types.Position(1, 99)), text="  # two"
                ),
            ],
        )
        state = await s.state(uri)
        assert state["text"] == "x = 10\ny = 2  # two\n"
        assert state["grammar"] == "python"
        assert state["incrementalParses"] == 2 and state["fullParses"] == 1
        s.client.text_document_did_save(
            types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(uri=uri))
        )
        s.client.text_document_did_close(
            types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri=uri))
        )
        with pytest.raises(Exception, match="not open"):
            await s.state(uri)


async def test_utf8_preferred_whenever_offered(base_options):
    async with lsp_session(DEAD_URL, base_options, encodings=["utf-16", "utf-8"], wait_ready=False) as s:
        enc = s.init_result.capabilities.position_encoding
        assert str(getattr(enc, "value", enc)) == "utf-8"
        uri = "file:///work/u.py"
        s.open(uri, "s = '😀'\n", "python")
        s.replace(uri, (0, 10), (0, 10), " + 'x'")  # byte 10: after "s = '" (5), the emoji (4) and the quote
        assert (await s.state(uri))["text"] == "s = '😀' + 'x'\n"
