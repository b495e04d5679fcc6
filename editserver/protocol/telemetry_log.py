"""The language server's telemetry log: its SQLite layout, and what of it can become KTO examples.

One module owns both, so the writer (lsp/telemetry.py), the trainer (``editserver align``,
model/train/kto_data.py) and the user's view of the log (``editserver telemetry stats``,
lsp/telemetry_cli.py) cannot drift apart: the stats say how many examples align can use by running
the very reader align runs.

The rule (what an example is):
- A suggestion never shown, accepted or rejected carries no signal and is skipped. A suggestion
  stored as sizes and hashes (``"omitted": true``: ``telemetry.keepPrompts`` was off, or retention
  redacted it) is counted as ``telemetry_without_prompts``, never guessed at.
- FIM: a whole accept (the item's command, or ``didAccept`` without ``partial``) makes the
  completion desirable. Partial accepts (``partial`` word/line) each report the piece taken; the
  pieces are found in order in the completion, and the completion up to the end of the last one is
  desirable (the user may have typed some of it through in between, which no event reports). A
  completion shown or rejected and never accepted is undesirable. Partial accepts whose pieces are
  not in the completion, or carry no text, give no example (``telemetry_partial_unplaced``).
- Next edit: the row holds the kept regions in the reply's order, each with its prompt and rewrite
  and, where the server records it, ``edits``: how many of the reply's flat ``edits`` the region
  made. ``editIndex`` indexes those flat ``edits`` (``didAccept``'s, the Copilot-shaped items'
  command's, and that of the accepts ``editserver/applyEdits`` records, one per region it applied,
  naming the region's first edit), so it is mapped to its region by the counts; a row without them
  takes the index as the region's, which is right whenever each region made one edit (a rename's
  uses do). Then per region: a whole accept of any of its edits makes the region's rewrite
  desirable, once however many of its edits were taken; a region taken only in part (word/line)
  gives no example (its answer would be the whole rewrite, which the user did not take, and the
  part taken is no region: ``telemetry_edit_taken_in_part``); a region offered (the suggestion
  shown, rejected or partly accepted) and not taken is undesirable. An accept that names no edit
  (an older server's ``applyEdits``), or one past the row's edits, is counted
  (``telemetry_accept_unplaced``), and then no region of that suggestion is called undesirable: the
  accept may have been its.

Design decisions:
- Standard library only (protocol/__init__.py), opened read-only (``mode=ro``), so a training run or
  ``stats`` can read the log while the editor writes it (WAL).
- The schema's ``CREATE TABLE IF NOT EXISTS`` never alters an existing file, so new facts go into the
  JSON of a row (a region's ``edits``) or into the meaning of an existing column's values, never a
  new column; the reader takes every older row as it was written.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS suggestions (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,            -- 'fim' | 'next_edit'
    created REAL NOT NULL,         -- unix time
    uri TEXT NOT NULL,
    language TEXT,
    prompt TEXT NOT NULL,          -- JSON: {prefix, suffix} or {prompts: [...]}
    suggestion TEXT NOT NULL,      -- JSON: the text / edits offered
    score REAL
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    suggestion_id TEXT NOT NULL,
    event TEXT NOT NULL,           -- 'show' | 'accept' | 'reject'
    edit_index INTEGER,            -- next edit: index into the reply's flat edits
    partial TEXT,                  -- NULL (whole) | 'word' | 'line'
    accepted_text TEXT,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_suggestion ON events (suggestion_id);
"""
OMITTED = '{"omitted": true}'  # what retention leaves of a kept prompt or suggestion
KEPT = """prompt NOT LIKE '{"omitted": true%'"""  # SQL: the rows whose text is kept
KINDS = ("fim", "next_edit")
MIN_EVENTS = 50  # editserver align refuses a smaller log (its --min-events)
# where each editor keeps the setting that stores prompts (docs/lsp.md, the extensions' settings)
KEEP_PROMPTS_HINT = (
    "telemetry.keepPrompts: true (VS Code: editserver.telemetry.keepPrompts; Neovim: "
    "setup({ telemetry = { keep_prompts = true } }); other editors: initializationOptions)"
)


