"""A stateful fuzz of document sync over a real LSP connection (hypothesis' rule-based machine).

The machine is a model of the editor's buffer. Each step sends what an editor sends (an incremental
change, several in one notification, a whole-document change, an undo storm of back-to-back changes
back to earlier texts, a very long line) with UTF-16 positions computed independently of the
server's code, and asks for suggestions now and then against a real ``editserver serve``. After every
step the server's copy must equal the model (text and version), no request may fail, and a next
edit must name the version it was computed on, inside that version's text.

Default tier: about 300 edits. ``-m slow``: at least 10,000, reported by the test.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from lsprotocol import types

from tests.lsp.conftest import lsp_session
from tests.lsp.test_sync import position

PIECES = list("ab x_(){}:.") + ["\n", "\r\n", "\r", "\t", "é", "日本", "😀", "𝔘", "👩‍💻", "    "]
TEXT = st.lists(st.sampled_from(PIECES), max_size=16).map("".join)


def snap(text: str, i: int, forward: bool) -> int:
    """A client never puts a position between the ``\\r`` and ``\\n`` of one line break."""
    if 0 < i < len(text) and text[i - 1] == "\r" and text[i] == "\n":
        return i + 1 if forward else i - 1
    return i


def diff(old: str, new: str) -> tuple[int, int, str]:
    """(start, end in ``old``, replacement): the one change an editor sends to turn old into new."""
    a = 0
    while a < min(len(old), len(new)) and old[a] == new[a]:
        a += 1
    b = 0
    while b < min(len(old), len(new)) - a and old[-1 - b] == new[-1 - b]:
        b += 1
    a, end = snap(old, a, False), snap(old, len(old) - b, True)
    return a, end, new[a : len(new) - (len(old) - end)]


class Buffer(RuleBasedStateMachine):
    """Set before a run: ``lsp`` (LspConnection), ``loop`` (its event loop), ``stats`` (dict)."""

    lsp = loop = None
    stats: dict = {}
    asks_per_doc = 2  # model calls are the slow part; edits are what is fuzzed
    longest_line = 5_000

    def call(self, fn, *args):
        async def go():
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(go(), self.loop).result(60)

    def wait(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(120)

    @initialize(text=TEXT)
    def open(self, text):
        self.stats["docs"] += 1
        self.uri = f"file:///work/fuzz/f{self.stats['docs']}.py"
        self.text, self.past, self.asks = text, [], 0
        self.call(self.lsp.open, self.uri, text, "python")

    def _range(self, data, width: int = 40) -> tuple[int, int]:
        a = data.draw(st.integers(0, len(self.text)))
        b = data.draw(st.integers(a, min(len(self.text), a + width)))
        return snap(self.text, a, False), snap(self.text, b, True)

    def _partial(self, a: int, b: int, new: str) -> types.TextDocumentContentChangePartial:
        rng = types.Range(position(self.text, a, "utf-16"), position(self.text, b, "utf-16"))
        self.past.append(self.text)
        self.text = self.text[:a] + new + self.text[b:]
        self.stats["edits"] += 1
        return types.TextDocumentContentChangePartial(range=rng, text=new)

    @rule(data=st.data(), new=TEXT)
    def edit(self, data, new):
        a, b = self._range(data)
        self.call(self.lsp.change, self.uri, [self._partial(a, b, new)])

    @rule(data=st.data(), n=st.integers(2, 5))
    def batch(self, data, n):
        changes = []  # each change's positions refer to the text after the ones before it
        for _ in range(n):
            a, b = self._range(data)
            changes.append(self._partial(a, b, data.draw(TEXT)))
        self.call(self.lsp.change, self.uri, changes)

    @rule(new=TEXT)
    def full(self, new):
        self.past.append(self.text)
        self.text = new
        self.stats["edits"] += 1
        self.call(self.lsp.change, self.uri, [types.TextDocumentContentChangeWholeDocument(text=new)])

    @rule(data=st.data(), n=st.integers(1, 12))
    @precondition(lambda self: self.past)
    def undo_storm(self, data, n):
        """Back-to-back undos, one notification each without waiting, as a held-down undo key sends."""
        for _ in range(min(n, len(self.past))):
            a, b, new = diff(self.text, self.past.pop())
            self.call(self.lsp.change, self.uri, [self._partial(a, b, new)])
            self.past.pop()  # _partial pushed the text undone; an undo is not itself undoable here

    @rule(data=st.data(), piece=st.sampled_from(["x", "é", "😀", "ab\t"]))
    def long_line(self, data, piece):
        a, b = self._range(data, width=0)
        length = data.draw(st.integers(2_000, self.longest_line))
        line = (piece * length)[:length]
        self.call(self.lsp.change, self.uri, [self._partial(a, b, line)])

    @rule(data=st.data(), kind=st.sampled_from(["inline", "next"]))
    @precondition(lambda self: self.asks < self.asks_per_doc)
    def ask(self, data, kind):
        offset = snap(self.text, data.draw(st.integers(0, len(self.text))), False)
        pos = position(self.text, offset, "utf-16")
        self.stats["asks"] += 1
        self.asks += 1
        if kind == "inline":
            res = self.wait(self.lsp.inline(self.uri, pos.line, pos.character))
            assert res is not None
            return
        version = self.lsp.versions[self.uri]
        params = {
            "textDocument": {"uri": self.uri},
            "position": {"line": pos.line, "character": pos.character},
        }
        res = self.wait(self.lsp.request("editserver/nextEdit", params))
        lines = len(self.text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))
        for e in res["edits"]:
            assert e["textDocument"] == {"uri": self.uri, "version": version}, (e, version)
            assert e["range"]["end"]["line"] <= lines, e
            self.stats["next_edits"] += 1

    @invariant()
    def in_sync(self):
        if not hasattr(self, "uri"):
            return
        state = self.wait(self.lsp.state(self.uri))
        assert state["text"] == self.text
        assert state["version"] == self.lsp.versions[self.uri]
        self.stats["checks"] += 1

    def teardown(self):
        if hasattr(self, "uri"):
            params = types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri=self.uri))
            self.call(self.lsp.client.text_document_did_close, params)


async def fuzz(server_url: str, options: dict, examples: int, steps: int, longest: int = 5_000) -> dict:
    from hypothesis.stateful import run_state_machine_as_test

    stats = {"docs": 0, "edits": 0, "asks": 0, "checks": 0, "next_edits": 0}
    async with lsp_session(server_url, {**options, "languages": ["*"]}) as s:
        Buffer.lsp, Buffer.loop, Buffer.stats = s, asyncio.get_running_loop(), stats
        Buffer.longest_line = longest
        cfg = settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        await asyncio.to_thread(run_state_machine_as_test, Buffer, settings=cfg)
        errors = [m.message for m in s.messages if m.type == types.MessageType.Error]
    assert not errors, errors
    return stats


async def test_random_edit_sequences_stay_in_sync(tiny_server, base_options):
    stats = await fuzz(tiny_server, base_options, examples=6, steps=30)
    assert stats["edits"] >= 120 and stats["checks"] >= stats["docs"], stats


@pytest.mark.slow
async def test_ten_thousand_random_edits_stay_in_sync(tiny_server, base_options):
    stats = await fuzz(tiny_server, base_options, examples=120, steps=100, longest=20_000)
    print(f"\nLSP sync fuzz: {stats}")
    assert stats["edits"] >= 10_000, stats
