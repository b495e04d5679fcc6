"""``editserver bench keystrokes``: lines typed a few characters at a time, a FIM request at each stop,
through the HTTP server with context reuse on and off side by side.

Design decisions:
- The typing comes from commit records at run time (``--edits DIR``, the held-out repositories of
  ``model.train.data.HELD_OUT_REPOS`` only, so no line was trained on): per record, the first line a
  commit added that has something to type, in the file as committed. The user stands at the line's
  indentation with the line not yet written (the rest of the file below it), types ``--chars``
  characters, and the editor asks for the rest of the line (one-line FIM, ``stop`` a newline), and
  so on to the line's end. Nothing is committed to the repository.
- Two real servers (``editserver serve`` on loopback), one with reuse off (``--prefix-cache-mb 0``)
  and one with it on (with ``--prefix-cache-suffix``, the text after the cursor reused too), both
  with ``--fim-threshold 0`` so every answer is shown and compared. Each request goes to both, in
  alternating order, so machine noise falls on both alike.
- Per server: p50/p95 per request after the first of each line (a line is one file's typing: its
  first request finds nothing of its own to reuse), the first request's p50 (time to first answer
  in a file), and the exact-match rate (the answer is the rest of the line as committed). Between
  them: the share of identical answers, the measure of what the approximation changes.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from editserver.bench._stats import percentile


@dataclass
class Line:
    above: str  # the file above the line, then the line's indentation
    typed: str  # what the user types (the line without indentation)
    below: str  # a newline, then the file below the line
    source: str  # repository and path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("keystrokes", help="typing replay through HTTP, context reuse on and off")
    p.add_argument("--edits", type=Path, required=True, help="folder of commit-edit records (*.jsonl.xz)")
    p.add_argument("--model", type=Path, default=None, help="checkpoint directory (default: shipped)")
    p.add_argument("--lines", type=int, default=20, help="lines typed, one per record (default 20)")
    p.add_argument("--chars", type=int, default=3, help="characters typed between requests (default 3)")
    p.add_argument("--context-lines", type=int, default=60, help="file lines above and below (default 60)")
    p.add_argument("--max-tokens", type=int, default=24, help="max_tokens of each request (default 24)")
    p.add_argument("--prefix-cache-mb", type=float, default=256, help="reuse side's store (default 256)")
    p.add_argument(
        "--prefix-cache-suffix",
        action="store_true",
        help="the reuse side reuses the text after the cursor too",
    )
    p.add_argument("--threads", type=int, default=2, help="torch threads per server (default 2)")
    p.add_argument("--dtype", default="auto", help="serving dtype of both servers (default auto)")
    p.add_argument("--device", default="cpu", help="serving device of both servers (default cpu)")
    p.add_argument(
        "--quantize",
        default="auto",
        help="weights of both servers: auto | none | int8 | packed | w8a8 (default auto, as the server)",
    )
    p.add_argument("--seed", type=int, default=0, help="which records are typed (default 0)")
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    p.set_defaults(func=run)


def _added_lines(rec: dict) -> list[tuple[int, list[str]]]:
    """(line index in the committed file, the committed file's lines) of each line the commit added."""
    from editserver.model.train.data import apply_hunks

    before = rec["before"].splitlines(keepends=True)
    after = apply_hunks(before, rec["hunks"])
    out, delta = [], 0
    for start, length, new_text in sorted(rec["hunks"], key=lambda h: h[0]):
        new = new_text.splitlines()
        out += [(start + delta + i, after) for i in range(len(new))]
        delta += len(new) - length
    return out


def typing_lines(edits: Path, n: int, context_lines: int, seed: int) -> list[Line]:
    """``n`` lines to type from the held-out repositories' records (module docstring)."""
    from editserver.model.train.data import edit_record_files, iter_records

    files = edit_record_files(edits, held_out=True)
    if not files:
        raise FileNotFoundError(f"{edits} holds no held-out repository's records (*.jsonl.xz)")
    records = list(iter_records(files))
    random.Random(seed).shuffle(records)
    lines = []
    for rec in records:
        for i, after in _added_lines(rec):
            text = after[i].rstrip("\n") if i < len(after) else ""
            typed = text.lstrip()
            if len(typed) < 12 or typed.startswith(("#", "//", '"""')):
                continue
            above = "".join(after[max(0, i - context_lines) : i]) + text[: len(text) - len(typed)]
            below = "\n" + "".join(after[i + 1 : i + 1 + context_lines])
            lines.append(Line(above, typed, below, f"{rec['repo']}:{rec['path']}"))
            break
        if len(lines) == n:
            break
    return lines


def _ask(client, url: str, body: dict) -> tuple[float, str]:
    t0 = time.perf_counter()
    r = client.post(f"{url}/v1/fim/completions", json=body)
    ms = 1000 * (time.perf_counter() - t0)
    r.raise_for_status()
    return ms, r.json()["choices"][0]["text"]


def _summary(first: list[float], later: list[float], exact: list[bool]) -> dict:
    def _pct(xs: list[float], q: float) -> float:  # 0.0 when empty: the table prints numbers
        got = percentile(xs, q, 1)
        return 0.0 if got is None else got

    return {
        "first_p50_ms": _pct(first, 0.5),
        "p50_ms": _pct(later, 0.5),
        "p95_ms": _pct(later, 0.95),
        "exact": round(sum(exact) / max(1, len(exact)), 4),
    }


def run(args: argparse.Namespace) -> int:
    import httpx

    from editserver.bench.load import LocalServer, ServerStartError

    if args.chars < 1 or args.lines < 1:
        print("editserver bench keystrokes: error: --chars and --lines must be at least 1", file=sys.stderr)
        return 2
    try:
        lines = typing_lines(args.edits, args.lines, args.context_lines, args.seed)
    except (FileNotFoundError, OSError, ValueError) as e:
        print(f"editserver bench keystrokes: error: {e}", file=sys.stderr)
        return 2
    common = ["--fim-threshold", "0", "--dtype", args.dtype, "--device", args.device]
    common += ["--quantize", args.quantize, *(["--model", str(args.model)] if args.model else [])]
    arms = {"off": 0.0, "on": args.prefix_cache_mb}
    stats = {a: {"first": [], "later": [], "exact": []} for a in arms}
    same, n = 0, 0
    try:
        with (
            LocalServer([*common, "--prefix-cache-mb", "0"], threads=args.threads) as off,
            LocalServer(
                [
                    *common,
                    "--prefix-cache-mb",
                    str(arms["on"]),
                    *(["--prefix-cache-suffix"] * args.prefix_cache_suffix),
                ],
                threads=args.threads,
            ) as on,
            httpx.Client(timeout=600) as client,
        ):
            urls = {"off": off.url, "on": on.url}
            for url in urls.values():  # warm-up: first-call costs are not a line's
                _ask(client, url, {"prompt": "x = ", "suffix": "\n", "max_tokens": 4, "stop": ["\n"]})
            for li, line in enumerate(lines):
                for j, k in enumerate(range(args.chars, len(line.typed), args.chars)):
                    body = {
                        "model": "editserver",
                        "prompt": line.above + line.typed[:k],
                        "suffix": line.below,
                        "max_tokens": args.max_tokens,
                        "stop": ["\n"],
                    }
                    order = list(arms) if (li + j) % 2 == 0 else list(arms)[::-1]
                    texts = {}
                    for arm in order:
                        ms, texts[arm] = _ask(client, urls[arm], body)
                        stats[arm]["first" if j == 0 else "later"].append(ms)
                        stats[arm]["exact"].append(texts[arm].strip() == line.typed[k:].strip())
                    same, n = same + (texts["on"] == texts["off"]), n + 1
            store = client.get(f"{urls['on']}/health").json()["prefix_cache"]  # the reuse side's counters
    except (ServerStartError, httpx.HTTPError) as e:
        print(f"editserver bench keystrokes: error: {e}", file=sys.stderr)
        return 2
    out = {a: _summary(s["first"], s["later"], s["exact"]) for a, s in stats.items()}
    out["identical"] = round(same / max(1, n), 4)
    out["requests"], out["lines"], out["store"] = n, len(lines), store
    print(f"{len(lines)} lines, {n} requests per server ({args.chars} characters between requests)")
    print(f"{'reuse':>5} {'first p50':>10} {'p50 ms':>8} {'p95 ms':>8} {'exact':>6}")
    for a in arms:
        r = out[a]
        print(f"{a:>5} {r['first_p50_ms']:10.1f} {r['p50_ms']:8.1f} {r['p95_ms']:8.1f} {r['exact']:6.3f}")
    print(f"identical answers, on vs off: {out['identical']:.3f}")
    done = store["reused_tokens"] + store["computed_tokens"]
    print(f"context tokens reused on the reuse side: {store['reused_tokens'] / max(1, done):.3f}"
          + (" (the text after the cursor too)" if store["suffix"] else ""))  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0
