"""``editserver train-drafter``: fit lookahead's drafter to a checkpoint's own decoding
(model/drafter_train.py) and write it into the checkpoint as ``drafter.safetensors``."""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train-drafter",
        help="train lookahead's drafter on a checkpoint's own decoding (writes drafter.safetensors)",
    )
    p.add_argument("--model", type=Path, default=None, help="checkpoint directory (default: the shipped one)")
    p.add_argument("--out", type=Path, default=None, help="where drafter.safetensors goes (default: --model)")
    p.add_argument(
        "--src",
        type=Path,
        action="append",
        default=None,
        help="Python source roots to cut one-line tasks from (repeatable; default: stdlib and site-packages)",
    )
    p.add_argument("--tasks", type=int, default=4000, help="training decodes (about 9 calls each)")
    p.add_argument("--val-tasks", type=int, default=600, help="held-out decodes, from other files")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch-size", type=int, default=64, help="(call, later call) pairs a step")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", type=Path, default=None, help="write the held-out agreement here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from model.api import Engine
    from model.checkpoint import DEFAULT_CHECKPOINT, save_drafter
    from model.data import python_source_files
    from model.drafter import Drafter
    from model.drafter_train import agreement, collect, line_tasks, train

    if args.threads:
        torch.set_num_threads(args.threads)
    if min(args.tasks, args.val_tasks, args.steps, args.batch_size) < 1:
        print("--tasks, --val-tasks, --steps and --batch-size must be at least 1", file=sys.stderr)
        return 2
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    engine = Engine.load(args.model, device=args.device)
    files = python_source_files(args.src)
    rng.shuffle(files)
    # files, not tasks, are split: held-out lines never share a file with training lines
    cut = max(1, len(files) // 8)
    val_files, train_files = files[:cut], files[cut:]
    tr_tasks, va_tasks = line_tasks(train_files, args.tasks, rng), line_tasks(val_files, args.val_tasks, rng)
    if not tr_tasks or not va_tasks:
        print(f"no one-line tasks found under {args.src or 'stdlib and site-packages'}", file=sys.stderr)
        return 2
    print(f"decoding {len(tr_tasks)} training and {len(va_tasks)} held-out tasks", flush=True)
    tr, va = collect(engine, tr_tasks, rng), collect(engine, va_tasks, rng)
    drafter = Drafter(engine.model.cfg).to(args.device)
    every = max(1, args.steps // 20)

    def log(step: int, loss: float) -> None:
        if step % every == 0 or step == args.steps - 1:
            print(json.dumps({"step": step, "loss": round(loss, 4)}), flush=True)

    train(drafter, engine, tr, args.steps, rng, args.batch_size, args.lr, log=log)
    result = agreement(drafter, engine, va)
    for g, r in result["by_gap"].items():
        print(f"gap {g}: {r['n']} guesses, right frozen {r['frozen']:.3f}, drafted {r['drafter']:.3f}")
    print(
        f"mean run of right guesses: frozen {result['run_frozen']:.3f}, drafted {result['run_drafter']:.3f}"
    )
    out = args.out or args.model or DEFAULT_CHECKPOINT
    out.mkdir(parents=True, exist_ok=True)
    save_drafter(out, drafter)
    print(f"wrote {out / 'drafter.safetensors'}")
    if args.json is not None:
        args.json.write_text(
            json.dumps({**result, "tasks": len(tr_tasks), "steps": args.steps}, indent=2) + "\n"
        )
    return 0
