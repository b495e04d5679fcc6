"""``editserver train``: build the corpus and train; ``--repo PATH`` fine-tunes on a repo's history.

Design decisions:
- Each option is written once: the training options are ``model.train.loop.TrainConfig``'s fields
  and the command's own (corpus, export, distillation) are ``TrainOptions``'s; editserver/options.py
  turns both into flags with their help, choices and defaults.
- The corpus is sized to the run: ``steps x batch`` rows (at least ``MIN_ROWS``, at most
  ``MAX_ROWS``; ``MAX_ROWS`` with a time budget, whose step count is unknown), since a row is drawn
  about once per epoch anyway; a corpus already built in the data directory is reused as it is.
- Progress goes to stderr (tqdm bars for reading sources, mining commits, building rows and the
  steps with loss and ETA); the last line says how to serve the result.
- Under torchrun (docs/scale-out.md) every process runs this command: rank 0 alone builds what is
  missing of the corpus and the teacher rows while the others wait, and rank 0 alone prints.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

from editserver.options import add_arguments, config_values

DEFAULT_HOME = Path.home() / ".cache" / "editserver-train"
MIN_ROWS = 2_000  # a corpus below this repeats its rows within a few hundred steps of batch 16
MAX_ROWS = 200_000  # the size every earlier recipe built (about 10 minutes on 2 CPU cores)


def _opt(default, help: str, **meta):
    return field(default=default, metadata={"help": help, **meta})


@dataclass
class TrainOptions:
    """The command's own options (training options proper are TrainConfig's)."""

    run: Path | None = _opt(
        None,
        "run directory (state, logs); default ~/.cache/editserver-train/run, or .../repo-NAME with --repo "
        "(under torchrun write --run-dir: torchrun reads --run as its own --run-path)",
        aliases=("--run-dir",),
    )
    data: Path | None = _opt(None, "row store directory (default: RUN/../data; RUN/data with --repo)")
    edits: Path = _opt(Path("../shared/data/edits"), "commit-edit records (*.jsonl.xz); optional")
    repo: Path | None = _opt(
        None, "fine-tune on this git repository's history (starts from --init or the default model)"
    )
    init: Path | None = _opt(None, "checkpoint to start from")
    rows: int | None = _opt(
        None,
        f"training rows to build (default: steps x batch size, at least {MIN_ROWS}, at most {MAX_ROWS}; "
        f"{MAX_ROWS} with --time-budget)",
    )
    seq_len: int = _opt(256, "row length in tokens (context + canvas)")
    mix: str = _opt(
        "0.15,0.5,0.2,0.15",
        "shares of plain, FIM, next-edit (from commits) and synthetic-rename rows when building the "
        "corpus (three shares: no renames)",
    )
    tokenizer: Path | None = _opt(
        None, "reuse this tokenizer.json instead of training one (default: --init's, else train)"
    )
    vocab_size: int = _opt(8192, "tokenizer vocabulary when one is trained")
    export: Path | None = _opt(
        None,
        "do not train: copy RUN/checkpoint (or --init's checkpoint, when given) to DIR with bf16 "
        "weights (how the default is shipped)",
        metavar="DIR",
    )
    export_dtype: str = _opt(
        "bf16",
        "weights dtype for --export (fp32 keeps full precision for continuing training with --init)",
        choices=("bf16", "fp32"),
    )
    average_with: Path | None = _opt(
        None,
        "with --export: average the exported weights with checkpoint DIR's (same shape and tokenizer) "
        "before casting, e.g. a continuation with the model it started from (default: no averaging)",
        metavar="DIR",
    )
    average_share: float = _opt(
        0.5, "with --average-with: the exported checkpoint's weight in the average, DIR's is 1 minus it"
    )
    workers: int = _opt(
        1,
        "processes that build the corpus's training rows (rows depend on this number; 1 gives the rows "
        "every earlier recipe built)",
    )
    max_commits: int = _opt(2000, "with --repo: commits to mine")
    source: list[Path] = _opt(
        None,
        "also take the Python files under DIR into the corpus (repeatable), e.g. packages installed "
        "with `pip install --target DIR`",
        metavar="DIR",
    )
    source_repeat: int = _opt(
        1,
        "list each --source file this many times: rows draw files uniformly, so this is the weight of "
        "the extra sources against the stdlib and site-packages",
    )
    distill: int = _opt(
        0,
        "self-distillation for parallel decoding (model/train/distill.py): the teacher answers N FIM "
        "contexts of the corpus one token per step, once, into RUN/distill, and those rows make "
        "--distill-share of every batch (default 0: off)",
        metavar="N",
    )
    teacher: Path | None = _opt(
        None, "with --distill: the checkpoint that answers (default: the shipped default model)"
    )
    distill_batch: int | None = _opt(
        None,
        "with --distill: contexts the teacher decodes at once (default: model.train.distill's "
        "TEACHER_BATCH, sized for a CPU; a GPU takes hundreds)",
    )
    prepare_only: bool = _opt(
        False,
        "build what is missing of the corpus (and, with --distill, the teacher rows in RUN/distill), "
        "then stop before training: the GPU script builds them first, so the training's --time-budget "
        "counts from when it can start",
    )


def register(sub: argparse._SubParsersAction) -> None:
    from editserver.model.train.loop import TrainConfig

    p = sub.add_parser(
        "train",
        help="train the diffusion model (resumes from --run if it has state; data-parallel under torchrun)",
        description="Train the diffusion model, or fine-tune it on a repository's history (--repo). "
        "Under `torchrun --nproc-per-node N -m editserver.cli train ...` it trains data-parallel "
        "(docs/scale-out.md).",
    )
    add_arguments(p.add_argument_group("run and corpus"), TrainOptions)
    add_arguments(p.add_argument_group("training"), TrainConfig)
    p.set_defaults(func=run)


def _fail(msg: str) -> int:
    print(msg)
    return 2


def _validate(args: argparse.Namespace) -> str | None:
    """The first problem with the options, as the line to print, or None."""
    if not 0.0 <= args.ordered_share <= 1.0:
        return f"--ordered-share must be between 0 and 1, got {args.ordered_share}"
    if args.time_budget_s is not None and not args.time_budget_s > 0:
        return f"--time-budget must be a positive number of minutes, got {args.time_budget_s}"
    if not 0.0 < args.decay_frac <= 1.0:
        return f"--decay-frac must be in (0, 1], got {args.decay_frac}"
    if (
        args.distill < 0
        or not 0.0 < args.distill_share <= 1.0
        or (args.distill_batch is not None and args.distill_batch < 1)
    ):
        return (
            "--distill must be >= 0, --distill-share in (0, 1] and --distill-batch >= 1, got "
            f"{args.distill}, {args.distill_share}, {args.distill_batch}"
        )
    if args.decision_t_min is not None and not (args.distill and 0.0 <= args.decision_t_min < 1.0):
        return f"--decision-t-min needs --distill and a value in [0, 1), got {args.decision_t_min}"
    if args.workers < 1:
        return f"--workers must be at least 1, got {args.workers}"
    for flag, value in (("--batch-size", args.batch_size), ("--log-every", args.log_every)):
        if value < 1:
            return f"{flag} must be at least 1, got {value}"
    if args.eval_every < 1 or (args.rows is not None and args.rows < 1):
        return f"--eval-every and --rows must be at least 1, got {args.eval_every}, {args.rows}"
    return None


def _export(args: argparse.Namespace) -> int:
    import torch

    from editserver.model.infer.loader import export_checkpoint

    dtype = torch.float32 if args.export_dtype == "fp32" else torch.bfloat16
    if not 0.0 <= args.average_share <= 1.0:
        return _fail(f"--average-share must be in [0, 1], got {args.average_share}")
    # a shipped checkpoint has no run directory: --init names it directly (averaging two exports)
    src = args.init if args.init is not None else args.run / "checkpoint"
    try:
        out = export_checkpoint(src, args.export, dtype, args.average_with, args.average_share)
    except (FileNotFoundError, ValueError) as e:
        return _fail(f"cannot export: {e}")
    print(f"exported {src} -> {out}")
    print(f"serve it: editserver serve --model {out}")
    return 0


def corpus_rows(args: argparse.Namespace) -> int:
    """Rows to build: ``--rows``, else enough for the run's steps (module docstring)."""
    if args.rows is not None:
        return args.rows
    if args.time_budget_s is not None:
        return MAX_ROWS
    return min(MAX_ROWS, max(MIN_ROWS, args.steps * args.batch_size))


