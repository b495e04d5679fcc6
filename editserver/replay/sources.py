"""Where records come from: shared record files (``*.jsonl.xz``) or a git repository's history.

Design decisions:
- Record files are sampled, not read front to back: each file's usable records (two to
  ``max_hunks`` hunks) are shuffled with the seed and read in that order, and files take turns
  (round robin with an equal quota of points each), so a small budget still covers every
  repository. A file is read twice (index, then the chosen lines): memory stays small however many
  files are named.
- A repository is mined through ``model.train.gitmine.mine_repo`` (range, last N, or seeded sample of
  commits); its skip reasons land in the same robustness counter as the replay's own.
- Both produce ``(edit points, FIM points)`` lists, so the runner knows its total for the progress
  bar before the first request.
"""

from __future__ import annotations

import json
import lzma
import math
import random
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from editserver.replay.points import EditPoint, FimPoint, Options, edit_points, fim_points


@dataclass
class Budget:
    max_points: int = 300  # next-edit requests
    max_fim: int = 200  # FIM requests


def record_files(paths: Iterable[str | Path]) -> list[Path]:
    """Files as named; a directory stands for the ``*.jsonl.xz`` files inside it."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(p.glob("*.jsonl.xz"))
        elif p.is_file():
            out.append(p)
        else:
            raise FileNotFoundError(f"no such record file or directory: {p}")
    return out


def _open(path: Path):
    if path.suffix == ".xz":
        return lzma.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def _sampled_records(path: Path, want: int, opt: Options, stats: Counter) -> list[dict]:
    usable: list[int] = []
    with _open(path) as fh:
        for i, line in enumerate(fh):
            try:
                n = len(json.loads(line).get("hunks") or [])
            except (ValueError, AttributeError):
                stats["bad_record"] += 1
                continue
            if 2 <= n <= opt.max_hunks:
                usable.append(i)
            else:
                stats["single_hunk" if n == 1 else "no_hunks" if n == 0 else "too_many_hunks"] += 1
    random.Random(f"{opt.seed}:{path.name}").shuffle(usable)
    chosen = {i: rank for rank, i in enumerate(usable[:want])}
    picked: list[tuple[int, dict]] = []
    with _open(path) as fh:
        for i, line in enumerate(fh):
            if i in chosen:
                picked.append((chosen[i], json.loads(line)))
    return [r for _, r in sorted(picked, key=lambda x: x[0])]


def _take(
    records: Iterator[dict],
    quota_edit: int,
    quota_fim: int,
    opt: Options,
    stats: Counter,
) -> tuple[list[EditPoint], list[FimPoint]]:
    edits: list[EditPoint] = []
    fims: list[FimPoint] = []
    for rec in records:
        if len(edits) >= quota_edit and len(fims) >= quota_fim:
            break
        try:
            if len(edits) < quota_edit:
                edits += list(edit_points(rec, opt, stats))[: quota_edit - len(edits)]
            if len(fims) < quota_fim:
                fims += list(fim_points(rec, opt, stats))[: quota_fim - len(fims)]
        except (KeyError, TypeError, ValueError, IndexError):
            stats["bad_record"] += 1  # a malformed record is counted, never fatal
    return edits, fims


def from_record_files(
    files: list[Path],
    budget: Budget,
    opt: Options,
    stats: Counter,
) -> tuple[list[EditPoint], list[FimPoint]]:
    if not files:
        return [], []
    q_edit = math.ceil(budget.max_points / len(files))
    q_fim = math.ceil(budget.max_fim / len(files))
    per_file = []
    for f in files:
        # each record gives at least one point when usable; a margin covers skipped ones
        recs = _sampled_records(f, q_edit + q_fim + 16, opt, stats)
        per_file.append(_take(iter(recs), q_edit, q_fim, opt, stats))
    edits = _round_robin([e for e, _ in per_file], budget.max_points)
    fims = _round_robin([f for _, f in per_file], budget.max_fim)
    return edits, fims


def _round_robin(lists: list[list], limit: int) -> list:
    out: list = []
    for i in range(max((len(x) for x in lists), default=0)):
        for x in lists:
            if i < len(x) and len(out) < limit:
                out.append(x[i])
    return out


def from_repository(
    path: str | Path,
    budget: Budget,
    opt: Options,
    stats: Counter,
    *,
    max_commits: int | None,
    rev: str | None,
    sample: int | None,
) -> tuple[list[EditPoint], list[FimPoint]]:
    from editserver.model.train.gitmine import mine_repo

    records = mine_repo(path, max_commits=max_commits, rev=rev, sample=sample, seed=opt.seed, stats=stats)
    return _take(records, budget.max_points, budget.max_fim, opt, stats)


def cross_from_record_files(files: list[Path], limit: int, opt: Options, stats: Counter) -> list[EditPoint]:
    """Cross-file points (replay/crossfile.py), at most ``limit``, round robin over the files."""
    from editserver.replay.crossfile import cross_file_points

    if not files or limit <= 0:
        return []
    per = math.ceil(limit / len(files))
    lists = []
    for f in files:
        with _open(f) as fh:
            recs = []
            for line in fh:
                try:
                    recs.append(json.loads(line))
                except ValueError:
                    stats["bad_record"] += 1
        lists.append(cross_file_points(recs, opt, stats, per))
    return _round_robin(lists, limit)
