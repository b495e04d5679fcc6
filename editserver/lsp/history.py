"""Edit history (coalesced diffs) and recently viewed snippets: the memory behind next-edit prompts.

Floor 0 (see lsp/__init__.py): imports nothing of the language server.

Design decisions:
- An event is a (before, after) pair of whole-document snapshots, so it renders exactly as the
  ``protocol.prompt.unified_diff`` the model was trained on, and consecutive events chain (one event's
  ``after`` is the next one's ``before``).
- Coalescing follows Zed: a change joins the newest event when it is in the same document, within
  ``coalesce_s`` (1 s) of that event's last change and within ``coalesce_lines`` (3) lines of the lines
  the event already touched. Otherwise it starts a new event. A burst of typing is one event; a jump
  elsewhere (or a pause) starts the next one.
- Bounded per workspace (``max_events``, newest last); events whose net effect is nothing (typed then
  deleted) are dropped when rendered.
- The clock is injectable so tests (and the replay of recorded edit histories) are deterministic.
- ``marker()`` / ``since(marker)``: the events a next-edit request has not yet seen (new events, or
  the newest one grown by coalescing), so automatic requests follow only fresh edits.
- ``propagation(events)``: whether fresh edits could need edits elsewhere: an identifier substituted
  (rename, changed call), a literal changed (string or number), or a definition header edited
  (checked by the caller with the syntax tree). Anything else (typing new code, deleting) asks no model.
- Recently viewed snippets: a small LRU of (file, code near where the user was) updated when files
  are opened and whenever a request names a position, excluding the current file at prompt time.
"""

from __future__ import annotations

import re
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from editserver.protocol.prompt import Snippet, unified_diff

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LITERAL = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|\b\d+(?:\.\d+)?\b")
Marker = tuple[int, int, str]  # (event sequence number, its change count, its text then)


@dataclass
class EditEvent:
    uri: str
    path: str
    before: str
    after: str
    first_line: int  # lines touched, in the *after* text
    last_line: int
    started: float
    updated: float
    changes: int = 1
    seq: int = 0  # creation order, for markers

    def diff(self) -> str:
        return unified_diff(self.path, self.before, self.after)


def _lines_of(text: str, start: int, end: int) -> tuple[int, int]:
    first = text.count("\n", 0, start)
    return first, first + text.count("\n", start, end)


