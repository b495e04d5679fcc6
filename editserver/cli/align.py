"""``editserver align``: KTO alignment from accept/reject signals (model/train/kto.py, docs/align.md).

Design decisions:
- Two sources, each repeatable: ``--replay FILE`` (``editserver replay --json`` output of training
  repositories) and ``--telemetry FILE`` (the LSP's SQLite log). Held-out replay rows and a
  telemetry log below ``--min-events`` events are refused with a one-line error (status 2).
- After training, the export is written to ``--export DIR2`` and its FIM and next-edit thresholds
  are re-tuned on training repositories with the replay harness's own tuner (``--edits DIR``: its
  repositories outside ``model.train.data.HELD_OUT_REPOS``, or ``--tune-records FILE...``): an
  aligned model scores differently, so the thresholds tuned for its init no longer apply. Without
  record files (a user's own telemetry) the init's thresholds are kept and the output says so.
- ``config.json``'s ``meta.aligned`` records what was done in plain fields (method, beta, k, example
  counts, sources, steps), so a server or a person can tell an aligned checkpoint apart.
- The run resumes: ``--run DIR`` keeps the examples, the reference cache and the training state.
- ``--dry-run`` reads the sources exactly as a run does (the same refusals), prints the examples by
  kind and label, and stops before any model is loaded: how a user (or a test) sees what a log
  gives without training. ``editserver telemetry stats`` shows the same count from the LSP's side.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from editserver.protocol.telemetry_log import MIN_EVENTS


def register(sub: argparse._SubParsersAction) -> None:
    from editserver.model.train.kto import AlignConfig
    from editserver.options import add_arguments

    p = sub.add_parser(
        "align",
        help="KTO alignment from accepted/rejected suggestions (replay output, LSP telemetry)",
        description="Align a checkpoint with KTO on desirable and undesirable suggestions: replay output "
        "of training repositories and/or the LSP's telemetry log; export it with re-tuned thresholds.",
    )
    src = p.add_argument_group("sources of training examples")
    src.add_argument(
        "--replay",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="`editserver replay --json` output (or its .log.jsonl) on training repositories",
    )
    src.add_argument(
        "--telemetry",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="the LSP's telemetry SQLite file (e.g. ~/.local/share/editserver/telemetry.sqlite3)",
    )
    src.add_argument(
        "--min-events",
        type=int,
        default=MIN_EVENTS,
        help=f"refuse telemetry logs with fewer events in all (default {MIN_EVENTS})",
    )
    src.add_argument(
        "--unchanged-share",
        type=float,
        default=0.25,
        help="at most this share of the examples are 'region unchanged' answers (default 0.25)",
    )
    src.add_argument(
        "--dry-run",
        action="store_true",
        help="read the sources, print the examples by kind and label, and stop (no model, no --export)",
    )
    m = p.add_argument_group("model")
    m.add_argument(
        "--export",
        type=Path,
        default=None,
        metavar="DIR2",
        help="write the aligned checkpoint here (required unless --dry-run)",
    )
    m.add_argument(
        "--export-dtype", choices=("bf16", "fp32"), default="bf16", help="weights dtype (default bf16)"
    )
    m.add_argument(
        "--lora",
        type=int,
        default=None,
        metavar="R",
        help="LoRA adapters of rank R: open-weight model directories only, which always train through them (default 8 there)",
    )
    t = p.add_argument_group("training")
    add_arguments(p, AlignConfig, {"model": m, "training": t})
    r = p.add_argument_group("threshold re-tuning (training repositories)")
    r.add_argument(
        "--edits",
        type=Path,
        default=None,
        metavar="DIR",
        help="commit-edit records; the repositories outside the held-out set are tuned on",
    )
    r.add_argument("--tune-records", nargs="+", default=[], metavar="FILE", help="record files to tune on")
    r.add_argument("--tune-points", type=int, default=300, help="next-edit points to tune on (default 300)")
    r.add_argument("--tune-fim", type=int, default=200, help="FIM points to tune on (default 200)")
    r.add_argument("--region-lines", type=int, default=16, help="editable region in lines (default 16)")
    r.add_argument(
        "--context-lines", type=int, default=20, help="file lines above and below the region (default 20)"
    )
    r.add_argument("--tune-seed", type=int, default=0, help="seed of the tuning points")
    p.set_defaults(func=run)


def _fail(msg: str) -> int:
    print(f"editserver align: error: {msg}", file=sys.stderr)
    return 2


def gather(args: argparse.Namespace, stats: Counter) -> list:
    """Examples of every source (errors raise ValueError / FileNotFoundError with a clear message)."""
    import random

    from editserver.model.train.kto_data import TooFewEventsError, count_events, read_replay, read_telemetry

    examples = []
    for f in args.replay:
        examples += read_replay(f, stats)
    if args.telemetry:
        events = sum(count_events(f) for f in args.telemetry)
        if events < args.min_events:
            raise TooFewEventsError(
                f"the telemetry log holds {events} events; aligning on it needs at least {args.min_events} "
                "(use the editor longer, or lower --min-events)"
            )
        for f in args.telemetry:
            examples += read_telemetry(f, stats)
    unchanged = [e for e in examples if e.source == "replay:unchanged"]
    rest = [e for e in examples if e.source != "replay:unchanged"]
    share = min(max(args.unchanged_share, 0.0), 0.99)
    cap = int(share * len(rest) / (1.0 - share))
    if len(unchanged) > cap:
        random.Random(args.seed).shuffle(unchanged)
        stats["unchanged_dropped"] += len(unchanged) - cap
        unchanged = unchanged[:cap]
    return rest + unchanged


def tune_files(args: argparse.Namespace) -> list[Path]:
    from editserver.model.train.data import HELD_OUT_REPOS, edit_record_files
    from editserver.replay.sources import record_files

    files = record_files(args.tune_records) if args.tune_records else []
    if args.edits is not None:
        if not args.edits.is_dir():
            raise FileNotFoundError(f"--edits: no such directory: {args.edits}")
        files += edit_record_files(args.edits, held_out=False)
    held = [f for f in files if f.name.removesuffix(".jsonl.xz") in HELD_OUT_REPOS]
    if held:
        raise ValueError(f"thresholds are tuned on training repositories only; held out: {held[0]}")
    return files


def retune(args: argparse.Namespace, model_dir: Path, files: list[Path]) -> dict:
    """The replay harness's tuner on ``files``, written into ``model_dir``'s config.json."""
    from editserver.replay.harness import ReplayConfig, make_suggester, tune, tune_fim, write_thresholds
    from editserver.replay.points import Options
    from editserver.replay.runner import RowLog, run_phase
    from editserver.replay.sources import Budget, from_record_files

    opts = Options(
        region_lines=args.region_lines,
        region_above=min(5, args.region_lines // 3),
        context_lines=args.context_lines,
        seed=args.tune_seed,
    )
    edits, fims = from_record_files(files, Budget(args.tune_points, args.tune_fim), opts, Counter())
    s = make_suggester(ReplayConfig(model=str(model_dir), in_process=True, device=args.device))
    res = run_phase("tune", edits, fims, s, RowLog(None, {}, False), 1, args.progress)
    tuning = tune(res.edits, s) if res.edits else {}
    if res.fims:
        agg = tuning["chosen"]["score_aggregate"] if res.edits else s.score_aggregate
        tuning["fim"] = tune_fim(res.fims, agg, s)
    write_thresholds(model_dir, tuning)
    return tuning


def _refusal(args: argparse.Namespace, open_weight: bool) -> str | None:
    """Why these options cannot run, or None."""
    if not (args.replay or args.telemetry):
        return "name at least one source of examples: --replay FILE or --telemetry FILE"
    if args.export is None and not args.dry_run:
        return "the following arguments are required: --export (where the aligned checkpoint goes)"
    if args.k < 1 or args.batch_size < 2 or args.beta <= 0 or args.min_events < 0:
        return "--k must be >= 1, --batch-size >= 2, --beta > 0 and --min-events >= 0"
    if args.lora is not None and not open_weight:
        return (
            "--lora adapts open-weight model directories (model/infer/hf/) only; "
            "native checkpoints are aligned in full (drop --lora)"
        )
    if args.lora is not None and args.lora < 1:
        return "--lora must be at least 1"
    return None


def _print_examples(examples: list, stats: Counter) -> None:
    if stats["telemetry_without_prompts"]:
        print(
            f"{stats['telemetry_without_prompts']} telemetry suggestions were stored without their prompts "
            "(telemetry.keepPrompts off, or past retentionDays/maxMegabytes) and cannot become examples; "
            "replay output (--replay) gives KTO examples without keeping prompts",
            flush=True,
        )
    n_d = sum(e.desirable for e in examples)
    print(f"{len(examples)} examples: {n_d} desirable, {len(examples) - n_d} undesirable", flush=True)
    for kind, name in (("fim", "fim"), ("edit", "next edit")):
        of = [e.desirable for e in examples if e.kind == kind]
        print(f"  {name}: {sum(of)} desirable, {len(of) - sum(of)} undesirable", flush=True)
    if stats:
        print("notes: " + ", ".join(f"{k} {v}" for k, v in sorted(stats.items())), flush=True)


def _train(aligner) -> dict | None:
    """The aligner's run; None (said on stderr) when interrupted, to be resumed by the same command."""
    try:
        return aligner.train()
    except KeyboardInterrupt:
        print(f"interrupted at step {aligner.step}; rerun the same command to resume", file=sys.stderr)
        return None