@dataclass
class Example:
    kind: str  # "fim" | "edit"
    desirable: bool
    answer: str  # the FIM middle, or the rewritten region
    source: str  # where it came from, e.g. "replay:developer", "telemetry:accept"
    prompt: str = ""  # edit: the Inception next-edit prompt (protocol/prompt.py)
    prefix: str = ""  # FIM
    suffix: str = ""  # FIM

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Event:
    event: str  # show | accept | reject
    index: int | None
    partial: str | None
    text: str | None


def connect_ro(path: Path) -> sqlite3.Connection:
    """The log opened read-only; FileNotFoundError / ValueError with a clear message."""
    if not path.is_file():
        raise FileNotFoundError(f"no such telemetry file: {path}")
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise ValueError(f"{path} cannot be opened: {e}") from None
    try:
        db.execute("SELECT 1 FROM suggestions LIMIT 1")
        db.execute("SELECT 1 FROM events LIMIT 1")
    except sqlite3.DatabaseError as e:
        db.close()
        raise ValueError(f"{path} is not an editserver telemetry file (lsp/telemetry.py): {e}") from None
    return db


def count_events(path: str | Path) -> int:
    db = connect_ro(Path(path))
    try:
        return int(db.execute("SELECT COUNT(*) FROM events").fetchone()[0])
    finally:
        db.close()


def _events(db: sqlite3.Connection) -> dict[str, list[Event]]:
    out: dict[str, list[Event]] = {}
    for sid, event, idx, partial, text in db.execute(
        "SELECT suggestion_id, event, edit_index, partial, accepted_text FROM events ORDER BY id"
    ):
        out.setdefault(sid, []).append(Event(event, idx, partial, text))
    return out


def _taken(text: str, pieces: list[str]) -> str | None:
    """The completion up to the end of the last piece, the pieces found in order; None if one is not."""
    end = 0
    for piece in pieces:
        at = text.find(piece, end)
        if at < 0:
            return None
        end = at + len(piece)
    return text[:end]


def _fim_examples(prompt: dict, suggestion, events: list[Event], stats: Counter) -> list[Example]:
    text = suggestion if isinstance(suggestion, str) else None
    if text is None or "prefix" not in prompt:
        stats["telemetry_malformed"] += 1
        return []
    pre, suf = prompt["prefix"], prompt.get("suffix", "")
    accepts = [e for e in events if e.event == "accept"]
    if any(e.partial is None for e in accepts):
        return [Example("fim", True, text, "telemetry:accept", prefix=pre, suffix=suf)]
    if accepts:
        pieces = [e.text for e in accepts]
        taken = _taken(text, pieces) if all(pieces) else None
        if not taken:
            stats["telemetry_partial_unplaced"] += 1
            return []
        return [Example("fim", True, taken, "telemetry:partial", prefix=pre, suffix=suf)]
    if any(e.event in ("show", "reject") for e in events):
        return [Example("fim", False, text, "telemetry:reject", prefix=pre, suffix=suf)]
    return []


def _region_of(index, counts: list | None, regions: int) -> int | None:
    """The region an index into the reply's flat edits falls in (module docstring)."""
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        return None
    if counts is None:
        return index if index < regions else None
    for region, n in enumerate(counts):
        if index < n:
            return region
        index -= n
    return None


def _edit_examples(prompt: dict, suggestion, events: list[Event], stats: Counter) -> list[Example]:
    prompts = prompt.get("prompts") or []
    regions = suggestion if isinstance(suggestion, list) else []
    if not prompts or len(regions) != len(prompts) or not all(isinstance(r, dict) for r in regions):
        stats["telemetry_malformed"] += 1
        return []
    counts = [r.get("edits") for r in regions]
    exact = all(isinstance(n, int) and n >= 1 for n in counts)
    whole: set[int] = set()
    part: set[int] = set()
    unplaced = False
    for e in events:
        if e.event != "accept":
            continue
        region = _region_of(e.index, counts if exact else None, len(regions))
        if region is None:
            stats["telemetry_accept_unplaced"] += 1
            unplaced = True
        else:
            (part if e.partial else whole).add(region)
    offered = any(e.event in ("show", "reject", "accept") for e in events)
    out: list[Example] = []
    for i, (p, r) in enumerate(zip(prompts, regions)):
        text = r.get("rewritten")
        if not isinstance(text, str) or not isinstance(p, str):
            stats["telemetry_malformed"] += 1
        elif i in whole:
            out.append(Example("edit", True, text, "telemetry:accept", prompt=p))
        elif i in part:
            stats["telemetry_edit_taken_in_part"] += 1
        elif offered and not unplaced:
            out.append(Example("edit", False, text, "telemetry:reject", prompt=p))
    return out


