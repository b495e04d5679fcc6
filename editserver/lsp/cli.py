"""``editserver lsp``: the language server over stdio (or TCP for debugging).

Floor 9 (see lsp/__init__.py): over lsp/server.py, imported only when it runs.

Design decisions:
- Flags are the fixed contract with the editor extensions: ``--server-url`` (default: an
  autostarted server on a free port of its own; http://127.0.0.1:8000 with ``--no-autostart``),
  ``--no-autostart``, ``--model DIR`` (for the autostarted ``editserver
  serve``), ``--tcp PORT``, ``--log-file PATH``. CLI flags set the defaults; ``initializationOptions``
  from the editor may still override server URL and autostart.
- Logs never go to stdout (that is the protocol channel): to ``--log-file`` when given, else stderr
  at warning level.
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--server-url",
        default=None,
        help="editserver HTTP API (default: an autostarted server of our own on a free port)",
    )
    p.add_argument("--no-autostart", action="store_true", help="never start `editserver serve` ourselves")
    p.add_argument("--model", default=None, help="checkpoint directory for the autostarted server")
    p.add_argument(
        "--tcp", type=int, default=None, metavar="PORT", help="listen on 127.0.0.1:PORT instead of stdio"
    )
    p.add_argument("--log-file", default=None, help="write debug logs here")


def run(args: argparse.Namespace) -> int:
    import logging

    from editserver.lsp.server import create_server

    if args.log_file:
        logging.basicConfig(
            filename=args.log_file,
            level=logging.DEBUG,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
    else:
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    server = create_server(
        server_url=args.server_url,
        autostart=False if args.no_autostart else None,
        model_dir=args.model,
    )
    server.state.log_file = args.log_file
    try:
        if args.tcp is not None:
            server.start_tcp("127.0.0.1", args.tcp)
        else:
            server.start_io()
    finally:
        if server.state.model is not None:
            server.state.model.stop_child()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="editserver lsp",
        description="The editserver language server: inline completions and next edits over stdio.",
    )
    add_arguments(parser)
    return run(parser.parse_args(sys.argv[1:] if argv is None else argv))
