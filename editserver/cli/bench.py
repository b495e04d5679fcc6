"""``editserver bench <name>``: benchmarks discovered from ``editserver/bench/*.py`` (a module whose name
starts with ``_`` is a helper the benchmarks share, not one)."""

from __future__ import annotations

import argparse
import importlib
import pkgutil

from editserver import bench


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="run a benchmark (fim, kernels, load, latency, ...)")
    inner = p.add_subparsers(dest="bench", required=True)
    for info in sorted(pkgutil.iter_modules(bench.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        importlib.import_module(f"editserver.bench.{info.name}").register(inner)