def examples_of(
    kind: str, prompt: str, suggestion: str, events: list[Event], stats: Counter
) -> list[Example]:
    """One stored suggestion (its row's JSON columns) and its events -> examples (module docstring)."""
    if not events:
        return []
    try:
        p, s = json.loads(prompt), json.loads(suggestion)
    except ValueError:
        stats["telemetry_malformed"] += 1
        return []
    if not isinstance(p, dict):
        stats["telemetry_malformed"] += 1
        return []
    if p.get("omitted") is True:  # keepPrompts was off, or retention redacted it
        stats["telemetry_without_prompts"] += 1
        return []
    if kind == "fim":
        return _fim_examples(p, s, events, stats)
    if kind == "next_edit":
        return _edit_examples(p, s, events, stats)
    stats["telemetry_unknown_kind"] += 1
    return []


def read_telemetry(path: str | Path, stats: Counter | None = None) -> list[Example]:
    """Examples from one telemetry log, in the order the suggestions were made."""
    stats = stats if stats is not None else Counter()
    db = connect_ro(Path(path))
    try:
        events = _events(db)
        stats["telemetry_events"] += sum(len(v) for v in events.values())
        out: list[Example] = []
        for sid, kind, prompt, suggestion in db.execute(
            "SELECT id, kind, prompt, suggestion FROM suggestions ORDER BY created"
        ):
            out += examples_of(kind, prompt, suggestion, events.get(sid, []), stats)
    finally:
        db.close()
    return out


def _outcome(events: list[Event]) -> str | None:
    """One outcome per suggestion, for the user's view: the strongest of its events."""
    accepts = [e for e in events if e.event == "accept"]
    if any(e.partial is None for e in accepts):
        return "accepted"
    if accepts:
        return "partially_accepted"
    return "rejected" if any(e.event == "reject" for e in events) else None


def summarize(path: str | Path) -> dict:
    """What a log holds, per kind, and the examples ``read_telemetry`` makes of it (the same code)."""
    db = connect_ro(Path(path))
    try:
        events = _events(db)
        kinds: dict[str, Counter] = {k: Counter() for k in KINDS}
        notes: Counter = Counter()
        ids = set()
        for sid, kind, prompt, suggestion in db.execute(
            "SELECT id, kind, prompt, suggestion FROM suggestions ORDER BY created"
        ):
            ids.add(sid)
            c = kinds.setdefault(kind, Counter())
            evs = events.get(sid, [])
            c["suggestions"] += 1
            c["shown"] += any(e.event == "show" for e in evs)
            if (outcome := _outcome(evs)) is not None:
                c[outcome] += 1
            found: Counter = Counter()
            for ex in examples_of(kind, prompt, suggestion, evs, found):
                c["desirable" if ex.desirable else "undesirable"] += 1
            c["without_prompts"] += found.pop("telemetry_without_prompts", 0)
            notes.update(found)
    finally:
        db.close()
    fields = ("suggestions", "shown", "accepted", "partially_accepted", "rejected", "without_prompts")
    return {
        "path": str(path),
        "events": sum(len(v) for v in events.values()),
        "events_without_suggestion": sum(len(v) for sid, v in events.items() if sid not in ids),
        "min_events": MIN_EVENTS,
        "kinds": {
            kind: {
                **{f: c[f] for f in fields},
                "examples": {"desirable": c["desirable"], "undesirable": c["undesirable"]},
            }
            for kind, c in kinds.items()
        },
        "notes": dict(sorted(notes.items())),
    }
