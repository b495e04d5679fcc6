"""The ``editserver`` command line: local diffusion-model code suggestions for your editor.

Design decisions:
- One subcommand per module of this package (``serve``, ``train``, ``replay``,
  ``bench``, ``align``), each exposing ``register(subparsers)`` that adds its parser and sets ``func``; heavy
  imports (torch, uvicorn) happen inside ``func``. ``editserver NAME ...`` registers only NAME's
  parser, so one subcommand's help or a refused flag never waits for another's imports (train's
  and align's option dataclasses live beside torch code).
- ``editserver lsp`` replaces this process with ``python -m editserver.lsp`` (same arguments, same stdio): the
  language server sits above the HTTP API, so the server's package never imports it. ``editserver
  telemetry`` (what the language server recorded: stats, purge) hands over the same way, to
  ``python -m editserver.lsp.telemetry_cli``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from editserver import __version__

SUBCOMMANDS = ("serve", "pull", "train", "replay", "bench", "align")
DESCRIPTION = (
    "Local code suggestions from a diffusion language model: fill-in-the-middle and next-edit "
    "prediction over an Inception-compatible HTTP API, with a language server for editors."
)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or with ``only`` just that subcommand's parser (see ``main``)."""
    parser = argparse.ArgumentParser(prog="editserver", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"editserver {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS if only is None else (only,):
        importlib.import_module(f"editserver.cli.{name}").register(sub)
    # listed for --help; main() hands it over before argparse sees its arguments
    sub.add_parser("lsp", help="run the language server over stdio (editors start this; see --help)")
    sub.add_parser(
        "telemetry",
        help="the language server's local telemetry: `telemetry stats` shows it, `telemetry purge` deletes it",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["lsp"]:
        os.execv(sys.executable, [sys.executable, "-m", "editserver.lsp", *argv[1:]])
    if argv[:1] == ["telemetry"]:
        os.execv(sys.executable, [sys.executable, "-m", "editserver.lsp.telemetry_cli", *argv[1:]])
    # a named subcommand builds only its own parser: train's and align's option dataclasses import
    # torch, which `serve --help` or a refused flag should not wait for
    args = build_parser(argv[0] if argv[:1] and argv[0] in SUBCOMMANDS else None).parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
