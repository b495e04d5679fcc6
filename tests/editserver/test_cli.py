"""The command line: help for every option, a version, flags generated once from typed options."""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from editserver import __version__
from editserver.cli.main import build_parser
from editserver.options import add_arguments, from_args, opt


def _parsers(p: argparse.ArgumentParser, name: str = "editserver"):
    yield name, p
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub, sp in a.choices.items():
                yield from _parsers(sp, f"{name} {sub}")


def test_every_option_of_every_command_says_what_it_does() -> None:
    missing = [
        f"{name} {'/'.join(a.option_strings) or a.dest}"
        for name, p in _parsers(build_parser())
        for a in p._actions
        if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) and not a.help
    ]
    assert not missing, "options without help text: " + ", ".join(missing)


def test_no_help_heading_reads_as_usage_examples() -> None:
    """A group titled "examples" reads as usage examples in --help; option groups say what they hold."""
    titles = {
        f"{name}: {g.title}"
        for name, p in _parsers(build_parser())
        for g in p._action_groups
        if g.title and g.title.lower().startswith("example")
    }
    assert not titles, titles


def test_help_says_what_the_tool_is_and_version_answers() -> None:
    r = subprocess.run([sys.executable, "-m", "editserver.cli", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "diffusion language model" in r.stdout and "lsp" in r.stdout
    r = subprocess.run([sys.executable, "-m", "editserver.cli", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == f"editserver {__version__}"


@dataclass
class _Inner:
    depth: int = opt(3, "how deep", group="inner")
    hidden: int = 7  # no help: not a flag


@dataclass
class _Outer:
    paths: list[str] = opt(factory=list, help="inputs", positional=True)
    out: Path | None = opt(None, "where", flag="--json")
    rate: float = opt(0.5, "how fast")
    color: bool = opt(True, "no colour", flag="--no-color", negate=True)
    inner: _Inner = field(default_factory=_Inner)


def test_flags_come_from_the_typed_options_and_back() -> None:
    p = argparse.ArgumentParser()
    add_arguments(p, _Outer)
    got = from_args(_Outer, p.parse_args(["a", "b", "--json", "x.json", "--no-color", "--depth", "5"]))
    assert got == _Outer(["a", "b"], Path("x.json"), 0.5, False, _Inner(5, 7))
    assert from_args(_Outer, p.parse_args([])) == _Outer()
    assert "(default 0.5)" in p.format_help() and "hidden" not in p.format_help()