def run(args: argparse.Namespace) -> int:
    from editserver.model.infer.checkpoint import DEFAULT_CHECKPOINT, check_checkpoint_dir
    from editserver.model.infer.hf import is_open_dir

    if args.run is None:
        args.run = DEFAULT_HOME / (f"repo-{args.repo.resolve().name}" if args.repo else "run")
    if args.export is not None:
        return _export(args)
    problem = _validate(args)
    if problem:
        return _fail(problem)
    for flag, d in (("--init", args.init), ("--teacher", args.teacher)):
        try:
            if d is not None:
                check_checkpoint_dir(d)
        except FileNotFoundError as e:
            return _fail(f"{flag}: {e}")
        if d is not None and is_open_dir(Path(d)):
            return _fail(
                f"{flag}: {d} is an open-weight model directory; `editserver train` trains this project's "
                "checkpoints only (serve it with `editserver serve --model DIR`)"
            )
    fine_tune = args.repo is not None
    args.steps = args.steps or (300 if fine_tune else 100_000)
    args.lr = args.lr or (3e-4 if fine_tune else 1.5e-3)
    if fine_tune and args.decay_start is None:
        args.decay_start = 0  # fine-tuning decays from the start: a short run, no stable phase
    args.data = args.data or (args.run / "data" if fine_tune else args.run.parent / "data")
    args.init = args.init or (DEFAULT_CHECKPOINT if fine_tune else None)
    if args.mix is not None and not fine_tune:
        mix = tuple(float(x) for x in args.mix.split(","))
        if len(mix) not in (3, 4) or abs(sum(mix) - 1.0) > 1e-6 or min(mix) < 0:
            return _fail(f"--mix needs three or four non-negative shares summing to 1, got {args.mix!r}")
    from editserver.model.train.distributed import barrier, close, init_from_env

    world = init_from_env(args.device)
    try:
        status = _prepare(args) if world.main else 0
        barrier(world)  # the other processes wait for rank 0's corpus
        if status or args.prepare_only:
            return status
        status = _train(args, world)
        # every rank finished before any tears its connections down: a gloo rank whose peer closed
        # first can abort at exit ("terminate called without an active exception") after a good run
        barrier(world)
        return status
    finally:
        close(world)


