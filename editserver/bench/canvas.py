"""``editserver bench canvas``: what ``max_tokens`` costs when the answer is short.

Design decisions:
- Clients send large ``max_tokens`` defaults (256, 1024, 4096) for one-line answers. The canvas grows
  block by block (model/infer/sampler.py), so the cost should follow the answer. This measures it:
  the same one-line FIM requests at each ``max_tokens``, interleaved round by round so machine noise
  falls on every setting alike, and reports p50 latency, steps and the ratio to the smallest setting.
- In process, through ``Engine.complete``: the server adds the same HTTP cost to every setting.
- The answers are compared too: a canvas cap above what the answer needs must not change it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

PROMPTS = [
    ("def add(a, b):\n    return ", "\n"),
    ("import os\n\npath = os.path.join(", ")\n"),
    ("for i in range(10):\n    if i % 2 == 0:\n        ", "\n"),
    ("class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = ", "\n"),
]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("canvas", help="latency of short answers at growing max_tokens (the canvas grows)")
    p.add_argument("--model", type=Path, default=None, help="checkpoint directory (default: shipped)")
    p.add_argument(
        "--max-tokens", default="16,64,256,1024,4096", help="comma-separated max_tokens to compare"
    )
    p.add_argument("--rounds", type=int, default=5, help="rounds over every prompt and setting")
    p.add_argument("--stop", default="\\n", help="stop sequence the requests carry (default: a newline)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from editserver.model.infer.engine import Engine, FimRequest, SamplingOptions

    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        caps = [int(x) for x in args.max_tokens.split(",") if x.strip()]
        engine = Engine.load(args.model)
    except (ValueError, FileNotFoundError) as e:
        print(f"editserver bench canvas: error: {e}", file=sys.stderr)
        return 2
    stop = [args.stop.encode().decode("unicode_escape")] if args.stop else []
    lat: dict[int, list[float]] = {n: [] for n in caps}
    steps: dict[int, list[int]] = {n: [] for n in caps}
    answers: dict[int, list[str]] = {n: [] for n in caps}
    engine.complete(FimRequest(*PROMPTS[0], max_tokens=8))  # warm-up
    for r in range(args.rounds):
        for prefix, suffix in PROMPTS:
            for n in caps if r % 2 == 0 else caps[::-1]:
                req = FimRequest(prefix, suffix, max_tokens=n, options=SamplingOptions(stop=stop))
                t0 = time.perf_counter()
                c = engine.complete(req)
                lat[n].append(1000 * (time.perf_counter() - t0))
                steps[n].append(c.steps)
                if r == 0:
                    answers[n].append(c.text)
    base = statistics.median(lat[caps[0]])
    rows = {
        n: {
            "p50_ms": round(statistics.median(lat[n]), 2),
            "ratio_to_first": round(statistics.median(lat[n]) / base, 3),
            "mean_steps": round(statistics.mean(steps[n]), 2),
            "same_answers_as_first": answers[n] == answers[caps[0]],
        }
        for n in caps
    }
    print(f"{'max_tokens':>10} {'p50 ms':>8} {'ratio':>6} {'steps':>6} same answers")
    for n, row in rows.items():
        print(
            f"{n:10d} {row['p50_ms']:8.1f} {row['ratio_to_first']:6.2f} {row['mean_steps']:6.1f} "
            f"{row['same_answers_as_first']}"
        )
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "torch_threads": torch.get_num_threads()}, indent=2))
    return 0
