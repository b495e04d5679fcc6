"""``editserver train``: build the corpus and train; ``--repo PATH`` fine-tunes on a repo's history."""

from __future__ import annotations

import argparse
from pathlib import Path

DEFAULT_HOME = Path.home() / ".cache" / "editserver-train"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train the diffusion model (resumes from --run if it has state)")
    p.add_argument(
        "--run",
        type=Path,
        default=None,
        help="run directory (state, logs); default ~/.cache/editserver-train/run, or .../repo-NAME with --repo",
    )
    p.add_argument(
        "--data",
        type=Path,
        default=None,
        help="row store directory (default: RUN/../data; RUN/data with --repo)",
    )
    p.add_argument(
        "--edits",
        type=Path,
        default=Path("../shared/data/edits"),
        help="commit-edit records (*.jsonl.xz); optional",
    )
    p.add_argument(
        "--repo",
        type=Path,
        default=None,
        help="fine-tune on this git repository's history (starts from --init or the default model)",
    )
    p.add_argument("--init", type=Path, default=None, help="checkpoint to start from")
    p.add_argument("--preset", default="mini", help="model size preset (tiny, mini, small, base)")
    p.add_argument("--steps", type=int, default=None, help="total steps (default 100000; 300 with --repo)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument(
        "--decay-start",
        type=int,
        default=None,
        help="step where the LR starts its linear decay to 10%% at --steps (default: never)",
    )
    p.add_argument(
        "--lr", type=float, default=None, help="peak learning rate (default 1.5e-3; 3e-4 with --repo)"
    )
    p.add_argument("--rows", type=int, default=200_000, help="training rows to build")
    p.add_argument("--seq-len", type=int, default=256, help="row length in tokens (context + canvas)")
    p.add_argument(
        "--mix",
        default="0.15,0.5,0.2,0.15",
        help="shares of plain, FIM, next-edit (from commits) and synthetic-rename rows when building "
        "the corpus (three shares: no renames)",
    )
    p.add_argument(
        "--tokenizer",
        type=Path,
        default=None,
        help="reuse this tokenizer.json instead of training one (default: --init's, else train)",
    )
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps (default 200)")
    p.add_argument(
        "--precision",
        default="auto",
        choices=("auto", "bf16", "fp32"),
        help="auto: bf16 autocast only on CUDA or CPUs with native bf16 (AVX-512 BF16/AMX)",
    )
    p.add_argument(
        "--canvas-draft",
        action="store_true",
        help="give next-edit canvases the region's tokens as a draft input (model/infer/transformer.py); "
        "a run saved without it gains it on resume, one saved with it keeps it",
    )
    p.add_argument("--vocab-size", type=int, default=8192)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument(
        "--export",
        type=Path,
        default=None,
        metavar="DIR",
        help="do not train: copy RUN/checkpoint (or --init's checkpoint, when given) to DIR with bf16 "
        "weights (how the default is shipped)",
    )
    p.add_argument(
        "--export-dtype",
        default="bf16",
        choices=("bf16", "fp32"),
        help="weights dtype for --export (fp32 keeps full precision for continuing training with --init)",
    )
    p.add_argument(
        "--average-with",
        type=Path,
        default=None,
        metavar="DIR",
        help="with --export: average the exported weights with checkpoint DIR's (same shape and tokenizer) "
        "before casting, e.g. a continuation with the model it started from (default: no averaging)",
    )
    p.add_argument(
        "--average-share",
        type=float,
        default=0.5,
        help="with --average-with: the exported checkpoint's weight in the average, DIR's is 1 minus it "
        "(default 0.5)",
    )
    p.add_argument(
        "--time-budget",
        type=float,
        default=None,
        metavar="MINUTES",
        help="stop after this much training time (counted across resumes), the LR decaying to 10%% "
        "over its last --decay-frac; --steps stays a cap (default: no budget, --steps decides)",
    )
    p.add_argument(
        "--decay-frac",
        type=float,
        default=0.2,
        help="with --time-budget: the share of the budget the LR decays over (default 0.2)",
    )
    p.add_argument(
        "--optimizer",
        default="adamw",
        choices=("adamw", "muon"),
        help="adamw, or muon on the blocks' weight matrices with AdamW on the rest (model/train/optim.py); "
        "a run resumed with the other one starts it afresh and re-warms the LR (default adamw)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes that build the corpus's training rows (rows depend on this number; 1 gives "
        "the rows every earlier recipe built)",
    )
    p.add_argument("--max-commits", type=int, default=2000, help="with --repo: commits to mine")
    p.add_argument(
        "--source",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="also take the Python files under DIR into the corpus (repeatable), e.g. packages "
        "installed with `pip install --target DIR`",
    )
    p.add_argument(
        "--source-repeat",
        type=int,
        default=1,
        help="list each --source file this many times: rows draw files uniformly, so this is the "
        "weight of the extra sources against the stdlib and site-packages (default 1)",
    )
    p.add_argument(
        "--ordered-share",
        type=float,
        default=0.0,
        help="share of each batch masked block-ordered, the states the semi-autoregressive sampler "
        "decodes (model/train/diffusion.py; experimental, README); 0 = uniform MDLM masking only (default 0)",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the model for training (about 20 s of compilation first; 1.08x per step "
        "on a 2-core AVX2 CPU, README)",
    )
    p.add_argument(
        "--distill",
        type=int,
        default=0,
        metavar="N",
        help="self-distillation for parallel decoding (model/train/distill.py): the teacher answers N FIM "
        "contexts of the corpus one token per step, once, into RUN/distill, and those rows make "
        "--distill-share of every batch (default 0: off)",
    )
    p.add_argument(
        "--distill-share",
        type=float,
        default=0.5,
        help="with --distill: the share of each batch taken from the teacher's rows (default 0.5)",
    )
    p.add_argument(
        "--certainty",
        type=float,
        default=0.0,
        help="with --distill: weight of the certainty-forcing term, the entropy of the teacher rows' "
        "positions the model already predicts right (model/train/diffusion.py; default 0: off)",
    )
    p.add_argument(
        "--decision-t-min",
        type=float,
        default=None,
        metavar="T",
        help="with --distill: mask teacher rows at t ~ U(T, 1) and score only their answer's tokens "
        "and first end-of-text, each row's mean (model/train/diffusion.py; default: the MDLM weight; "
        "0.3 measured best on 2026-11-29, docs/experiments.md)",
    )
    p.add_argument(
        "--teacher",
        type=Path,
        default=None,
        help="with --distill: the checkpoint that answers (default: the shipped default model)",
    )
    p.add_argument(
        "--distill-batch",
        type=int,
        default=None,
        help="with --distill: contexts the teacher decodes at once (default: model.train.distill's "
        "TEACHER_BATCH, sized for a CPU; a GPU takes hundreds)",
    )
    p.add_argument(
        "--prepare-only",
        action="store_true",
        help="build what is missing of the corpus (and, with --distill, the teacher rows in RUN/distill), "
        "then stop before training: the GPU script builds them first, so the training's "
        "--time-budget counts from when it can start",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from model.infer.checkpoint import DEFAULT_CHECKPOINT, check_checkpoint_dir
    from model.train.loop import TrainConfig, prepare, train

    if args.run is None:
        args.run = DEFAULT_HOME / (f"repo-{args.repo.resolve().name}" if args.repo else "run")
    if args.export is not None:
        import torch

        from model.infer.checkpoint import export_checkpoint

        dtype = torch.float32 if args.export_dtype == "fp32" else torch.bfloat16
        if not 0.0 <= args.average_share <= 1.0:
            print(f"--average-share must be in [0, 1], got {args.average_share}")
            return 2
        # a shipped checkpoint has no run directory: --init names it directly (averaging two exports)
        src = args.init if args.init is not None else args.run / "checkpoint"
        try:
            out = export_checkpoint(src, args.export, dtype, args.average_with, args.average_share)
        except (FileNotFoundError, ValueError) as e:
            print(f"cannot export: {e}")
            return 2
        print(f"exported {src} -> {out}")
        return 0
    if not 0.0 <= args.ordered_share <= 1.0:
        print(f"--ordered-share must be between 0 and 1, got {args.ordered_share}")
        return 2
    if args.time_budget is not None and not args.time_budget > 0:
        print(f"--time-budget must be a positive number of minutes, got {args.time_budget}")
        return 2
    if not 0.0 < args.decay_frac <= 1.0:
        print(f"--decay-frac must be in (0, 1], got {args.decay_frac}")
        return 2
    if (
        args.distill < 0
        or not 0.0 < args.distill_share <= 1.0
        or (args.distill_batch is not None and args.distill_batch < 1)
    ):
        print(
            "--distill must be >= 0, --distill-share in (0, 1] and --distill-batch >= 1, got "
            f"{args.distill}, {args.distill_share}, {args.distill_batch}"
        )
        return 2
    if args.decision_t_min is not None and not (args.distill and 0.0 <= args.decision_t_min < 1.0):
        print(f"--decision-t-min needs --distill and a value in [0, 1), got {args.decision_t_min}")
        return 2
    if args.workers < 1:
        print(f"--workers must be at least 1, got {args.workers}")
        return 2
    for flag, d in (("--init", args.init), ("--teacher", args.teacher)):
        try:
            if d is not None:
                check_checkpoint_dir(d)
        except FileNotFoundError as e:
            print(f"{flag}: {e}")
            return 2
    fine_tune = args.repo is not None
    args.steps = args.steps or (300 if fine_tune else 100_000)
    args.lr = args.lr or (3e-4 if fine_tune else 1.5e-3)
    if fine_tune and args.decay_start is None:
        args.decay_start = 0  # fine-tuning decays from the start: a short run, no stable phase
    data = args.data or (args.run / "data" if args.repo is not None else args.run.parent / "data")
    init = args.init
    if args.repo is not None:
        from model.train.gitmine import mine_repo

        init = init or DEFAULT_CHECKPOINT
        if not (data / "train" / "info.json").exists():
            try:
                records = list(mine_repo(args.repo, max_commits=args.max_commits))
            except ValueError as e:  # not a git repository, or git cannot list its commits
                print(f"cannot fine-tune on {args.repo}: {e}")
                return 2
            if not records:
                print(f"no usable edits found in {args.repo}")
                return 1
            print(f"mined {len(records)} file edits from {args.repo}", flush=True)
            prepare(
                data,
                None,
                n_train=args.rows,
                seq_len=args.seq_len,
                tokenizer_path=Path(init) / "tokenizer.json",
                code_files=[],
                extra_records=records,
            )
    elif not (data / "train" / "info.json").exists():
        mix = tuple(float(x) for x in args.mix.split(","))
        if len(mix) not in (3, 4) or abs(sum(mix) - 1.0) > 1e-6 or min(mix) < 0:
            print(f"--mix needs three or four non-negative shares summing to 1, got {args.mix!r}")
            return 2
        print(f"building corpus in {data} ...", flush=True)
        tokenizer = args.tokenizer or (Path(init) / "tokenizer.json" if init else None)
        code_files = None
        if args.source:
            from model.train.data import python_source_files

            extra = python_source_files([Path(d) for d in args.source])
            if not extra:
                print(f"no Python files under {', '.join(map(str, args.source))}")
                return 2
            code_files = python_source_files() + extra * max(1, args.source_repeat)
        prepare(
            data,
            args.edits,
            n_train=args.rows,
            seq_len=args.seq_len,
            vocab_size=args.vocab_size,
            tokenizer_path=tokenizer,
            mix=mix,  # type: ignore[arg-type]
            code_files=code_files,
            workers=args.workers,
        )
    distill_dir = None
    if args.distill:
        distill_dir = args.run / "distill"
        if not (distill_dir / "info.json").exists():
            build_teacher_rows(args, data, distill_dir)
    if args.prepare_only:
        print(f"prepared {data}" + (f" and {distill_dir}" if distill_dir else "") + "; not training")
        return 0
    cfg = TrainConfig(
        run_dir=args.run,
        data_dir=data,
        preset=args.preset,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        device=args.device,
        threads=args.threads,
        eval_every=args.eval_every,
        init_from=init,
        decay_start=args.decay_start,
        warmup_steps=args.warmup,
        precision=args.precision,
        canvas_draft=args.canvas_draft,
        ordered_share=args.ordered_share,
        compile=args.compile,
        time_budget_s=None if args.time_budget is None else args.time_budget * 60.0,
        decay_frac=args.decay_frac,
        optimizer=args.optimizer,
        distill_dir=distill_dir,
        distill_share=args.distill_share,
        certainty=args.certainty,
        decision_t_min=args.decision_t_min,
    )
    ckpt = train(cfg)
    print(f"checkpoint: {ckpt}")
    return 0


def build_teacher_rows(args: argparse.Namespace, data: Path, out: Path) -> None:
    """The teacher's one-token-per-step answers to ``--distill`` FIM contexts of the corpus."""
    import torch

    from model.infer.engine import Engine
    from model.infer.tokenizer import Tokenizer
    from model.train.data import RowStore
    from model.train.distill import TEACHER_BATCH, build_distill_store

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
