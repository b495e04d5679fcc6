"""The ``editserver`` command line.

Design decisions:
- One subcommand per module (``editserver/commands/*.py``), discovered by name, each exposing
  ``register(subparsers)`` that adds its parser and sets ``func``; heavy imports (torch, uvicorn)
  happen inside ``func`` so ``editserver --help`` is instant.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from editserver import commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="editserver", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        importlib.import_module(f"editserver.commands.{info.name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
