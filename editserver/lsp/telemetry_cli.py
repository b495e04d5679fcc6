"""``editserver telemetry purge``: delete what the language server recorded (lsp/telemetry.py).

Design decisions:
- It lives beside the telemetry schema, in the LSP's room; ``editserver telemetry`` hands over to
  ``python -m editserver.lsp.telemetry_cli`` (as ``editserver lsp`` does), so the app room never
  imports the LSP (tests/test_layers.py).
- Rows are deleted inside the file, then the file is vacuumed, rather than the file being removed: a
  language server that has it open goes on writing to the same file instead of to an unlinked one.
- ``--prompts-only`` keeps events, sizes and scores (the acceptance figures) and redacts the kept
  text; ``--older-than DAYS`` limits either to older rows. A missing file is nothing to purge
  (status 0); a file that is not a telemetry file is one line and status 2.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import time
from pathlib import Path

from editserver.lsp.settings import default_telemetry_path
from editserver.lsp.telemetry import KEPT, OMITTED


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
    args = p.parse_args(argv)
    path = (args.path or Path(default_telemetry_path())).expanduser()
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
