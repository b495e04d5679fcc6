"""``editserver bench index``: the workspace index's build time and memory, and the workspaces it runs on.

Design decisions:
- Measured through a real ``editserver lsp`` process (the app may not import the LSP): started on a
  generated workspace with an empty cache, it reports its build over ``editserver/indexState``;
  memory is the LSP process's resident set (``/proc``) before the build and after it (the index's
  records live there; the parsing worker exits with the build). A second start on the same
  workspace measures reopening from the cache.
- Typing while it builds: a keystroke (``didChange``) and the document's state asked right after,
  every 50 ms during the build, then as many after it, in the same process: the LSP's own share
  of a keystroke, side by side (the model's share does not depend on the index).
- ``write_packages``: Python and TypeScript packages where one function (``compute`` /
  ``computeTotal``) is used through every import form the index follows (``from m import f``,
  ``import m as x``, a package re-export, a named TypeScript import) and where other modules
  define or import a same-named symbol of their own, which a rename must leave alone; a
  ``.gitignore``d folder imports it too and must never be indexed.
- ``write_large``: ``n`` generated modules (a few functions each, importing one another) around the
  same packages, for index build time and memory and the latency scenario at workspace scale.
- ``USES``/``NOT_USES`` say which files a rename of ``compute`` in ``shop/pricing.py`` must reach
  and which it must not; tests and ``bench latency`` check against them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from editserver.bench import _lspclient as lspclient
from editserver.bench._stats import latency_stats, percentile

PRICING = "shop/pricing.py"
FILES = {
    ".gitignore": "build/\n",
    "shop/__init__.py": "from .pricing import compute\n",
    PRICING: (
        "RATE = 0.2\n\n\n"
        "def compute(items, tax):\n"
        "    total = sum(items)\n"
        "    return total * (1 + tax)\n\n\n"
        "def report(items):\n"
        "    return compute(items, RATE)\n"
    ),
    "app/__init__.py": "",
    "app/orders.py": (
        "from shop.pricing import compute\n\n\n"
        "def order_total(order):\n"
        "    return compute(order.items, order.tax)\n\n\n"
        "def refund(order):\n"
        "    return -compute(order.items, 0)\n"
    ),
    "app/cart.py": (
        "import shop.pricing as pricing\n\n\n"
        "class Cart:\n"
        "    def __init__(self):\n"
        "        self.items = []\n\n"
        "    def total(self):\n"
        "        return pricing.compute(self.items, pricing.RATE)\n"
    ),
    "app/api.py": (
        "from shop import compute\n\n\n"
        "def handle(request):\n"
        "    value = compute(request.items, 0.1)\n"
        "    return {'total': value}\n"
    ),
    "other/__init__.py": "",
    "other/local.py": (
        "def compute(values, factor):\n"
        "    return [v * factor for v in values]\n\n\n"
        "def scaled(values):\n"
        "    return compute(values, 2)\n"
    ),
    "other/vendor.py": (
        "from other.local import compute\n\n\ndef doubled(values):\n    return compute(values, 2)\n"
    ),
    "build/generated.py": "from shop.pricing import compute\n\nX = compute([1], 0)\n",
    "web/pricing.ts": (
        "export function computeTotal(items: number[], tax: number): number {\n"
        "  return items.reduce((a, b) => a + b, 0) * (1 + tax);\n"
        "}\n"
    ),
    "web/cart.ts": (
        'import { computeTotal } from "./pricing";\n\n'
        "export function cartTotal(items: number[]): number {\n"
        "  return computeTotal(items, 0.2);\n"
        "}\n"
    ),
    "web/own.ts": (
        "function computeTotal(xs: number[]): number {\n"
        "  return xs.length;\n"
        "}\n\n"
        "export const count = computeTotal([1, 2]);\n"
    ),
}
USES = {"shop/__init__.py": 1, "app/orders.py": 3, "app/cart.py": 1, "app/api.py": 2}  # identifiers
NOT_USES = ["other/local.py", "other/vendor.py", "build/generated.py"]
TS_USES = {"web/cart.ts": 2}
TS_NOT_USES = ["web/own.ts"]


def write_packages(root: Path) -> Path:
    for rel, text in FILES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def _module(i: int, n: int) -> str:
    dep = (i * 7 + 3) % n
    lines = [f"from gen.m{dep:04d} import f{dep}_0\n", "\n\n"] if dep != i else []
    for j in range(4):
        lines.append(f"def f{i}_{j}(values, scale={j}):\n")
        lines.append("    out = []\n    for v in values:\n        out.append(v * scale)\n")
        call = f"f{dep}_0(out)" if dep != i and j == 0 else "out"
        lines.append(f"    return {call}\n\n\n")
    return "".join(lines)


def write_large(root: Path, n: int = 2000) -> Path:
    """The packages plus generated modules up to ``n`` source files in all."""
    write_packages(root)
    gen = root / "gen"
    gen.mkdir(exist_ok=True)
    (gen / "__init__.py").write_text("")
    have = sum(1 for r in FILES if r.endswith((".py", ".ts")) and not r.startswith("build/")) + 1
    for i in range(max(0, n - have)):
        (gen / f"m{i:04d}.py").write_text(_module(i, n - have))
    return root


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


async def _start(root: Path) -> dict:
    """One LSP on ``root``: index state after the build, RSS before and after, ms to the reply."""
    # no model server behind it (port 9 refuses): the index does not need one, so no ready status
    client = await lspclient.start(
        "http://127.0.0.1:9", options={"crossFile": True}, root=root, ready_timeout=None
    )
    t0 = time.perf_counter()
    first = await client.protocol.send_request_async("editserver/indexState", {})
    rss0 = _rss_mb(first.pid)
    uri = (root / PRICING).resolve().as_uri()
    lspclient.open_document(client, uri, (root / PRICING).read_text())
    keys = {"version": 1}

    async def keystroke() -> float:
        """A typed character and the document's state asked right after (didChange, incremental
        parse, history: the LSP's share of a keystroke), in ms."""
        keys["version"] += 1
        t = time.perf_counter()
        lspclient.change(client, uri, keys["version"], (0, 0), (0, 0), "#")
        await client.protocol.send_request_async("editserver/documentState", {"uri": uri})
        return lspclient.since_ms(t)

    during: list[float] = []
    while (await client.protocol.send_request_async("editserver/indexState", {})).state != "ready":
        during.append(await keystroke())
        await asyncio.sleep(0.05)
    state = await client.protocol.send_request_async("editserver/indexState", {"wait": True})
    wall = (time.perf_counter() - t0) * 1000
    after = [await keystroke() for _ in range(max(10, min(len(during), 100)))]
    out = {
        "state": state.state,
        "files": state.files,
        "stats": lspclient.plain(state.stats),
        "rss_before_mb": rss0,
    }
    out.update(rss_after_mb=_rss_mb(state.pid), wall_ms=round(wall, 1))
    out.update(
        keystroke_during_build=percentile(during, 0.5, 2),
        keystroke_after_build=percentile(after, 0.5, 2),
        keystrokes=len(during),
    )
    await lspclient.stop(client)
    return out


