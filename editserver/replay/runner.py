"""Run a replay: ask for every point, label the answers, log them as they finish, sum them up.

Design decisions:
- Every finished request is appended to a JSON-lines log (``OUT.log.jsonl`` next to ``--json OUT``)
  and flushed before the next one starts, so an interrupted run loses nothing that finished. With
  ``resume`` the log is read back and the points it already holds are not asked again; its header
  holds a fingerprint of the settings that decide the points, and a log written with different
  settings is refused rather than mixed in.
- Ctrl-C stops asking, and the summary, JSON and report are still written from what finished
  (marked ``"complete": false``).
- Two phases share one runner: ``tune`` (training repositories: choose the aggregate and the edit
  and FIM thresholds) and ``eval`` (what is reported). Tuning never sees evaluation rows.
- A row carries the prompt, the region, the suggestion and its label: the JSON output doubles as
  KTO training data (desirable = accepted, undesirable = rejected; ``editserver align``). An edit
  row also carries ``developer``, the region as the developer left it (None when their hunks reach
  past it), and a FIM row its ``prefix`` and ``suffix``, so the developer's own answer is training
  data too.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from editserver.protocol.postprocess import trim
from editserver.replay.judge import _apply, judge_edit, judge_fim, overlapping
from editserver.replay.points import EditPoint, FimPoint
from editserver.replay.suggest import Suggester


def fingerprint(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


class RowLog:
    """Append-only JSON lines; ``rows`` holds what an earlier run of the same settings finished."""

    def __init__(self, path: Path | None, settings: dict, resume: bool):
        self.path = path
        self.rows: dict[tuple[str, str, str], dict] = {}
        self.fh = None
        if path is None:
            return
        fp = fingerprint(settings)
        if resume and path.exists():
            with path.open(encoding="utf-8") as fh:
                lines = fh.read().splitlines()
            if lines:
                header = json.loads(lines[0])
                if header.get("fingerprint") != fp:
                    raise ValueError(
                        f"{path} was written with different settings; drop --resume or use another --json path"
                    )
            for line in lines[1:]:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue  # a line cut short by the interruption
                self.rows[(row["phase"], row["kind"], row["id"])] = row
            self.fh = path.open("a", encoding="utf-8")
            if not lines:
                self._write({"kind": "header", "fingerprint": fp, "settings": settings})
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.fh = path.open("w", encoding="utf-8")
            self._write({"kind": "header", "fingerprint": fp, "settings": settings})

    def _write(self, obj: dict) -> None:
        if self.fh is not None:
            self.fh.write(json.dumps(obj) + "\n")
            self.fh.flush()

    def add(self, row: dict) -> None:
        self.rows[(row["phase"], row["kind"], row["id"])] = row
        self._write(row)

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()


def developer_region(p: EditPoint) -> str | None:
    """The region after the developer's remaining hunks that touch it (the region itself when none
    does); None when one of them reaches outside it, so no rewrite of the region equals it."""
    touched = overlapping(p)
    if any(s < p.lo or s + n > p.hi for s, n, _ in touched):
        return None
    return "".join(_apply(p.lines[p.lo : p.hi], touched, p.lo))


def edit_row(phase: str, p: EditPoint, ans) -> dict:
    v = judge_edit(p, ans.text) if ans.error is None else None
    return {
        "kind": "edit",
        "phase": phase,
        "id": p.id,
        "repo": p.repo,
        "sha": p.sha,
        "path": p.path,
        "lang": p.lang,
        "where": p.where,
        "k": p.k,
        "n_hunks": p.n_hunks,
        "remaining": len(p.remaining),
        "reachable": bool(overlapping(p)),  # a remaining hunk lies in the region: a perfect model could win
        "label": v.label if v else "error",
        "exact": bool(v and v.exact),
        "kept": v.kept if v else 0.0,
        "score": ans.score,
        "scores": ans.scores,
        "above_threshold": ans.above_threshold,
        "latency_ms": ans.latency_ms,
        "error": ans.error,
        "prompt": p.prompt,
        "region": p.region,
        "suggestion": ans.text,
        "window": v.window if v else None,
        "expected": v.expected if v else None,
        "developer": developer_region(p),
    }


def fim_row(phase: str, p: FimPoint, ans) -> dict:
    v = judge_fim(p.expected, ans.text)
    # the same answer as /v1/fim/completions sends it (protocol/postprocess.py)
    pp = judge_fim(p.expected, trim(ans.text, p.prefix, p.suffix).text if ans.text is not None else None)
    ok = ans.error is None
    return {
        "kind": "fim",
        "phase": phase,
        "id": p.id,
        "repo": p.repo,
        "sha": p.sha,
        "path": p.path,
        "lang": p.lang,
        "position": p.position,
        "expected": p.expected,
        "completion": ans.text,
        "label": v.label if ok else "error",
        "exact": v.exact if ok else False,
        "exact_postprocessed": pp.exact if ok else False,
        "prefix_chars": v.prefix_chars if ok else 0,
        "prefix_fraction": v.prefix_fraction if ok else 0.0,
        "score": ans.score,
        "scores": ans.scores,
        "above_threshold": ans.above_threshold,
        "latency_ms": ans.latency_ms,
        "error": ans.error,
        "prefix": p.prefix,
        "suffix": p.suffix,
    }


@dataclass
class PhaseResult:
    edits: list[dict] = field(default_factory=list)
    fims: list[dict] = field(default_factory=list)
    complete: bool = True


def run_phase(
    phase: str,
    edit_points: list[EditPoint],
    fim_points: list[FimPoint],
    suggester: Suggester,
    log: RowLog,
    batch_size: int = 1,
    progress: bool = True,
    on_row: Callable[[dict], None] | None = None,
) -> PhaseResult:
    from tqdm import tqdm

    res = PhaseResult()
    bar = tqdm(
        total=len(edit_points) + len(fim_points),
        desc=f"replay {phase}",
        unit="req",
        disable=not progress,
        dynamic_ncols=True,
    )
    try:
        for kind, points, ask, make, sink in (
            ("edit", edit_points, suggester.edit, edit_row, res.edits),
            ("fim", fim_points, suggester.fim, fim_row, res.fims),
        ):
            todo = []
            for p in points:
                old = log.rows.get((phase, kind, p.id))
                if old is not None:
                    sink.append(old)
                    bar.update(1)
                else:
                    todo.append(p)
            for i in range(0, len(todo), batch_size):
                chunk = todo[i : i + batch_size]
                for p, ans in zip(chunk, ask(chunk)):
                    row = make(phase, p, ans)
                    log.add(row)
                    sink.append(row)
                    if on_row is not None:
                        on_row(row)
                bar.update(len(chunk))
                if kind == "edit":
                    acc = sum(r["label"] == "accepted" for r in sink)
                    bar.set_postfix(
                        accepted=acc, proposed=sum(r["label"] in ("accepted", "rejected") for r in sink)
                    )
    except KeyboardInterrupt:
        res.complete = False
    finally:
        bar.close()
    return res
