"""``editserver bench index``: the workspace index's build time and memory, and the workspaces it runs on.

Design decisions:
- Measured through a real ``editserver lsp`` process (the app may not import the LSP): started on a
  generated workspace with an empty cache, it reports its build over ``editserver/indexState``;
  memory is the LSP process's resident set (``/proc``) before the build and after it (the index's
  records live there; the parsing worker exits with the build). A second start on the same
  workspace measures reopening from the cache.
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
    from lsprotocol import types
    from pygls.lsp.client import LanguageClient

    client = LanguageClient("editserver-bench", "0.1")
    cmd = [
        sys.executable,
        "-m",
        "editserver.cli",
        "lsp",
        "--server-url",
        "http://127.0.0.1:9",
        "--no-autostart",
    ]
    await client.start_io(*cmd)
    opts = {"telemetry": {"enabled": False}, "crossFile": True}
    await client.initialize_async(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(), initialization_options=opts, root_uri=root.as_uri()
        )
    )
    t0 = time.perf_counter()
    client.initialized(types.InitializedParams())
    first = await client.protocol.send_request_async("editserver/indexState", {})
    rss0 = _rss_mb(first.pid)
    state = await client.protocol.send_request_async("editserver/indexState", {"wait": True})
    wall = (time.perf_counter() - t0) * 1000
    out = {"state": state.state, "files": state.files, "stats": _plain(state.stats), "rss_before_mb": rss0}
    out.update(rss_after_mb=_rss_mb(state.pid), wall_ms=round(wall, 1))
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return out


def _plain(x: Any) -> Any:
    return {k: _plain(v) for k, v in x._asdict().items()} if hasattr(x, "_asdict") else x


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
    print(f"reopen from cache: {warm['stats'].get('seconds')} s, parsed {warm['stats'].get('parsed')}")
    return 0
