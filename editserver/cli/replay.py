"""``editserver replay``: acceptance rates of suggestions replayed on real git history.

Design decisions:
- Every flag is generated from ``ReplayConfig`` (editserver/replay/harness.py) and its point
  ``Options`` (editserver/options.py), so an option is written once, where it is used; the handler
  only checks, runs, and prints the summary. Heavy imports (torch, gitpython) stay inside ``run``.
- ``--shared-edits DIR`` is the reproducible measurement in one flag: evaluate on the held-out
  repositories' record files (``model.train.data.HELD_OUT_REPOS``), tune on the others.
- FIM tuning has its own budget (``--tune-fim``, like ``--tune-points`` for edits) rather than
  sharing ``--max-fim``: what is tuned on and what is reported are different inputs, and either may
  be 0 without the other.
- Next edit is summarised per kind too (in-file, cross-file: editserver/replay/kinds.py): each
  kind's held-out figures under the joint threshold and under the per-kind ones, and each kind's
  tuned threshold or why it kept the joint one, in the same words as the reports.
- Bad input (no such file, no source of suggestions, a resumed log of other settings) exits with a
  one-line error and status 2, never a traceback. Ctrl-C writes what finished and exits 130.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    from editserver.options import add_arguments
    from editserver.replay.harness import ReplayConfig

    p = sub.add_parser(
        "replay",
        help="replay git history against the model and measure acceptance (next edit and FIM)",
        description="Replay commits (a git repository, or --records files) against the model: after each of "
        "a commit's hunks ask for the next edit and label it accepted/rejected/not shown; ask FIM for added "
        "lines; report acceptance, utility and latency, and tune the selectivity thresholds (next edit, FIM).",
    )
    p.add_argument(
        "--shared-edits",
        type=Path,
        default=None,
        metavar="DIR",
        help="evaluate on DIR's held-out repositories and tune on the others (model.train.data.HELD_OUT_REPOS)",
    )
    p.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="do not replay: compare earlier --json results of two or more models on the same points "
        "(acceptance against shown rate) and write the page to --html",
    )
    groups = {"source of suggestions": p.add_argument_group("source of suggestions")}
    add_arguments(p, ReplayConfig, groups)
    p.set_defaults(func=run)


def to_config(args: argparse.Namespace):
    import dataclasses

    from editserver.options import from_args
    from editserver.replay.harness import ReplayConfig

    cfg = from_args(ReplayConfig, args)
    if args.shared_edits is not None:
        from editserver.model.train.data import edit_record_files

        if not args.shared_edits.is_dir():
            raise FileNotFoundError(f"--shared-edits: no such directory: {args.shared_edits}")
        cfg.records += [str(f) for f in edit_record_files(args.shared_edits, held_out=True)]
        cfg.tune_records += [str(f) for f in edit_record_files(args.shared_edits, held_out=False)]
    pts = cfg.points
    for name, v in [(n, getattr(cfg, n)) for n in ("max_points", "max_fim", "tune_points", "tune_fim")] + [
        ("max_steps", pts.max_steps),
        ("history", pts.history),
    ]:
        if v < 0:
            raise ValueError(f"--{name.replace('_', '-')} must not be negative")
    if pts.region_lines < 1 or cfg.batch_size < 1:
        raise ValueError("--region-lines and --batch-size must be at least 1")
    for name in ("threshold", "fim_threshold"):
        v = getattr(cfg, name)
        if v is not None and not 0.0 <= v <= 1.0:
            raise ValueError(f"--{name.replace('_', '-')} must lie in [0, 1]")
    cfg.points = dataclasses.replace(pts, region_above=min(5, pts.region_lines // 3))
    if cfg.in_process and cfg.model is None:
        from editserver.model.infer.checkpoint import DEFAULT_CHECKPOINT

        cfg.model = str(DEFAULT_CHECKPOINT)
    return cfg


def _pct(v) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}%"


def _per_kind_lines(result: dict) -> list[str]:
    """Held out, each kind under the joint threshold and under the per-kind ones (replay/kinds.py)."""
    from editserver.replay.kinds import comparison_rows

    return [
        f"  {name}: {r['requests']} points · shown {r['shown']} · accepted {r['accepted']} · acceptance "
        f"{_pct(r['acceptance_rate'])} · utility {'n/a' if r['utility'] is None else format(r['utility'], '+.3f')}"
        for name, r in comparison_rows(result.get("per_kind") or {}).items()
    ]


def print_summary(result: dict) -> None:
    from editserver.replay.kinds import fmt_threshold, tuning_lines

    s, f = result["summary"], result["fim"]["summary"]
    thr = s["threshold"]
    print(
        f"next edit: {s['requests']} requests · shown {_pct(s['shown_rate'])} · accepted {_pct(s['acceptance_rate'])}"
        f" of shown · exact {_pct(s['exact_match_rate'])} · kept {_pct(s['kept_rate'])} · utility "
        f"{'n/a' if s['utility'] is None else format(s['utility'], '+.3f')} · p50/p95 "
        f"{s['latency_ms']['p50'] or 0:.0f}/{s['latency_ms']['p95'] or 0:.0f} ms · threshold "
        f"{fmt_threshold(thr)} ({s['score_aggregate']})"
    )
    c, q = result.get("cross_file") or {}, result.get("quiet") or {}
    if c.get("requests"):
        print(
            f"cross-file: {c['requests']} requests · shown {c['shown']} · accepted {c['accepted']} · exact "
            f"{c['exact']} · utility {'n/a' if c['utility'] is None else format(c['utility'], '+.3f')}"
        )
    per_kind = _per_kind_lines(result)
    if per_kind:
        print("per kind, the joint threshold against one per kind:")
        print("\n".join(per_kind))
    if q.get("requests"):
        print(
            f"quiet (nothing to do in the region): {q['requests']} requests · false alarms {q['false_alarms']}"
            f" · left silent {_pct(q['silent_rate'])} · silence precision {_pct(q['silence_precision'])}"
        )
    if f["requests"]:
        fthr = f["threshold"]
        print(
            f"fim: {f['requests']} requests · exact {_pct(f['exact_match_rate'])} · accepted prefix "
            f"{f['accepted_prefix_chars']:.1f} chars ({_pct(f['accepted_prefix_fraction'])}) · shown "
            f"{_pct(f['shown_rate'])} · exact {_pct(f['exact_among_shown'])} of shown · utility "
            f"{'n/a' if f['utility'] is None else format(f['utility'], '+.3f')} · threshold "
            f"{'server' if fthr is None else f'{fthr:.2f}'}"
        )
    t = result.get("tuning") or {}
    if "chosen" in t:
        ch = t["chosen"]
        print(
            f"tuned on training repositories, both kinds together: {ch['score_aggregate']} >= "
            f"{ch['selectivity_threshold']:.2f} (utility {ch['utility']:+.3f})"
        )
        for line in tuning_lines(t):
            print(f"  per kind, {line}")
    if "fim" in t:
        ch = t["fim"]["chosen"]
        print(
            f"FIM tuned on training repositories: {t['fim']['score_aggregate']} >= "
            f"{ch['fim_threshold']:.2f} (utility {ch['utility']:+.3f})"
        )
    if t.get("written_to"):
        print(f"thresholds written to {t['written_to']}")
    skipped = {k: v for k, v in result["robustness"].items() if k not in ("commits", "records")}
    if skipped:
        print("skipped: " + ", ".join(f"{k} {v}" for k, v in sorted(skipped.items())))


def compare(args: argparse.Namespace) -> int:
    from editserver.replay.compare import render_comparison

    try:
        if not args.html_out:
            raise ValueError("--compare writes its page to --html FILE")
        results = {}
        for item in args.compare:
            name, sep, path = item.partition("=")
            if not sep or not name or not path:
                raise ValueError(f"--compare takes NAME=FILE, got {item!r}")
            results[name] = json.loads(Path(path).read_text())
        page = render_comparison(results)
    except (ValueError, OSError, KeyError) as e:
        print(f"editserver replay: error: {e}", file=sys.stderr)
        return 2
    Path(args.html_out).write_text(page)
    print(f"wrote {args.html_out}")
    return 0


def run(args: argparse.Namespace) -> int:
    from editserver.replay.harness import run as replay

    if args.compare:
        return compare(args)

    try:
        cfg = to_config(args)
        result = replay(cfg)
    except (ValueError, FileNotFoundError) as e:
        print(f"editserver replay: error: {e}", file=sys.stderr)
        return 2
    print_summary(result)
    if args.json_out:
        print(f"wrote {args.json_out} and {args.html_out or Path(args.json_out).with_suffix('.html')}")
    elif not result["complete"]:
        print(json.dumps(result["summary"]))
    return 0 if result["complete"] else 130