def _meta(args: argparse.Namespace, aligner, result: dict) -> dict:
    """What an export records of its alignment (both kinds of model)."""
    return {
        "method": "kto",
        "beta": args.beta,
        "k": args.k,
        "desirable": aligner.n_d,
        "undesirable": aligner.n_u,
        "sources": [str(f) for f in [*args.replay, *args.telemetry]],
        "examples_by_source": aligner.info().get("sources", {}),
        "steps": result["step"],
        "z0": args.z0,
        "init": str(args.init) if args.init else "shipped default",
    }


def run(args: argparse.Namespace) -> int:
    from editserver.model.infer.hf import is_open_dir
    from editserver.model.train.kto_data import HeldOutError

    open_weight = args.init is not None and is_open_dir(args.init)
    refusal = _refusal(args, open_weight)
    if refusal:
        return _fail(refusal)
    stats: Counter = Counter()
    resuming = (args.run_dir / "state.pt").exists()
    try:
        files = tune_files(args)
        examples = gather(args, stats)
    except (HeldOutError, ValueError, FileNotFoundError) as e:
        return _fail(str(e))
    _print_examples(examples, stats)
    if args.dry_run:
        print("dry run: nothing trained (drop --dry-run to align)")
        return 0
    if open_weight:
        return run_open(args, examples, files)
    return run_native(args, examples, files, resuming)