class EditHistory:
    def __init__(
        self,
        max_events: int = 24,
        coalesce_s: float = 1.0,
        coalesce_lines: int = 3,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.max_events = max_events
        self.coalesce_s = coalesce_s
        self.coalesce_lines = coalesce_lines
        self.clock = clock
        self.events: list[EditEvent] = []
        self._seq = 0

    def record(self, uri: str, path: str, before: str, after: str, start: int, new_end: int) -> EditEvent:
        """Record that ``uri`` went from ``before`` to ``after`` by a change spanning code point offsets
        [start, new_end) of ``after``."""
        now = self.clock()
        first, last = _lines_of(after, start, new_end)
        lines_added = after.count("\n") - before.count("\n")
        ev = self.events[-1] if self.events else None
        if (
            ev is not None
            and ev.uri == uri
            and ev.after == before
            and now - ev.updated <= self.coalesce_s
            and first <= ev.last_line + self.coalesce_lines
            and last >= ev.first_line - self.coalesce_lines
        ):
            ev.after = after
            if lines_added and first <= ev.last_line:
                # lines inserted/removed inside the event shift where its touched lines end
                ev.last_line = max(ev.first_line, ev.last_line + lines_added)
            ev.first_line, ev.last_line = min(ev.first_line, first), max(ev.last_line, last)
            ev.updated, ev.changes = now, ev.changes + 1
            return ev
        self._seq += 1
        ev = EditEvent(uri, path, before, after, first, last, now, now, seq=self._seq)
        self.events.append(ev)
        del self.events[: -self.max_events]
        return ev

    def forget(self, uri: str) -> None:
        self.events = [e for e in self.events if e.uri != uri]

    def recent(self, n: int) -> list[EditEvent]:
        return [e for e in self.events if e.before != e.after][-n:]

    def render(self, n: int) -> str:
        """The ``<|edit_diff_history|>`` body: unified diffs, oldest first."""
        return "".join(e.diff() for e in self.recent(n))

    def changed_identifiers(self, n: int = 2) -> tuple[set[str], set[str]]:
        """(identifiers the newest edits removed, identifiers they added), from their diff lines.

        A rename ``foo -> bar`` yields ({"foo"}, {"bar"}); the removed set is where stale uses hide.
        Names that only disappeared (a deleted line) are not reported as removed: nothing else needs
        to follow a deletion, and asking the model about every use of them would waste calls."""
        removed: set[str] = set()
        added: set[str] = set()
        for e in self.recent(n):
            m_side, p_side = _diff_sides(e)
            # counted: a renamed name may still appear on the line (`arg = f(arg)` -> `item = f(arg)`)
            minus, plus = Counter(_IDENT.findall(m_side)), Counter(_IDENT.findall(p_side))
            if plus - minus:  # a substitution (rename, changed call); a pure deletion stales nothing
                removed |= set(minus - plus)
            added |= set(plus - minus)
        return removed - added, added - removed

    def marker(self) -> Marker:
        """Where the history stands now (see ``since``)."""
        ev = self.events[-1] if self.events else None
        return (ev.seq, ev.changes, ev.after) if ev is not None else (0, 0, "")

    def since(self, marker: Marker | None, uri: str | None = None) -> list[EditEvent]:
        """Events recorded after ``marker``, oldest first (all for None); an event that grew by
        coalescing since then counts with only its growth (from its text at the marker)."""
        seq, changes, then = marker or (0, 0, "")
        out = []
        for e in self.events:
            if uri is not None and e.uri != uri:
                continue
            if e.seq == seq and e.changes > changes:
                e = EditEvent(e.uri, e.path, then, e.after, e.first_line, e.last_line, e.started, e.updated)
            elif e.seq <= seq:
                continue
            if e.before != e.after:
                out.append(e)
        return out


def _diff_sides(e: EditEvent) -> tuple[str, str]:
    minus, plus = [], []
    for line in e.diff().splitlines():
        if line.startswith("-") and not line.startswith("---"):
            minus.append(line[1:])
        elif line.startswith("+") and not line.startswith("+++"):
            plus.append(line[1:])
    return "\n".join(minus), "\n".join(plus)


def propagation(events: list[EditEvent]) -> str | None:
    """ "identifier" or "literal" when an event substituted one (see the module notes), else None."""
    for e in reversed(events):
        minus, plus = _diff_sides(e)
        m_lit, p_lit = set(_LITERAL.findall(minus)), set(_LITERAL.findall(plus))
        if m_lit - p_lit and p_lit - m_lit:
            return "literal"
        minus, plus = _LITERAL.sub("", minus), _LITERAL.sub("", plus)
        # counted, not sets: `arg = f(arg)` -> `item = f(arg)` still has `arg`, once less
        m_ids, p_ids = Counter(_IDENT.findall(minus)), Counter(_IDENT.findall(plus))
        if m_ids - p_ids and p_ids - m_ids:
            return "identifier"
    return None


class RecentlyViewed:
    """Most recently viewed code per file (LRU), for ``<|recently_viewed_code_snippets|>``."""

    def __init__(self, max_files: int = 8, radius: int = 12):
        self.max_files = max_files
        self.radius = radius  # lines kept either side of the viewed line
        self._snippets: OrderedDict[str, Snippet] = OrderedDict()
        self._lines: dict[str, int] = {}

    def line_of(self, uri: str) -> int:
        """The line last viewed in ``uri`` (0 if never)."""
        return self._lines.get(uri, 0)

    def view(self, uri: str, path: str, text: str, line: int) -> None:
        self._lines[uri] = line
        lines = text.splitlines(keepends=True)
        lo = max(0, line - self.radius)
        code = "".join(lines[lo : line + self.radius + 1])
        if not code.strip():
            return
        self._snippets[uri] = Snippet(path, code)
        self._snippets.move_to_end(uri)
        while len(self._snippets) > self.max_files:
            self._snippets.popitem(last=False)

    def forget(self, uri: str) -> None:
        self._snippets.pop(uri, None)
        self._lines.pop(uri, None)

    def snippets(self, exclude_uri: str, n: int) -> list[Snippet]:
        """Newest last (closest to the current file in the prompt), the current file excluded."""
        out = [s for u, s in self._snippets.items() if u != exclude_uri]
        return out[-n:] if n > 0 else []
