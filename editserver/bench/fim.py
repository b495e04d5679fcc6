"""``editserver bench fim``: HumanEval infilling pass@1, exact match, latency and tokens per step.

Design decisions:
- Greedy decoding (pass@1 as the peers report it) through the model's entry point, so the figures
  are what the server delivers.
- Side by side in one run: parallel unmasking (the effort's rule: its threshold, or joint bound) and the
  one-token-per-step baseline over the same tasks, so the speedup and its quality cost are a ratio
  measured on one machine at one time.
- Generated code is untrusted: each check runs in its own ``python`` subprocess with a timeout, in a
  temporary directory, with a small pool so the benchmark stays bounded. The program also caps its
  own CPU time (``RLIMIT_CPU``), so a looping answer dies even when the benchmark itself is killed
  before its timeout can.
- Single-line suites keep the first line of the infill (what the LSP shows for a mid-file cursor);
  ``--keep-lines`` turns that off. They also ask with ``stop: ["\\n"]``, as the LSP's single-line
  requests do, so decoding ends at the line's end and the latency and tokens per step are the ones
  an editor sees (``--no-stop`` decodes the whole canvas and cuts afterwards, as
  this benchmark once did).
- Beside the raw figures, ``postprocessed`` scores the same answers after protocol/postprocess.py
  (what ``/v1/fim/completions`` sends): pass@1, exact match, how many answers it changed and which
  rules fired. Only changed answers are executed again.
- ``--decode published,default`` runs an open family's published generation loop (plan.py
  ``published_plan``: the publisher's order, one token per step, the whole canvas from the first
  step) and the fast default over the same tasks in one run and prints both rows, so the quality a
  publisher's figure was measured with and what the server decodes are compared on one machine at
  one time. The first name listed is the JSON's top level; the other sits under its own key.
- ``--decode default,fixed`` likewise compares the default (a canvas that grows) with fixed canvas
  lengths side by side (``--canvases``, model/infer/lengths.py: rows of one batch, the likeliest
  answer wins, a filled one is decoded again on a longer fixed canvas).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from editserver.bench._stats import percentile
from editserver.protocol.postprocess import trim

L2R_CE_MAX_TOKENS = 64  # canvases up to this long also get the left-to-right cross-entropy


DEFAULT_SUITE = Path("../shared/data/fim/humaneval-singleline-infilling.jsonl.gz")
SUITE_HELP = (
    "pass --suite FILE: a HumanEval infilling suite as .jsonl.gz (task_id, prompt, suffix, "
    "canonical_solution, test, entry_point per line), e.g. HumanEval-SingleLineInfilling.jsonl.gz "
    "from OpenAI's human-eval-infilling release, gzipped"
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fim", help="HumanEval infilling: pass@1, exact match, latency, tokens/step")
    p.add_argument(
        "--suite",
        type=Path,
        default=DEFAULT_SUITE,
        help="HumanEval infilling suite (.jsonl.gz; default: %(default)s, where this project's data lives)",
    )
    p.add_argument("--model", type=Path, default=None, help="checkpoint directory (default: shipped)")
    p.add_argument("--limit", type=int, default=None, help="first N tasks (after a seeded shuffle)")
    p.add_argument("--seed", type=int, default=0, help="seed of the task shuffle before --limit")
    p.add_argument("--effort", default=None, help="instant|low|medium|high (default: the checkpoint's)")
    p.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="canvas length (default 32 single-line, the LSP's; 128 multi)",
    )
    p.add_argument(
        "--keep-lines", action="store_true", help="do not cut single-line infills at the first line"
    )
    p.add_argument(
        "--block-size", type=int, default=None, help="semi-autoregressive block size (default: the effort's)"
    )
    p.add_argument(
        "--line-steps",
        type=int,
        default=None,
        help="step budget per block of single-line requests (default: the effort's; 0: none)",
    )
    p.add_argument(
        "--no-stop", action="store_true", help="single-line suites: decode the whole canvas, then cut"
    )
    p.add_argument("--no-sequential", action="store_true", help="skip the one-token-per-step baseline")
    p.add_argument(
        "--no-ce",
        action="store_true",
        help="skip the canonical infills' cross-entropy (decoding-independent; reported as null)",
    )
    p.add_argument(
        "--one-token",
        choices=["confident", "left"],
        default=None,
        help="decode the measured run one token per step too: the most confident (the baseline's "
        "rule) or the leftmost position",
    )
    p.add_argument(
        "--fim-window",
        type=int,
        default=None,
        help="override the checkpoint's FIM window in tokens (0 keeps the whole prefix and suffix)",
    )
    p.add_argument(
        "--decode",
        default="default",
        help="comma-separated decodes run side by side over the same tasks: default (the effort's "
        "parallel unmasking) and/or published (an open family's own loop: Dream-family lowest entropy "
        "first, LLaDA highest probability in 32-token blocks; one token per step), e.g. "
        "published,default; fixed: the --canvases lengths side by side, the likeliest answer kept "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--canvases",
        default="8,16,32,64",
        help="fixed canvas lengths for --decode fixed, capped by --max-tokens (default: %(default)s)",
    )
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per test execution")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    p.add_argument(
        "--quantize",
        default="auto",
        help="auto | none | int8 | packed | w8a8: CPU weights (model/infer/quant.py; default auto, as the server)",
    )
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    p.set_defaults(func=run)


def load_suite(path: Path, limit: int | None, seed: int) -> list[dict]:
    import random

    with gzip.open(path, "rt", encoding="utf-8") as fh:
        tasks = [json.loads(line) for line in fh]
    if limit is not None and limit < len(tasks):
        random.Random(seed).shuffle(tasks)
        tasks = tasks[:limit]
    return tasks


def first_line(text: str) -> str:
    """The infill up to and including its first newline (leading blank lines are skipped)."""
    stripped = text.lstrip("\n")
    cut = stripped.find("\n")
    return stripped if cut < 0 else stripped[: cut + 1]


def passes(task: dict, completion: str, timeout: float) -> bool:
    cap = math.ceil(timeout) + 1  # CPU seconds; the wall-clock timeout below usually acts first
    program = (
        f"import resource as _rl\n_rl.setrlimit(_rl.RLIMIT_CPU, ({cap}, {cap}))\n"
        + task["prompt"]
        + completion
        + task["suffix"]
        + "\n"
        + task["test"]
        + f"\ncheck({task['entry_point']})\n"
    )
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "prog.py"
        path.write_text(program)
        try:
            r = subprocess.run(
                [sys.executable, str(path)],
                cwd=d,
                capture_output=True,
                timeout=timeout,
                env={"PATH": os.environ.get("PATH", ""), "PYTHONHASHSEED": "0"},
            )
        except subprocess.TimeoutExpired:
            return False
    return r.returncode == 0


def evaluate(
    engine,
    tasks: list[dict],
    *,
    sequential: bool,
    effort: str | None,
    max_tokens: int,
    single_line: bool,
    timeout: float,
    label: str,
    block_size: int | None = None,
    line_steps: int | None = None,
    stop: list[str] | None = None,
    left_to_right: bool = False,
    published: bool = False,
    canvases: tuple[int, ...] = (),
) -> dict:
    from tqdm import tqdm

    from editserver.model.infer.engine import FimRequest, SamplingOptions

    outs, lat, toks, steps, rows = [], [], 0, 0, 0
    pp_outs: list[str] = []
    rules: Counter[str] = Counter()
    engine.complete(FimRequest("def f():\n    return ", "\n", max_tokens=8))  # warm-up
    for t in tqdm(tasks, desc=label, file=sys.stderr):
        c = engine.complete(
            FimRequest(
                t["prompt"],
                t["suffix"],
                max_tokens=max_tokens,
                options=SamplingOptions(
                    effort=effort,
                    sequential=sequential,
                    block_size=block_size,
                    line_steps=line_steps,
                    stop=list(stop or []),
                    left_to_right=left_to_right,
                    published=published,
                    canvases=canvases,
                ),
            )
        )
        # a stop cuts its sequence off; the line keeps it, as the whole-canvas cut does (an answer that
        # ended at end-of-text before any newline gets none, exactly as in the whole-canvas decode)
        text = c.text + c.stop_sequence if c.stop_sequence else c.text
        text = first_line(text) if single_line else text
        outs.append(text)
        # what the HTTP API sends after protocol/postprocess.py (the stop it cut is put back as above)
        t_pp = trim(c.text, t["prompt"], t["suffix"])
        pp = t_pp.text + c.stop_sequence if c.stop_sequence else t_pp.text
        pp_outs.append(first_line(pp) if single_line else pp)
        rules.update(t_pp.trimmed)
        lat.append(c.latency_s * 1000)
        toks += c.completion_tokens
        steps += c.steps
        rows += c.row_steps
    with ThreadPoolExecutor(2) as pool:
        ok = list(pool.map(lambda a: passes(a[0], a[1], timeout), zip(tasks, outs)))
    exact = [o.strip() == t["canonical_solution"].strip() for o, t in zip(outs, tasks)]
    changed = [i for i, (o, p) in enumerate(zip(outs, pp_outs)) if o != p]
    with ThreadPoolExecutor(2) as pool:  # only answers the post-processing changed are run again
        pp_ok = dict(zip(changed, pool.map(lambda i: passes(tasks[i], pp_outs[i], timeout), changed)))
    pp_pass = [pp_ok.get(i, ok[i]) for i in range(len(tasks))]
    pp_exact = [o.strip() == t["canonical_solution"].strip() for o, t in zip(pp_outs, tasks)]
    return {
        "postprocessed": {
            "pass_at_1": sum(pp_pass) / max(1, len(tasks)),
            "exact_match": sum(pp_exact) / max(1, len(tasks)),
            "changed": len(changed),
            "rules": dict(rules),
        },
        "n": len(tasks),
        "pass_at_1": sum(ok) / max(1, len(tasks)),
        "exact_match": sum(exact) / max(1, len(tasks)),
        "tokens_per_step": toks / max(1, steps),
        "rows_per_step": rows / max(1, steps),
        "latency_ms": {"p50": percentile(lat, 0.5), "p95": percentile(lat, 0.95)},
        "samples": [
            {"task_id": t["task_id"], "completion": o, "passed": p} for t, o, p in zip(tasks, outs, ok)
        ],
    }


def _cross_entropy(engine, tasks: list[dict], max_tokens: int, skip: bool) -> tuple[list, list]:
    """Decoding-independent, so measured once: how likely the model finds each canonical infill, from
    a fully masked canvas and written left to right (model/infer/middle_ce.py). Left to right runs one full
    row per answer token, so its cost grows with the square of the canvas: a 128-token multi-line
    canvas would take a minute a task on two cores; such suites report it as null."""
    from editserver.model.infer.engine import FimRequest
    from editserver.model.infer.middle_ce import middle_ce

    l2r = max_tokens <= L2R_CE_MAX_TOKENS
    ce, ce_l2r = [], []
    for t in [] if skip else tasks:
        req = FimRequest(t["prompt"], t["suffix"], max_tokens=max_tokens)
        ce.append(middle_ce(engine, req, t["canonical_solution"]))
        if l2r:
            ce_l2r.append(middle_ce(engine, req, t["canonical_solution"], left_to_right=True))
    return ce, ce_l2r


def _compare_sequential(result: dict, seq: dict) -> None:
    result["sequential"] = seq
    result["speedup_p50"] = seq["latency_ms"]["p50"] / max(1e-9, result["latency_ms"]["p50"])
    result["pass_at_1_cost"] = seq["pass_at_1"] - result["pass_at_1"]
    # what parallel unmasking changed: the share of tasks answered exactly as one token per step
    # answers them (a quality cost that is measurable while pass@1 is near zero)
    same = [a["completion"] == b["completion"] for a, b in zip(result["samples"], seq["samples"])]
    result["agreement"] = sum(same) / max(1, len(same))


def _settings(args, engine, effort: str, max_tokens: int, single: bool, stop: list[str]) -> dict:
    import torch

    preset = engine.inference.efforts[effort]
    return {
        "suite": args.suite.name,
        "effort": effort,
        "threshold": preset.threshold,
        "gamma": preset.gamma,  # set: the joint rule, not the threshold
        "margin": preset.margin,  # the joint rule reads p1 - p2
        "one_copy": preset.one_copy,  # adjacent same tokens: the surer
        "one_token": args.one_token,  # the measured run's rule, when one token per step
        "block_size": args.block_size or preset.block_for(edit=False),
        "line_steps": args.line_steps if args.line_steps is not None else preset.line_steps,
        "max_tokens": max_tokens,
        "single_line_cut": single,
        "stop": stop,
        "canvases": list(args.canvases) if "fixed" in args.decode else None,
        "model": str(args.model or "shipped default"),
        "checkpoint_meta": engine.ck.meta,
        "window_tokens": engine.inference.window_tokens,
        "torch_threads": torch.get_num_threads(),
    }


DECODES = ("default", "published", "fixed")


def parse_decodes(text: str, family: str) -> tuple[str, ...] | str:
    """The ``--decode`` list in its given order, or the one-line error a user sees."""
    from editserver.model.infer.plan import BLOCK_RULES, PUBLISHED

    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    bad = [n for n in names if n not in DECODES]
    if bad or not names:
        return f"--decode takes {', '.join(DECODES)} (comma-separated), got {text!r}"
    known = {*PUBLISHED, *BLOCK_RULES}  # block families: their published rule (plan.py ``block_rule``)
    if "published" in names and family not in known:
        return f"--decode published: no published decoding loop for the {family} family; families: " + (
            ", ".join(sorted(known))
        )
    return names


def _compare_decodes(result: dict, other: dict, name: str) -> None:
    """The second decode's block, and how its answers and speed compare with the first's."""
    result[name] = other
    same = [a["completion"] == b["completion"] for a, b in zip(result["samples"], other["samples"])]
    result[f"{name}_agreement"] = sum(same) / max(1, len(same))
    result[f"{name}_latency_ratio_p50"] = other["latency_ms"]["p50"] / max(1e-9, result["latency_ms"]["p50"])


def _print(result: dict) -> None:
    names = result["decode"]
    blocks = {n: result if i == 0 else result[n] for i, n in enumerate(names)}
    rows = [("parallel" if n == "default" else n, blocks[n]) for n in names]
    default = blocks.get("default", {})
    rows += [("one token/step", default["sequential"])] if "sequential" in default else []
    head = f"{'mode':16} {'n':>5} {'pass@1':>7} {'exact':>7} {'tok/step':>9} {'rows/step':>9}"
    print(f"{head} {'p50 ms':>8} {'p95 ms':>8}")
    for name, r in rows:
        print(
            f"{name:16} {r['n']:5d} {r['pass_at_1']:7.1%} {r['exact_match']:7.1%} {r['tokens_per_step']:9.2f} "
            f"{r['rows_per_step']:9.2f} {r['latency_ms']['p50']:8.1f} {r['latency_ms']['p95']:8.1f}"
        )
    pp = result["postprocessed"]
    print(
        f"after protocol/postprocess.py (what /v1/fim/completions sends): pass@1 {pp['pass_at_1']:.1%},"
        f" exact {pp['exact_match']:.1%}; {pp['changed']} answers changed ({pp['rules']})"
    )
    l2r_text = (
        f"{result['middle_ce_l2r']:.3f} written left to right"
        if result["middle_ce_l2r"] is not None
        else f"left to right not measured (canvas over {L2R_CE_MAX_TOKENS} tokens)"
    )
    if result["middle_ce"] is not None:
        print(
            f"canonical infill cross-entropy: {result['middle_ce']:.3f} nats/token fully masked, {l2r_text}"
        )
    for n in names[1:]:
        print(
            f"{n} vs {names[0]}: p50 latency {result[n + '_latency_ratio_p50']:.2f}x; "
            f"same answer: {result[n + '_agreement']:.1%}"
        )
    if "speedup_p50" in default:
        print(
            f"speedup (p50 latency, sequential/parallel): {default['speedup_p50']:.2f}x; "
            f"pass@1 cost: {100 * default['pass_at_1_cost']:.1f} points; "
            f"same answer as one token/step: {default['agreement']:.1%}"
        )


def _load(args):
    """(engine, effort, tasks, decodes), or an error message."""
    import torch

    from editserver.model.infer.engine import Engine

    if not args.suite.is_file():
        return f"suite not found: {args.suite}; {SUITE_HELP}"
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        engine = Engine.load(args.model, quantize=args.quantize)
    except (FileNotFoundError, ValueError) as e:  # a mistyped --model or --quantize: one line
        return str(e)
    if args.fim_window is not None:
        engine.inference.window_tokens = args.fim_window or None
    decodes = parse_decodes(args.decode, engine.family)
    if isinstance(decodes, str):
        return decodes
    try:
        args.canvases = tuple(int(n) for n in str(args.canvases).split(",") if n.strip())
    except ValueError:
        return f"--canvases takes comma-separated token counts, got {args.canvases!r}"
    try:
        effort = engine.resolve_effort(args.effort)
    except ValueError as e:  # before the cross-entropy pass, not a traceback minutes later
        return str(e)
    tasks = load_suite(args.suite, args.limit, args.seed)
    if not tasks:
        return f"no tasks to run (suite {args.suite}, --limit {args.limit})"
    return engine, effort, tasks, decodes


def run(args: argparse.Namespace) -> int:
    loaded = _load(args)
    if isinstance(loaded, str):
        print(loaded)
        return 2
    engine, effort, tasks, decodes = loaded
    single = "singleline" in args.suite.name and not args.keep_lines
    max_tokens = args.max_tokens or (32 if "singleline" in args.suite.name else 128)
    t0 = time.time()
    ce, ce_l2r = _cross_entropy(engine, tasks, max_tokens, args.no_ce)
    stop = ["\n"] if single and not args.no_stop else []
    kw = dict(
        effort=effort,
        max_tokens=max_tokens,
        single_line=single,
        timeout=args.timeout,
        block_size=args.block_size,
        line_steps=args.line_steps,
        stop=stop,
    )
    one = dict(sequential=args.one_token is not None, left_to_right=args.one_token == "left")
    runs = {}
    try:
        for name in decodes:  # the same tasks, one decode after the other
            how = {
                "published": dict(sequential=False, published=True),
                "fixed": dict(one, canvases=args.canvases),
            }.get(name, one)
            runs[name] = evaluate(engine, tasks, label=name, **how, **kw)
    except ValueError as e:  # options the engine cannot plan: say so, not a traceback
        print(e)
        return 2
    result = runs[decodes[0]]
    result["decode"] = list(decodes)
    for name in decodes[1:]:
        _compare_decodes(result, runs[name], name)
    if not args.no_sequential and "default" in decodes:  # the published loop is one token per step
        seq = evaluate(engine, tasks, sequential=True, label="sequential", **kw)
        _compare_sequential(runs["default"], seq)
    result["middle_ce"] = sum(ce) / len(ce) if ce else None
    result["middle_ce_l2r"] = sum(ce_l2r) / len(ce_l2r) if ce_l2r else None
    result.update(_settings(args, engine, effort, max_tokens, single, stop))
    result["wall_s"] = round(time.time() - t0, 1)
    _print(result)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0