def run_native(args: argparse.Namespace, examples: list, files: list[Path], resuming: bool) -> int:
    """A native checkpoint: every weight aligned, then the thresholds re-tuned on ``files``."""
    import torch

    from editserver.model.train.kto import AlignConfig, Aligner, NotNativeError
    from editserver.options import config_values

    try:
        aligner = Aligner(AlignConfig(**config_values(AlignConfig, args)), examples)
    except (NotNativeError, ValueError, FileNotFoundError) as e:
        return _fail(str(e))
    if resuming:
        print(f"resuming {args.run_dir} at step {aligner.step} of {aligner.steps}", flush=True)
    print(
        f"{aligner.store.n} rows ({aligner.n_d} desirable, {aligner.n_u} undesirable); lambda_D "
        f"{aligner.lambda_d:.3g}, lambda_U {aligner.lambda_u:.3g}; {aligner.steps} steps of {args.batch_size}",
        flush=True,
    )
    result = _train(aligner)
    if result is None:
        return 130
    dtype = torch.float32 if args.export_dtype == "fp32" else torch.bfloat16
    out = aligner.export(args.export, {"aligned": _meta(args, aligner, result)}, dtype)
    print(f"exported {out} (step {result['step']})", flush=True)
    if files:
        tuning = retune(args, out, files)
        ch, fim = tuning.get("chosen"), (tuning.get("fim") or {}).get("chosen")
        if ch:
            print(
                f"next-edit threshold: {ch['score_aggregate']} >= {ch['selectivity_threshold']:.2f} "
                f"(utility {ch['utility']:+.3f} on {args.tune_points} training points)"
            )
        if fim:
            print(f"FIM threshold: {fim['fim_threshold']:.2f} (utility {fim['utility']:+.3f})")
    else:
        print("thresholds kept from the init (no --edits/--tune-records to re-tune on)")
    print(f"serve it with: editserver serve --model {out}")
    return 0


def run_open(args: argparse.Namespace, examples: list, files: list[Path]) -> int:
    """An open-weight directory: LoRA adapters (rank ``--lora``, default 8), merged into the export;
    the engine's default thresholds are kept (model/train/kto_open.py)."""
    from editserver.model.infer.hf import UnsupportedModelError
    from editserver.model.train.kto import AlignConfig
    from editserver.model.train.kto_open import DEFAULT_LORA_R, OpenAlignConfig, OpenAligner
    from editserver.options import config_values

    r = args.lora if args.lora is not None else DEFAULT_LORA_R
    cfg = OpenAlignConfig(**config_values(AlignConfig, args), lora_r=r)
    try:
        aligner = OpenAligner(cfg, examples)
    except UnsupportedModelError as e:
        return _fail(f"{args.init} is not a native editserver checkpoint, and not an open-weight model: {e}")
    except (ValueError, FileNotFoundError) as e:
        return _fail(str(e))
    print(
        f"{aligner.ck.family} model, LoRA rank {r}: {len(aligner.rows)} rows ({aligner.n_d} desirable, "
        f"{aligner.n_u} undesirable); {aligner.steps} steps of {args.batch_size}, starting at {aligner.step}",
        flush=True,
    )
    result = _train(aligner)
    if result is None:
        return 130
    meta = {**_meta(args, aligner, result), "lora_r": r, "lora_alpha": aligner.lora.alpha}
    try:
        out = aligner.export(args.export, meta)
    except ValueError as e:
        return _fail(str(e))
    print(f"exported {out} (step {result['step']}, LoRA merged; the input's tensor names and dtypes)")
    if files:
        print("--edits/--tune-records ignored: open-weight models keep the engine's default thresholds")
    else:
        print("thresholds: open-weight models keep the engine's defaults")
    print(f"serve it with: editserver serve --model {out}")
    return 0
