"""``editserver telemetry purge`` deletes what the language server recorded (lsp/telemetry.py);
``editserver telemetry stats`` says what it holds and how much of it ``editserver align`` can use.

Floor 2 (see lsp/__init__.py): over lsp/settings.py; a command of its own, never imported by the server.

Design decisions:
- It lives beside the telemetry writer, in the LSP's room; ``editserver telemetry`` hands over to
  ``python -m editserver.lsp.telemetry_cli`` (as ``editserver lsp`` does), so the app room never
  imports the LSP (tests/test_layers.py).
- Rows are deleted inside the file, then the file is vacuumed, rather than the file being removed: a
  language server that has it open goes on writing to the same file instead of to an unlinked one.
- ``--prompts-only`` keeps events, sizes and scores (the acceptance figures) and redacts the kept
  text; ``--older-than DAYS`` limits either to older rows. A missing file is nothing to purge
  (status 0); a file that is not a telemetry file is one line and status 2.
- ``stats`` counts per kind (fim, next_edit) the suggestions and what the user did with them (each
  suggestion counted once, by its strongest event: accepted, else partially accepted, else
  rejected), and the examples ``align`` would read, by ``protocol.telemetry_log.summarize``, which
  runs align's own reader: this room may not import ``editserver.model`` (tests/test_layers.py),
  so the reader lives in the protocol room both may import, and the count cannot drift from what
  align trains on. Suggestions stored without their prompts are counted apart, with the setting
  that keeps them. A missing file is one line, status 0 (as for purge); ``--json`` then prints
  ``{"path", "exists": false}`` so a script always reads JSON.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
from pathlib import Path

from editserver.lsp.settings import default_telemetry_path
from editserver.protocol.telemetry_log import KEEP_PROMPTS_HINT, KEPT, OMITTED, summarize

ROWS = (  # stats rows: (label, key of a kind's summary)
    ("suggestions", "suggestions"),
    ("shown", "shown"),
    ("accepted", "accepted"),
    ("partially accepted", "partially_accepted"),
    ("rejected", "rejected"),
    ("stored without prompts", "without_prompts"),
    ("align examples: desirable", "desirable"),
    ("align examples: undesirable", "undesirable"),
)


def purge(path: Path, older_than_days: float | None = None, prompts_only: bool = False) -> tuple[int, int]:
    """(suggestions, events) deleted, or redacted with ``prompts_only``."""
    cutoff = time.time() - older_than_days * 86400 if older_than_days is not None else float("inf")
    db = sqlite3.connect(str(path))
    try:
        db.execute("SELECT 1 FROM suggestions LIMIT 1")
        db.execute("SELECT 1 FROM events LIMIT 1")
        with db:
            if prompts_only:
                n = db.execute(
                    f"UPDATE suggestions SET prompt=?, suggestion=? WHERE created < ? AND {KEPT}",
                    (OMITTED, OMITTED, cutoff),
                ).rowcount
                m = db.execute(
                    "UPDATE events SET accepted_text=NULL WHERE created < ? AND accepted_text IS NOT NULL",
                    (cutoff,),
                ).rowcount
            else:
                n = db.execute("DELETE FROM suggestions WHERE created < ?", (cutoff,)).rowcount
                m = db.execute("DELETE FROM events WHERE created < ?", (cutoff,)).rowcount
        db.execute("VACUUM")  # the deleted text leaves the file, not just the index
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    return n, m


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def report(summary: dict) -> list[str]:
    """``stats``' text: a table per kind, then what align would make of it."""
    kinds, events = summary["kinds"], summary["events"]
    cell = {k: {**v, **v["examples"]} for k, v in kinds.items()}
    width = max(len(label) for label, _ in ROWS)
    lines = [f"{summary['path']}: {_n(events, 'event')}", " " * width + "".join(f"{k:>12}" for k in kinds)]
    lines += [f"{label:<{width}}" + "".join(f"{cell[k][key]:>12}" for k in kinds) for label, key in ROWS]
    usable = sum(v["desirable"] + v["undesirable"] for v in cell.values())
    line = f"editserver align can use {_n(usable, 'example')} of it"
    if events < summary["min_events"]:
        line += f"; it refuses a log of fewer than {summary['min_events']} events (--min-events lowers that)"
    lines.append(line)
    bare = sum(v["without_prompts"] for v in kinds.values())
    if bare:
        lines.append(
            f"{_n(bare, 'suggestion')} with events kept no prompt (sizes and hashes only) and cannot become "
            f"examples; to keep the prompts of later ones, set {KEEP_PROMPTS_HINT}"
        )
    if orphans := summary["events_without_suggestion"]:
        lines.append(
            f"{_n(orphans, 'event')} name suggestions the log does not hold (purged, or recorded under "
            "another id) and cannot become examples"
        )
    return lines


def stats(path: Path, as_json: bool) -> int:
    if not path.is_file():
        if as_json:
            print(json.dumps({"path": str(path), "exists": False}))
        print(f"no telemetry file at {path}", file=sys.stderr if as_json else sys.stdout)
        return 0
    try:
        summary = summarize(path)
    except (ValueError, sqlite3.DatabaseError) as e:
        print(f"editserver telemetry stats: {e}", file=sys.stderr)
        return 2
    print(json.dumps({**summary, "exists": True}, indent=2) if as_json else "\n".join(report(summary)))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="editserver telemetry", description="the language server's local telemetry"
    )
    sub = p.add_subparsers(dest="action", required=True)
    q = sub.add_parser("purge", help="delete recorded suggestions and events")
    q.add_argument(
        "--path", type=Path, default=None, help=f"telemetry file (default: {default_telemetry_path()})"
    )
    q.add_argument("--older-than", type=float, default=None, metavar="DAYS", help="only rows older than this")
    q.add_argument(
        "--prompts-only", action="store_true", help="keep events and scores; redact the stored text"
    )
    st = sub.add_parser("stats", help="what the file holds, and how much of it `editserver align` can use")
    st.add_argument(
        "--path", type=Path, default=None, help=f"telemetry file (default: {default_telemetry_path()})"
    )
    st.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = p.parse_args(argv)
    path = (args.path or Path(default_telemetry_path())).expanduser()
    if args.action == "stats":
        return stats(path, args.json)
    if args.older_than is not None and not args.older_than >= 0:
        print("editserver telemetry purge: --older-than must be a number of days >= 0", file=sys.stderr)
        return 2
    if not path.is_file():
        print(f"nothing to purge: no telemetry file at {path}")
        return 0
    try:
        n, m = purge(path, args.older_than, args.prompts_only)
    except sqlite3.DatabaseError as e:
        print(
            f"editserver telemetry purge: {path} is not an editserver telemetry file ({e})", file=sys.stderr
        )
        return 2
    verb = "redacted the text of" if args.prompts_only else "deleted"
    print(f"{verb} {n} suggestions and {m} events in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