def _prepare(args: argparse.Namespace) -> int:
    """Build what is missing of the corpus (and the teacher rows); nonzero: stop with that status."""
    from editserver.model.train.corpus import prepare

    data, rows, progress = args.data, corpus_rows(args), args.progress
    if (data / "train" / "info.json").exists():
        print(f"corpus: {data} (already built)", flush=True)
    elif args.repo is not None:
        from tqdm import tqdm

        from editserver.model.train.gitmine import mine_repo

        try:
            mined = mine_repo(args.repo, max_commits=args.max_commits)
            bar = tqdm(mined, desc="mining commits", unit="edit", file=sys.stderr, disable=not progress)
            records = list(bar)
        except ValueError as e:  # not a git repository, or git cannot list its commits
            return _fail(f"cannot fine-tune on {args.repo}: {e}")
        if not records:
            print(f"no usable edits found in {args.repo}")
            return 1
        print(f"mined {len(records)} file edits from {args.repo}", flush=True)
        print(f"building {rows} rows in {data} ...", flush=True)
        prepare(
            data,
            None,
            n_train=rows,
            seq_len=args.seq_len,
            tokenizer_path=Path(args.init) / "tokenizer.json",
            code_files=[],
            extra_records=records,
            progress=progress,
        )
    else:
        tokenizer = args.tokenizer or (Path(args.init) / "tokenizer.json" if args.init else None)
        code_files = None
        if args.source:
            from editserver.model.train.data import python_source_files

            extra = python_source_files([Path(d) for d in args.source])
            if not extra:
                return _fail(f"no Python files under {', '.join(map(str, args.source))}")
            code_files = python_source_files() + extra * max(1, args.source_repeat)
        print(f"building corpus in {data} ({rows} rows) ...", flush=True)
        prepare(
            data,
            args.edits,
            n_train=rows,
            seq_len=args.seq_len,
            vocab_size=args.vocab_size,
            tokenizer_path=tokenizer,
            mix=tuple(float(x) for x in args.mix.split(",")),
            code_files=code_files,
            workers=args.workers,
            progress=progress,
        )
    if args.distill and not (args.run / "distill" / "info.json").exists():
        build_teacher_rows(args, data, args.run / "distill")
    if args.prepare_only:
        distill = f" and {args.run / 'distill'}" if args.distill else ""
        print(f"prepared {data}{distill}; not training")
    return 0


