"""Edit history: coalescing (in-process, with a fake clock) and over stdio; recently viewed snippets."""

from __future__ import annotations

import asyncio

from editserver.lsp.history import EditHistory, RecentlyViewed
from tests.lsp.conftest import lsp_session


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def type_text(h: EditHistory, clock: Clock, text: str, at: int, chars: str, dt: float = 0.1) -> str:
    for ch in chars:
        clock.t += dt
        new = text[:at] + ch + text[at:]
        h.record("file:///a.py", "a.py", text, new, at, at + 1)
        text, at = new, at + 1
    return text


SRC = "".join(f"line{i} = {i}\n" for i in range(30))


def test_burst_is_one_event_pause_or_jump_starts_another():
    clock = Clock()
    h = EditHistory(clock=clock)
    text = type_text(h, clock, SRC, SRC.index("line3 = 3") + len("line3 = 3"), " + 1")
    assert len(h.recent(10)) == 1
    # nearby line (within 3 lines), still within a second: same event
    text = type_text(h, clock, text, text.index("line5 = 5") + len("line5 = 5"), "0")
    assert len(h.recent(10)) == 1
    # far away: new event
    text = type_text(h, clock, text, text.index("line20 = 20") + len("line20 = 20"), "0")
    assert len(h.recent(10)) == 2
    # same place after a pause longer than the coalescing window: new event
    clock.t += 1.5
    text = type_text(h, clock, text, text.index("line20 = 200") + len("line20 = 200"), "1")
    assert len(h.recent(10)) == 3
    diffs = h.render(10)
    assert diffs.count("--- a.py\n+++ a.py\n") == 3
    assert "-line3 = 3\n+line3 = 3 + 1\n" in diffs and "-line5 = 5\n+line5 = 50\n" in diffs
    assert "-line20 = 200\n+line20 = 2001\n" in diffs
    first, *_ = h.recent(10)
    assert first.changes == 5  # " + 1" and "0"


def test_bounded_and_net_noop_events_hidden():
    clock = Clock()
    h = EditHistory(max_events=4, clock=clock)
    text = SRC
    for _ in range(10):
        clock.t += 2
        text = type_text(h, clock, text, 0, "x")
    assert len(h.events) == 4
    clock.t += 2
    before = text
    text = type_text(h, clock, text, 0, "y")
    h.record("file:///a.py", "a.py", text, before, 0, 0)  # deleted again, same burst
    assert h.events[-1].before == h.events[-1].after
    assert len(h.recent(10)) == 3


def test_rename_yields_old_and_new_identifiers():
    clock = Clock()
    h = EditHistory(clock=clock)
    src = "def compute(a):\n    return a\n\nx = compute(1)\n"
    new = src.replace("def compute", "def compute_total")
    h.record("file:///a.py", "a.py", src, new, 4, 4 + len("compute_total"))
    removed, added = h.changed_identifiers()
    assert removed == {"compute"} and added == {"compute_total"}


def test_recently_viewed_snippets_exclude_current_file():
    rv = RecentlyViewed(max_files=2, radius=1)
    rv.view("file:///a.py", "a.py", "a0\na1\na2\na3\n", 2)
    rv.view("file:///b.py", "b.py", "b0\nb1\n", 0)
    rv.view("file:///c.py", "c.py", "c0\n", 0)
    snips = rv.snippets("file:///c.py", 5)
    assert [s.path for s in snips] == ["b.py"]  # a.py fell out of the LRU, c.py is current
    assert rv.snippets("file:///x.py", 5)[-1].code == "c0\n"
    rv.view("file:///a.py", "a.py", "a0\na1\na2\na3\n", 2)
    assert [s.code for s in rv.snippets("file:///b.py", 5)] == ["c0\n", "a1\na2\na3\n"]


async def test_history_over_stdio(base_options):
    async with lsp_session("http://127.0.0.1:9", base_options, wait_ready=False) as s:
        uri = "file:///work/h.py"
        s.open(uri, SRC, "python")
        for i, ch in enumerate("abc"):
            s.replace(uri, (2, 9 + i), (2, 9 + i), ch)
        state = await s.state(uri)
        assert state["historyEvents"] == 1
        assert "-line2 = 2\n+line2 = 2abc\n" in state["history"]
        await asyncio.sleep(1.2)  # longer than the coalescing window
        s.replace(uri, (2, 12), (2, 12), "d")
        state = await s.state(uri)
        assert state["historyEvents"] == 2
        assert state["history"].index("+line2 = 2abc\n") < state["history"].index("+line2 = 2abcd\n")


async def test_recently_viewed_over_stdio_follows_open_and_focus(base_options):
    async with lsp_session("http://127.0.0.1:9", base_options, wait_ready=False) as s:
        for name in ("a", "b", "c"):
            s.open(f"file:///work/{name}.py", f"{name} = 1\n", "python")
        assert (await s.state("file:///work/c.py"))["recentlyViewed"] == ["a.py", "b.py"]
        s.client.protocol.notify("textDocument/didFocus", {"textDocument": {"uri": "file:///work/a.py"}})
        assert (await s.state("file:///work/c.py"))["recentlyViewed"] == ["b.py", "a.py"]  # newest last


def test_pure_deletion_reports_no_stale_names():
    h = EditHistory(clock=Clock())
    src = "x = compute(i)\ny = 2\n"
    h.record("file:///a.py", "a.py", src, "y = 2\n", 0, 0)
    assert h.changed_identifiers() == (set(), set())
