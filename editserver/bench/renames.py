"""``editserver bench renames``: does the model carry a rename to the other places it occurs?

The first next edit users expect after renaming an identifier is the same rename at its other uses.
This benchmark asks exactly that, on files the model never trained on: synthetic renames
(``model.train.synth.rename_example``, the generator of the training rows, seeded) made in the files of
the held-out repositories of ``../shared/data/edits``, one example per file.

Design decisions:
- Through the model's entry point (``Engine.complete`` with an ``EditRequest``), greedy, so the
  figures are what ``/v1/edit/completions`` delivers.
- Reported: exact match of the rewritten region; *propagated* (the answer holds the new name at
  least as often as the answer should, and the old name no more often: the rename happened even if
  some other character differs); *changed* (the model answered something other than the region);
  shown (the score clears the checkpoint's selectivity threshold); latency p50/p95; tokens/step.
- Next to the model, the draft alone (``draft_exact``): the region with the history's renames
  applied (model/infer/draft.py), the input a ``canvas_draft`` model starts from. What the model adds is
  the difference (it must keep strings, comments and other objects' attributes).
- Regions longer than ``--max-region-chars`` are skipped: the LSP asks about small regions (1-8
  lines) around other occurrences.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path

from editserver.bench._stats import percentile


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("renames", help="next edit after a rename: is it carried to other occurrences?")
    p.add_argument("--edits", type=Path, default=Path("../shared/data/edits"), help="commit-edit records")
    p.add_argument("--model", type=Path, default=None, help="checkpoint directory (default: shipped)")
    p.add_argument("--limit", type=int, default=100, help="examples (one per held-out file)")
    p.add_argument("--seed", type=int, default=0, help="seed of the file sample")
    p.add_argument(
        "--max-region-chars", type=int, default=400, help="skip files whose region is longer (default: 400)"
    )
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    p.add_argument("--effort", default=None, help="instant|low|medium|high (default: the checkpoint's)")
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    p.set_defaults(func=run)


def examples(edits: Path, limit: int, seed: int, max_chars: int) -> list[tuple]:
    """(prompt, answer, old name, new name) from held-out files, one per (repo, path)."""
    from editserver.model.train.data import edit_record_files, iter_records
    from editserver.model.train.synth import rename_example

    recs = list(iter_records(edit_record_files(edits, held_out=True)))
    rng = random.Random(seed)
    rng.shuffle(recs)
    seen: set[tuple[str, str]] = set()
    out = []
    for r in recs:
        if len(out) >= limit:
            break
        if (r["repo"], r["path"]) in seen:
            continue
        seen.add((r["repo"], r["path"]))
        ex = rename_example(r["path"], r["before"], rng)
        if ex is None or len(ex[0].region) > max_chars:
            continue
        p, answer = ex
        removed = re.search(r"^-(?!--)(.*)$", p.history, re.M)
        added = re.search(r"^\+(?!\+\+)(.*)$", p.history, re.M)
        old_new = _renamed(removed.group(1), added.group(1)) if removed and added else None
        if old_new:
            out.append((p, answer, *old_new))
    return out


def _renamed(before: str, after: str) -> tuple[str, str] | None:
    """The (old, new) identifier that turns ``before`` into ``after``."""
    a, b = re.findall(r"\w+", before), re.findall(r"\w+", after)
    pairs = {(x, y) for x, y in zip(a, b) if x != y}
    return next(iter(pairs)) if len(a) == len(b) and len(pairs) == 1 else None


def _count(name: str, text: str) -> int:
    return len(re.findall(r"(?<!\w)" + re.escape(name) + r"(?!\w)", text))


def run(args: argparse.Namespace) -> int:
    import torch
    from tqdm import tqdm

    from editserver.model.infer.draft import apply_renames, history_renames
    from editserver.model.infer.engine import EditRequest, Engine, SamplingOptions
    from editserver.protocol.prompt import build_prompt

    if not args.edits.is_dir():
        print(
            f"edit records not found: {args.edits}; pass --edits DIR: a folder of commit-edit records "
            "(.jsonl.xz per repository, as `editserver train --repo` mines them from any git "
            "repository; docs/replay.md describes the format)"
        )
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    exs = examples(args.edits, args.limit, args.seed, args.max_region_chars)
    if not exs:
        print(f"no rename examples in the held-out records of {args.edits}")
        return 2
    try:
        engine = Engine.load(args.model)
    except FileNotFoundError as e:  # a mistyped --model: say so, not a traceback
        print(e)
        return 2
    try:
        effort = engine.resolve_effort(args.effort, edit=True)
    except ValueError as e:
        print(e)
        return 2
    lat, samples = [], []
    exact = propagated = changed = shown = toks = steps = draft_exact = 0
    t0 = time.time()
    for p, answer, old, new in tqdm(exs, desc="renames", file=sys.stderr):
        c = engine.complete(EditRequest(build_prompt(p), options=SamplingOptions(effort=effort)))
        lat.append(c.latency_s * 1000)
        toks, steps = toks + c.completion_tokens, steps + c.steps
        ok = c.text == answer
        draft_exact += apply_renames(p.region, history_renames(p.history)) == answer
        carried = _count(new, c.text) >= _count(new, answer) and _count(old, c.text) <= _count(old, answer)
        exact, propagated = exact + ok, propagated + carried
        changed += not c.unchanged
        shown += bool(c.above_threshold and not c.unchanged)
        samples.append({"region": p.region, "answer": answer, "model": c.text, "score": c.score})
    n = len(exs)
    result = {
        "n": n,
        "exact_match": exact / n,
        "draft_exact": draft_exact / n,
        "propagated": propagated / n,
        "changed": changed / n,
        "shown": shown / n,
        "tokens_per_step": toks / max(1, steps),
        "latency_ms": {"p50": percentile(lat, 0.5), "p95": percentile(lat, 0.95)},
        "effort": effort,
        "model": str(args.model or "shipped default"),
        "checkpoint_meta": engine.ck.meta,
        "selectivity_threshold": engine.inference.selectivity_threshold,
        "torch_threads": torch.get_num_threads(),
        "wall_s": round(time.time() - t0, 1),
        "samples": samples,
    }
    print(
        f"n {n}  exact {result['exact_match']:.1%}  (draft alone {result['draft_exact']:.1%})  "
        f"propagated {result['propagated']:.1%}  "
        f"changed {result['changed']:.1%}  shown {result['shown']:.1%}  "
        f"tok/step {result['tokens_per_step']:.2f}  p50 {result['latency_ms']['p50']:.0f} ms  "
        f"p95 {result['latency_ms']['p95']:.0f} ms"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0
