"""``editserver replay``: acceptance rates of suggestions replayed on real git history.

Design decisions:
- Options are parsed once into ``ReplayConfig`` (editserver/replay/harness.py); the handler only
  converts, runs, and prints the summary. Heavy imports (torch, gitpython) stay inside ``run``.
- ``--shared-edits DIR`` is the reproducible measurement in one flag: evaluate on the held-out
  repositories' record files (``model.train.data.HELD_OUT_REPOS``), tune on the others.
- FIM tuning has its own budget (``--tune-fim``, like ``--tune-points`` for edits) rather than
  sharing ``--max-fim``: what is tuned on and what is reported are different inputs, and either may
  be 0 without the other.
- Bad input (no such file, no source of suggestions, a resumed log of other settings) exits with a
  one-line error and status 2, never a traceback. Ctrl-C writes what finished and exits 130.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay",
        help="replay git history against the model and measure acceptance (next edit and FIM)",
        description="Replay commits (a git repository, or --records files) against the model: after each of "
        "a commit's hunks ask for the next edit and label it accepted/rejected/not shown; ask FIM for added "
        "lines; report acceptance, utility and latency, and tune the selectivity thresholds (next edit, FIM).",
    )
    p.add_argument("repos", nargs="*", metavar="REPO_PATH", help="git repositories to mine (gitpython)")
    p.add_argument(
        "--records",
        nargs="+",
        default=[],
        metavar="FILE",
        help="commit-edit record files (*.jsonl.xz) or directories of them to evaluate on",
    )
    p.add_argument(
        "--tune-records",
        nargs="+",
        default=[],
        metavar="FILE",
        help="record files of *training* repositories to choose the aggregate and threshold on",
    )
    p.add_argument(
        "--shared-edits",
        type=Path,
        default=None,
        metavar="DIR",
        help="evaluate on DIR's held-out repositories and tune on the others (model.train.data.HELD_OUT_REPOS)",
    )
    src = p.add_argument_group("source of suggestions")
    src.add_argument("--server-url", default=None, help="a running editserver (POST /v1/edit/completions)")
    src.add_argument("--in-process", action="store_true", help="call model.infer.engine.Engine directly")
    src.add_argument(
        "--model", default=None, metavar="DIR", help="checkpoint directory (default: the shipped one)"
    )
    src.add_argument("--device", default="cpu")
    src.add_argument(
        "--effort",
        choices=["instant", "low", "medium", "high"],
        default=None,
        help="sampler effort (default: the checkpoint's)",
    )
    src.add_argument(
        "--batch-size",
        type=int,
        default=1,
        help="requests in flight together: one decoded batch in-process, concurrent over HTTP (default 1)",
    )
    walk = p.add_argument_group("what to replay")
    walk.add_argument(
        "--max-points", type=int, default=300, help="next-edit requests evaluated (default 300)"
    )
    walk.add_argument(
        "--max-fim", type=int, default=200, help="FIM requests evaluated (default 200; 0 = none)"
    )
    walk.add_argument(
        "--tune-points", type=int, default=300, help="next-edit requests to tune on (default 300)"
    )
    walk.add_argument(
        "--tune-fim",
        type=int,
        default=200,
        help="FIM requests to tune the FIM threshold on (default 200; 0 = leave it untuned)",
    )
    walk.add_argument(
        "--max-commits", type=int, default=500, help="repositories: newest N non-merge commits (default 500)"
    )
    walk.add_argument(
        "--rev", default=None, help="repositories: revision or range, e.g. v1.0..main (default HEAD)"
    )
    walk.add_argument(
        "--sample", type=int, default=None, help="repositories: a seeded sample of N of those commits"
    )
    walk.add_argument(
        "--max-steps", type=int, default=4, help="steps (k values) kept per changed file (default 4)"
    )
    walk.add_argument(
        "--no-final",
        action="store_true",
        help="do not ask after a file's last hunk (when nothing is left to do)",
    )
    walk.add_argument(
        "--region-lines", type=int, default=16, help="editable region size in lines (default 16)"
    )
    walk.add_argument(
        "--context-lines",
        type=int,
        default=20,
        help="file lines sent above and below the region (default 20)",
    )
    walk.add_argument("--history", type=int, default=3, help="edit-history diffs in the prompt (default 3)")
    walk.add_argument("--seed", type=int, default=0)
    thr = p.add_argument_group("selectivity threshold")
    thr.add_argument("--threshold", type=float, default=None, help="evaluate with this threshold instead")
    thr.add_argument(
        "--aggregate", default=None, help="score aggregate for --threshold (model/infer/scoring.py)"
    )
    thr.add_argument(
        "--fim-threshold", type=float, default=None, help="evaluate FIM with this threshold instead"
    )
    thr.add_argument(
        "--write-config",
        action="store_true",
        help="write the tuned thresholds (next edit, FIM) and aggregate into --model DIR/config.json",
    )
    out = p.add_argument_group("output")
    out.add_argument(
        "--json",
        dest="json_out",
        default=None,
        metavar="OUT",
        help="write the result (summary, fim, every labelled suggestion, report) to OUT; "
        "OUT.html holds the report, OUT.log.jsonl the finished requests",
    )
    out.add_argument(
        "--html", dest="html_out", default=None, metavar="FILE", help="report path (default OUT.html)"
    )
    out.add_argument(
        "--markdown", dest="markdown_out", default=None, metavar="FILE", help="headline tables as Markdown"
    )
    out.add_argument(
        "--resume", action="store_true", help="continue from OUT.log.jsonl of an interrupted run"
    )
    out.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def to_config(args: argparse.Namespace):
    from editserver.replay.harness import ReplayConfig
    from editserver.replay.points import Options

    records, tune_records = list(args.records), list(args.tune_records)
    if args.shared_edits is not None:
        from model.train.data import edit_record_files

        if not args.shared_edits.is_dir():
            raise FileNotFoundError(f"--shared-edits: no such directory: {args.shared_edits}")
        records += [str(f) for f in edit_record_files(args.shared_edits, held_out=True)]
        tune_records += [str(f) for f in edit_record_files(args.shared_edits, held_out=False)]
    for name in ("max_points", "max_fim", "tune_points", "tune_fim", "max_steps", "history"):
        if getattr(args, name) < 0:
            raise ValueError(f"--{name.replace('_', '-')} must not be negative")
    if args.region_lines < 1 or args.batch_size < 1:
        raise ValueError("--region-lines and --batch-size must be at least 1")
    for name in ("threshold", "fim_threshold"):
        v = getattr(args, name)
        if v is not None and not 0.0 <= v <= 1.0:
            raise ValueError(f"--{name.replace('_', '-')} must lie in [0, 1]")
    model = args.model
    if args.in_process and model is None:
        from model.infer.checkpoint import DEFAULT_CHECKPOINT

        model = str(DEFAULT_CHECKPOINT)
    return ReplayConfig(
        repos=list(args.repos),
        records=records,
        tune_records=tune_records,
        server_url=args.server_url,
        model=model,
        in_process=args.in_process,
        device=args.device,
        effort=args.effort,
        batch_size=args.batch_size,
        max_points=args.max_points,
        max_fim=args.max_fim,
        tune_points=args.tune_points,
        tune_fim=args.tune_fim,
        max_commits=args.max_commits,
        rev=args.rev,
        sample=args.sample,
        threshold=args.threshold,
        aggregate=args.aggregate,
        fim_threshold=args.fim_threshold,
        write_config=args.write_config,
        json_out=args.json_out,
        html_out=args.html_out,
        markdown_out=args.markdown_out,
        resume=args.resume,
        progress=not args.no_progress,
        points=Options(
            region_lines=args.region_lines,
            region_above=min(5, args.region_lines // 3),
            context_lines=args.context_lines,
            history=args.history,
            max_steps=args.max_steps,
            include_final=not args.no_final,
            seed=args.seed,
        ),
    )


def _pct(v) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}%"


def print_summary(result: dict) -> None:
    s, f = result["summary"], result["fim"]["summary"]
    thr = s["threshold"]
    print(
        f"next edit: {s['requests']} requests · shown {_pct(s['shown_rate'])} · accepted {_pct(s['acceptance_rate'])}"
        f" of shown · exact {_pct(s['exact_match_rate'])} · kept {_pct(s['kept_rate'])} · utility "
        f"{'n/a' if s['utility'] is None else format(s['utility'], '+.3f')} · p50/p95 "
        f"{s['latency_ms']['p50'] or 0:.0f}/{s['latency_ms']['p95'] or 0:.0f} ms · threshold "
        f"{'server' if thr is None else f'{thr:.2f}'} ({s['score_aggregate']})"
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
            f"tuned on training repositories: {ch['score_aggregate']} >= {ch['selectivity_threshold']:.2f} "
            f"(utility {ch['utility']:+.3f})"
        )
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


def run(args: argparse.Namespace) -> int:
    from editserver.replay.harness import run as replay

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
