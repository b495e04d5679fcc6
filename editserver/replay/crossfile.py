"""Cross-file replay points, and the quiet case: does a change reach the other files, does the model
stay silent when nothing should follow.

Design decisions:
- Records are per file per commit; a commit's records are grouped by ``sha``. A commit yields
  points when it takes one identifier away in several files (the hunks' old lines have it, their
  new lines lost it: a rename, a changed call), as a change that propagates across files does.
- The source file is the one whose hunks touch a definition line of that identifier (else the
  first in path order); its whole change is the edit history, as the LSP sends it after the user
  edited that file. Every other file that lost the identifier is a point: the file as it was
  (nothing applied yet), the region ``region_lines`` around the identifier's first use (where the
  LSP's index would send the cursor), every hunk of that file still to do. The judge is the
  in-file one (``judge_edit``), so accepted / exact mean the same in both.
- At most ``per_commit`` targets per commit and ``limit`` points in all (round robin over
  files), so one sweeping commit does not dominate.
- The quiet case (``quiet_summary``): points where no remaining hunk touches the region, either
  because the file is done (its last hunk applied) or because what follows is elsewhere; a shown
  suggestion there is a false alarm. Reported beside acceptance: the share of quiet points left
  silent, and the precision of silence (of all points left silent, the share that were quiet).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable

from editserver.protocol.prompt import EditPrompt, build_prompt, unified_diff
from editserver.replay import metrics
from editserver.replay.points import _DEF, EditPoint, Options, parse_hunks

_IDENT = re.compile(r"[A-Za-z_$][\w$]*")


def _after(rec: dict) -> str:
    lines = rec["before"].splitlines(keepends=True)
    for start, length, new in sorted(rec["hunks"], key=lambda h: -h[0]):
        lines[start : start + length] = new.splitlines(keepends=True)
    return "".join(lines)


def _lost(rec: dict) -> set[str]:
    """Identifiers the record's hunks took away from the lines they replaced (and put nowhere)."""
    before = rec["before"].splitlines(keepends=True)
    old: Counter = Counter()
    new: Counter = Counter()
    for s, n, text in rec["hunks"]:
        old.update(_IDENT.findall("".join(before[s : s + n])))
        new.update(_IDENT.findall(text))
    return {k for k in old if k not in new and len(k) > 2}


def _defines(rec: dict, name: str) -> bool:
    before = rec["before"].splitlines()
    return any(
        (m := _DEF.match(before[i])) is not None and m.group(1) == name
        for s, n, _ in rec["hunks"]
        for i in range(s, min(s + n, len(before)))
    )


def _first_use(lines: list[str], name: str) -> int | None:
    pat = re.compile(rf"(?<![\w$]){re.escape(name)}(?![\w$])")
    return next((i for i, line in enumerate(lines) if pat.search(line)), None)


def commit_points(recs: list[dict], opt: Options, stats: Counter, per_commit: int = 3) -> list[EditPoint]:
    """Cross-file points of one commit (its records, one per file)."""
    recs = sorted(recs, key=lambda r: r["path"])
    lost = Counter(n for r in recs for n in _lost(r))
    shared = sorted(n for n, c in lost.items() if c >= 2)
    if not shared:
        return []
    name = shared[0]
    changed = [r for r in recs if name in _lost(r)]
    source = next((r for r in changed if _defines(r, name)), changed[0])
    history = unified_diff(source["path"], source["before"], _after(source))
    out = []
    for rec in [r for r in changed if r is not source][:per_commit]:
        lines = rec["before"].splitlines(keepends=True)
        line = _first_use(lines, name)
        hunks = parse_hunks(rec)
        if line is None or not hunks or len(hunks) > opt.max_hunks:
            stats["cross_file_skipped"] += 1
            continue
        hi = min(len(lines), max(0, line - opt.region_above) + opt.region_lines)
        lo = max(0, hi - opt.region_lines)
        region = "".join(lines[lo:hi])
        if len(region) > opt.max_region_chars:
            stats["region_too_long"] += 1
            continue
        cursor = sum(len(x) for x in lines[lo:line]) + lines[line].find(name)
        prompt = EditPrompt(
            file_path=rec["path"],
            above="".join(lines[max(0, lo - opt.context_lines) : lo]),
            region=region,
            cursor=cursor,
            below="".join(lines[hi : hi + opt.context_lines]),
            history=history,
        )
        out.append(
            EditPoint(
                id=f"{rec['repo']}@{rec['sha'][:12]}:{rec['path']}#x",
                repo=rec["repo"],
                sha=rec["sha"],
                path=rec["path"],
                lang=rec["lang"],
                k=0,
                n_hunks=len(hunks),
                lines=lines,
                remaining=[(h.start, h.length, h.new_text) for h in hunks],
                lo=lo,
                hi=hi,
                cursor=cursor,
                prompt=build_prompt(prompt),
                last_edit=(line, 0),
                where="cross_file",
            )
        )
    return out


def cross_file_points(records: Iterable[dict], opt: Options, stats: Counter, limit: int) -> list[EditPoint]:
    """Points from every commit of ``records`` that changes one identifier in several files."""
    by_sha: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        if r.get("hunks") and r.get("before") is not None:
            by_sha[r["sha"]].append(r)
    out: list[EditPoint] = []
    for sha in sorted(by_sha):
        if len(by_sha[sha]) < 2:
            continue
        try:
            out += commit_points(by_sha[sha], opt, stats)
        except (KeyError, TypeError, ValueError, IndexError):
            stats["bad_record"] += 1
        if len(out) >= limit:
            break
    stats["cross_file_points"] += min(len(out), limit)
    return out[:limit]


def quiet(row: dict) -> bool:
    """Nothing the developer did next touches the region: the right answer is no suggestion."""
    return not row.get("reachable")


def quiet_summary(rows: list[dict], threshold: float | None, aggregate: str | None) -> dict:
    q = [r for r in rows if quiet(r) and not r.get("error")]
    silent = [r for r in rows if not r.get("error") and not metrics.is_shown(r, threshold, aggregate)]
    false_alarms = sum(metrics.is_shown(r, threshold, aggregate) for r in q)
    right = sum(1 for r in silent if quiet(r))
    return {
        "requests": len(q),
        "false_alarms": false_alarms,
        "silent_rate": (len(q) - false_alarms) / len(q) if q else None,
        "silence_precision": right / len(silent) if silent else None,
    }