def _train(args: argparse.Namespace, world) -> int:
    """Every process trains; rank 0 prints where the checkpoint is and how to serve it."""
    from editserver.model.train.loop import TrainConfig, train

    values = config_values(TrainConfig, args)
    distill_dir = args.run / "distill" if args.distill else None
    cfg = TrainConfig(
        run_dir=args.run, data_dir=args.data, init_from=args.init, distill_dir=distill_dir, **values
    )
    try:
        ckpt = train(cfg, world)
    except ValueError as e:  # options the data or the saved state refuse (e.g. --batch-size vs processes)
        print(f"editserver train: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        if not world.distributed:
            raise
        # a collective failed: another process of the run died (torchrun names it and ends the run)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(
            f"editserver train: process {world.rank} of {world.size} stopped: another process of the run "
            f"failed ({first}); {args.run / 'state.pt'} holds the last saved step",
            file=sys.stderr,
        )
        return 1
    if world.main:
        print(f"checkpoint: {ckpt}")
        print(f"serve it: editserver serve --model {ckpt}")
    return 0


def build_teacher_rows(args: argparse.Namespace, data: Path, out: Path) -> None:
    """The teacher's one-token-per-step answers to ``--distill`` FIM contexts of the corpus."""
    import torch

    from editserver.model.infer.engine import Engine
    from editserver.model.infer.tokenizer import Tokenizer
    from editserver.model.train.data import RowStore
    from editserver.model.train.distill import TEACHER_BATCH, build_distill_store

    if args.threads:
        torch.set_num_threads(args.threads)
    engine = Engine.load(args.teacher, device=args.device)
    corpus = RowStore(data / "train")
    own = Tokenizer.load(data / "tokenizer.json")
    if (own.vocab_size, own.special_ids) != (engine.tok.vocab_size, engine.tok.special_ids):
        raise SystemExit(f"the teacher's tokenizer is not the one {data} was built with")
    print(f"teacher {args.teacher or 'default'} answers {args.distill} FIM contexts -> {out}", flush=True)

    def progress(n: int) -> None:
        if n % 1000 == 0:
            print(f"  {n} teacher rows", flush=True)

    batch = TEACHER_BATCH if args.distill_batch is None else args.distill_batch
    store = build_distill_store(engine, corpus, out, args.distill, batch_size=batch, progress=progress)
    print(f"{store.n} teacher rows written", flush=True)
