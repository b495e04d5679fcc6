"""``editserver bench train-step``: training throughput (tokens/s) of one recipe's step, variants
side by side in one process: eager vs ``torch.compile``, fp32 vs bf16 autocast.

Design decisions:
- A step is what ``model.train`` runs: masked-diffusion loss (model/train/diffusion.py), backward, gradient
  clipping and AdamW, on rows shaped like the corpus's (a context of a random length, then the
  canvas), with the preset's shape and the draft input.
- Every variant starts from the same weights and sees the same batches. Steps are interleaved (one
  step of each variant per round) so that a machine whose speed drifts (a training run sharing the
  cores, thermal limits) slows every variant alike; each variant's figure is the median over rounds,
  and the table gives ratios against the first variant, never absolute claims across runs.
- Compilation happens in warm-up rounds, whose time is reported apart (``compile_s``).
- On a GPU (``--device cuda``) each timed step ends with a synchronisation, so a step's time is the
  device's, not the launch's.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

VARIANTS = ("eager", "compile")
PRECISIONS = ("auto", "fp32", "bf16")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train-step", help="training tokens/s: eager vs compiled, fp32 vs bf16, side by side")
    p.add_argument("--preset", default="mini", help="model size preset (tiny, mini, small, base)")
    p.add_argument("--batch-size", type=int, default=16, help="rows per step (default: 16)")
    p.add_argument("--seq-len", type=int, default=256, help="tokens per row (default: 256)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = default)")
    p.add_argument("--variants", default="eager,compile", help=f"comma-separated, of {', '.join(VARIANTS)}")
    p.add_argument(
        "--precisions", default="auto", help="comma-separated, of auto, fp32, bf16 (auto: model.train's rule)"
    )
    p.add_argument("--rounds", type=int, default=10, help="timed rounds (one step of every variant each)")
    p.add_argument("--warmup", type=int, default=3, help="untimed rounds first (compilation happens here)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random batch and weights")
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    p.set_defaults(func=run)


def _parse(text: str, allowed: tuple[str, ...], what: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in items if x not in allowed]
    if not items or bad:
        raise ValueError(f"--{what} takes a comma-separated list of {', '.join(allowed)}; got {text!r}")
    return list(dict.fromkeys(items))


def _rows(batch: int, seq_len: int, vocab: int, rounds: int, seed: int):
    """``rounds`` batches of random tokens with corpus-like context lengths (0 to 3/4 of the row)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(rounds):
        ids = torch.randint(0, vocab - 16, (batch, seq_len), generator=g)  # [B, L]
        ctx = torch.randint(0, 3 * seq_len // 4, (batch,), generator=g)  # [B]
        out.append((ids, ctx, torch.full((batch,), seq_len)))
    return out


def _pairs(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The (variant, precision) pairs to time; ValueError with what the user sees for bad options."""
    from editserver.model.infer.config import PRESETS

    variants = _parse(args.variants, VARIANTS, "variants")
    precisions = _parse(args.precisions, PRECISIONS, "precisions")
    if args.preset not in PRESETS:
        raise ValueError(f"unknown preset {args.preset!r}; one of {', '.join(PRESETS)}")
    if min(args.batch_size, args.seq_len, args.rounds) < 1 or args.warmup < 0:
        raise ValueError("--batch-size, --seq-len and --rounds must be at least 1, --warmup at least 0")
    return list(itertools.product(variants, precisions))


def _runs(args: argparse.Namespace, base, pairs: list[tuple[str, str]]) -> list[dict]:
    """One copy of ``base`` per (variant, precision), each with its own optimizer."""
    import torch

    runs = []
    for variant, precision in pairs:
        model = copy.deepcopy(base).to(args.device).train()
        if variant == "compile":
            model.compile(dynamic=True)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=args.device.startswith("cuda"))
        name = f"{variant}/{precision}"
        runs.append(
            {"name": name, "model": model, "opt": opt, "precision": precision, "compile_s": 0.0, "times": []}
        )
    return runs


def _step_s(args: argparse.Namespace, r: dict, batch: tuple, mask_id: int, seed: int) -> float:
    """Seconds of one training step of run ``r`` on ``batch`` (the same masks for every variant)."""
    import torch

    from editserver.model.train.diffusion import diffusion_loss
    from editserver.model.train.loop import autocast

    dev = args.device
    ids, ctx, lens = (x.to(dev) for x in batch)
    gen = torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    with autocast(dev, r["precision"]):
        loss, _ = diffusion_loss(r["model"], ids, ctx, lens, mask_id, gen)
    r["opt"].zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(r["model"].parameters(), 1.0)
    r["opt"].step()
    if dev.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def _print(result: dict) -> None:
    print(f"{'variant':16} {'step ms':>9} {'tokens/s':>10} {'vs first':>9} {'warm-up s':>10}")
    for v in result["variants"]:
        print(
            f"{v['name']:16} {1000 * v['median_step_s']:9.1f} {v['tokens_per_s']:10.0f} "
            f"{v['speedup']:8.2f}x {v['warmup_s']:10.1f}"
        )


def run(args: argparse.Namespace) -> int:
    import torch

    from editserver.model.infer.config import PRESETS, ModelConfig
    from editserver.model.infer.transformer import Transformer

    try:
        pairs = _pairs(args)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = ModelConfig.from_dict({**PRESETS[args.preset].to_dict(), "canvas_draft": True})
    torch.manual_seed(args.seed)
    base = Transformer(cfg)
    runs = _runs(args, base, pairs)
    batches = _rows(args.batch_size, args.seq_len, cfg.vocab_size, args.warmup + args.rounds, args.seed)
    for k in range(args.warmup + args.rounds):
        for r in runs:
            dt = _step_s(args, r, batches[k], cfg.vocab_size - 1, args.seed + k)
            if k < args.warmup:
                r["compile_s"] += dt
            else:
                r["times"].append(dt)
    tokens = args.batch_size * args.seq_len
    first = statistics.median(runs[0]["times"])
    variants = []
    for r in runs:
        med = statistics.median(r["times"])
        variants.append(
            {
                "name": r["name"],
                "median_step_s": med,
                "tokens_per_s": tokens / med,
                "speedup": first / med,
                "warmup_s": r["compile_s"],
            }
        )
    result = {
        "preset": args.preset,
        "params": base.num_parameters(),
        "batch_size": args.batch_size,
        "seq_len": args.seq_len,
        "device": args.device,
        "torch_threads": torch.get_num_threads(),
        "rounds": args.rounds,
        "variants": variants,
    }
    _print(result)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0
