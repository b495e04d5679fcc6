"""KTO training examples: unpaired desirable and undesirable (prompt, answer) pairs, FIM and next edit.

Two sources, both read as plain files (this package imports neither the replay harness nor the LSP):

- *Replay output* (``editserver replay --json OUT``, or its ``OUT.log.jsonl``): every labelled row.
  A next-edit suggestion the judge accepted is desirable, a rejected one undesirable; the
  developer's own region (the row's ``developer`` field: the region after their hunks) is
  desirable, and where no hunk of theirs touches the region that answer is the region unchanged,
  which is how the model learns to abstain. FIM: an exact completion is desirable, a wrong one
  undesirable, and the developer's rest of line desirable.
- *LSP telemetry* (the SQLite file of lsp/telemetry.py): read by protocol/telemetry_log.py
  (``read_telemetry``, ``count_events`` and ``Example`` are re-exported here), where the rule is
  written down: a suggestion accepted (or the accepted part of a partial accept) is desirable; one
  rejected, or shown and never accepted, undesirable; per region for next edits. It lives in the
  protocol room so that ``editserver telemetry stats`` (in the LSP's room, which may not import
  this package) counts the usable examples with the very code ``align`` reads them with. The LSP
  keeps prompt text only with ``telemetry.keepPrompts``; a suggestion stored as sizes and hashes
  is counted as ``telemetry_without_prompts``, never guessed at, and ``editserver align`` says so.

Design decisions:
- Held-out rows are refused, never filtered quietly: a replay file holding rows of a repository the
  replay reports on (the evaluation rows of a run that had a tuning split, or any row of
  ``model.train.data.HELD_OUT_REPOS``) raises ``HeldOutError`` naming them. A training replay is
  made with ``--max-points 0 --max-fim 0`` so it holds tuning-phase rows of training repositories
  only; a replay of one's own repository (no tuning split) is read whole.
- A FIM answer is the completion's first line (the replay asks single-line completions, stop at a
  newline, and the judge scores that line); the row's suffix starts with the line's end.
- Rows without what an example needs (a FIM row of a replay older than its ``prefix``/``suffix``
  fields, an edit row whose developer hunks reach past the region) are counted, not fatal.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from editserver.model.train.data import HELD_OUT_REPOS
from editserver.protocol.telemetry_log import Example, count_events, read_telemetry

__all__ = ["Example", "HeldOutError", "TooFewEventsError", "count_events", "read_replay", "read_telemetry"]


class HeldOutError(ValueError):
    """A replay file holds rows of a repository the replay reports on."""


class TooFewEventsError(ValueError):
    """A telemetry log too small to align on."""


def _norm_repo(repo: str) -> str:
    return repo.replace("/", "+").lower()


HELD_OUT = {_norm_repo(r) for r in HELD_OUT_REPOS}


def _replay_rows(path: Path) -> tuple[list[dict], dict]:
    """(rows, settings) of a replay ``--json`` document or its ``.log.jsonl``."""
    text = path.read_text(encoding="utf-8")
    if path.name.endswith(".jsonl"):
        rows, settings = [], {}
        for line in text.splitlines():
            try:
                obj = json.loads(line)
            except ValueError:
                continue  # a line cut short by an interrupted replay
            if obj.get("kind") == "header":
                settings = obj.get("settings") or {}
            elif obj.get("kind") in ("edit", "fim"):
                rows.append(obj)
        return rows, settings
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ValueError(f"{path} is not a replay JSON document: {e}") from None
    if not isinstance(doc, dict) or "suggestions" not in doc:
        raise ValueError(f"{path} is not the output of `editserver replay --json` (no 'suggestions')")
    rows = []
    for key in ("tune_suggestions", "tune_fim_completions", "suggestions", "fim_completions"):
        rows += doc.get(key) or []
    return rows, doc.get("settings") or {}


def check_held_out(path: Path, rows: list[dict], settings: dict) -> None:
    """Raise HeldOutError when ``rows`` hold rows of a repository the replay reports on."""
    tuned = bool(settings.get("tune_records"))
    bad = Counter(
        r.get("repo", "?")
        for r in rows
        if (tuned and r.get("phase") == "eval") or _norm_repo(r.get("repo", "")) in HELD_OUT
    )
    if bad:
        names = ", ".join(f"{repo} ({n} rows)" for repo, n in sorted(bad.items()))
        raise HeldOutError(
            f"{path} holds rows of held-out repositories that replay reports on: {names}. align never "
            "trains on them; make the training replay on training repositories only, e.g. `editserver "
            "replay --shared-edits DIR --max-points 0 --max-fim 0 --tune-points N --tune-fim M --json OUT`"
        )


def _first_line(text: str) -> str:
    return text.split("\n", 1)[0]


def _developer(row: dict) -> str | None:
    """The region as the developer left it: the row's field, else cut from its judged window."""
    if "developer" in row:
        return row["developer"]
    window, expected, region = row.get("window"), row.get("expected"), row.get("region")
    if window is None or expected is None or region is None or region not in window:
        return None
    head, tail = window.split(region, 1)
    if expected.startswith(head) and expected.endswith(tail) and len(expected) >= len(head) + len(tail):
        return expected[len(head) : len(expected) - len(tail)]
    return None


def _edit_examples(row: dict, stats: Counter) -> list[Example]:
    out: list[Example] = []
    prompt, suggestion, label = row.get("prompt"), row.get("suggestion"), row.get("label")
    if not prompt:
        stats["edit_without_prompt"] += 1
        return out
    if label in ("accepted", "rejected") and suggestion is not None:
        out.append(Example("edit", label == "accepted", suggestion, "replay:suggestion", prompt=prompt))
    dev = _developer(row)
    if dev is None:
        stats["edit_developer_outside_region"] += 1
    elif dev == row.get("region"):
        out.append(Example("edit", True, dev, "replay:unchanged", prompt=prompt))
    elif not (label == "accepted" and suggestion == dev):
        out.append(Example("edit", True, dev, "replay:developer", prompt=prompt))
    return out


def _fim_examples(row: dict, stats: Counter) -> list[Example]:
    if "prefix" not in row or "suffix" not in row:
        stats["fim_without_prefix"] += 1
        return []
    pre, suf, label = row["prefix"], row["suffix"], row.get("label")
    completion = _first_line(row.get("completion") or "")
    out = []
    if label in ("accepted", "rejected"):
        out.append(
            Example("fim", label == "accepted", completion, "replay:suggestion", prefix=pre, suffix=suf)
        )
    expected = row.get("expected")
    if expected and not (label == "accepted" and completion.rstrip() == expected.rstrip()):
        out.append(Example("fim", True, expected, "replay:developer", prefix=pre, suffix=suf))
    return out


def read_replay(path: str | Path, stats: Counter | None = None) -> list[Example]:
    """Examples from one replay output (``--json`` document or ``.log.jsonl``); HeldOutError if it
    holds held-out rows."""
    path = Path(path)
    stats = stats if stats is not None else Counter()
    if not path.is_file():
        raise FileNotFoundError(f"no such replay output: {path}")
    rows, settings = _replay_rows(path)
    check_held_out(path, rows, settings)
    out: list[Example] = []
    for r in rows:
        if r.get("error"):
            stats["replay_error_row"] += 1
        elif r.get("kind") == "edit":
            out += _edit_examples(r, stats)
        elif r.get("kind") == "fim":
            out += _fim_examples(r, stats)
    stats["replay_rows"] += len(rows)
    return out