async def _cross_sample(url: str, root: Path, env: dict) -> dict:
    """One fresh LSP on the indexed workspace: rename ``compute`` in shop/pricing.py, time the edits."""
    import re

    firsts: dict[str, float] = {}
    pricing = (root / PRICING).resolve().as_uri()

    def partial(params: Any) -> None:
        for e in params.edits or []:
            kind = "in_file" if e.textDocument.uri == pricing else "cross_file"
            firsts.setdefault(kind, time.perf_counter())

    client = await lspclient.start(
        url, options={"crossFile": True}, root=root, env=env, handlers={"editserver/nextEditPartial": partial}
    )
    state = lspclient.plain(await client.protocol.send_request_async("editserver/indexState", {"wait": True}))
    text = (root / PRICING).read_text()
    lspclient.open_document(client, pricing, text)
    line = text.splitlines().index("def compute(items, tax):")
    t0 = time.perf_counter()
    lspclient.change(client, pricing, 2, (line, 4), (line, 11), "compute_total")
    res = await lspclient.next_edit(client, pricing, line, 17)
    t_all = lspclient.since_ms(t0)
    edits = [lspclient.plain(e) for e in res.edits or []]
    renamed = 0
    for rel in USES:
        u = (root / rel).resolve().as_uri()
        after = lspclient.apply_edits(
            (root / rel).read_text(), [e for e in edits if e["textDocument"]["uri"] == u]
        )
        renamed += len(re.findall(r"\bcompute_total\b", after)) if not re.search(r"\bcompute\b", after) else 0
    await lspclient.stop(client)
    ms = {k: (v - t0) * 1000 for k, v in firsts.items()}
    return {"index": state["stats"], "all": t_all, "renamed": renamed, **ms}


async def measure_cross_file(url: str, samples: int, files: int, bar=None) -> dict:
    """``bench latency``'s cross-file scenario (see the module notes of bench/latency.py)."""
    got: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = write_large(Path(tmp) / "ws", files)
        env = {**os.environ, "XDG_CACHE_HOME": str(Path(tmp) / "cache")}
        for _ in range(samples):
            if bar is not None:
                bar.update()
            got.append(await _cross_sample(url, root, env))
    never = [g["all"] for g in got]
    return {
        "workspace_files": files,
        "files_using": len(USES),
        "uses": sum(USES.values()),
        "samples": samples,
        "index": got[0]["index"] if got else {},
        "first_in_file": latency_stats([g.get("in_file", a) for g, a in zip(got, never)]),
        "first_cross_file": latency_stats([g.get("cross_file", a) for g, a in zip(got, never)]),
        "all_shown": latency_stats(never),
        "renamed_per_sample": [g["renamed"] for g in got],
    }


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("index", help="workspace index build time and memory on a generated workspace")
    p.add_argument("--files", type=int, default=2000, help="source files in the generated workspace")
    p.add_argument("--dir", type=Path, default=None, help="generate here (default: a temporary folder)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not 10 <= args.files <= 20000:
        print("editserver bench index: error: --files must be 10..20000", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        root = write_large((args.dir or Path(tmp)) / "ws", args.files)
        os.environ["XDG_CACHE_HOME"] = str(Path(tmp) / "cache")  # a cold cache, then a warm one
        cold = asyncio.run(_start(root))
        warm = asyncio.run(_start(root))
    print(f"files indexed: {cold['files']} (skipped {cold['stats'].get('skipped')})")
    print(
        f"cold build: {cold['stats'].get('seconds')} s, LSP RSS {cold['rss_before_mb']} -> {cold['rss_after_mb']} MB"
    )
    print(
        f"LSP keystroke (didChange + documentState) p50: {cold['keystroke_during_build']} ms during the build"
        f" ({cold['keystrokes']} samples), {cold['keystroke_after_build']} ms after it"
    )
    print(f"reopen from cache: {warm['stats'].get('seconds')} s, parsed {warm['stats'].get('parsed')}")
    return 0
