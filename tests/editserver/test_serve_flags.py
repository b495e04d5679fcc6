"""``editserver serve``'s flags are generated from ``Settings``: one flag per field, defaults only there.

The parser is the real one (``editserver.cli.main.build_parser``); the help and the refusals run the
real command in a subprocess, as a user would.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from editserver.cli.main import build_parser
from editserver.options import flag_name, from_args
from editserver.server.settings import Settings

# the flags users, scripts and docs call serve with: generating them must not rename or drop one
PUBLIC_FLAGS = {
    *("--host", "--port", "--model", "--device", "--dtype", "--max-context", "--chat-template"),
    *("--api-key", "--insecure-no-auth", "--max-body-bytes", "--allow-origin", "--max-queue"),
    *("--max-batch", "--max-output-tokens", "--threads", "--quantize", "--prefix-cache-mb"),
    *("--fim-threshold", "--edit-threshold", "--model-name", "--log-level", "--replica-id"),
    *("--drain-timeout", "--no-join", "--prefix-cache-suffix", "--block-size"),
}


def _serve_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["serve"]


def _serve(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "editserver.cli", "serve", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


def test_every_settings_field_has_exactly_one_flag_and_nothing_else_is_one() -> None:
    actions = [a for a in _serve_parser()._actions if not isinstance(a, argparse._HelpAction)]
    by_dest: dict[str, list[argparse.Action]] = {}
    for a in actions:
        by_dest.setdefault(a.dest, []).append(a)
    for f in dataclasses.fields(Settings):
        if f.metadata.get("cli", True) is False:  # filled by code: stated on the field, never implied
            assert f.name not in by_dest, f.name
            continue
        assert "help" in f.metadata, f"Settings.{f.name} is neither a flag nor marked cli=False"
        got = by_dest.pop(f.name, [])
        assert len(got) == 1 and len(got[0].option_strings) == 1, (f.name, [a.option_strings for a in got])
    assert not by_dest, f"serve flags without a Settings field: {sorted(by_dest)}"


def test_the_parser_defaults_are_the_settings_defaults(monkeypatch) -> None:
    monkeypatch.delenv("EDITSERVER_API_KEY", raising=False)
    assert from_args(Settings, _serve_parser().parse_args([])) == Settings()
    monkeypatch.setenv("EDITSERVER_API_KEY", "from-env")
    assert from_args(Settings, _serve_parser().parse_args([])).api_key == "from-env"


def test_flags_keep_their_names_and_meaning() -> None:
    args = ["--model-name", "m", "--allow-origin", "http://a", "--allow-origin", "http://b", "--model", "/x"]
    args += ["--insecure-no-auth", "--host", "0.0.0.0", "--quantize", "int8", "--drain-timeout", "5"]
    got = from_args(Settings, _serve_parser().parse_args(args))
    assert got.served_model_name == "m" and got.allow_origins == ("http://a", "http://b")
    assert str(got.model) == "/x" and got.insecure_no_auth and got.host == "0.0.0.0"
    assert got.quantize == "int8" and got.drain_timeout == 5.0


def test_help_lists_every_flag_in_its_group_and_never_the_key() -> None:
    r = _serve("--help", env={**os.environ, "EDITSERVER_API_KEY": "secret-in-env-789"})
    assert r.returncode == 0, r.stderr
    flags = [a.option_strings[0] for a in _serve_parser()._actions if not isinstance(a, argparse._HelpAction)]
    assert set(flags) == PUBLIC_FLAGS and all(flag in r.stdout for flag in flags), r.stdout
    for title in ("model:", "network:", "requests:", "operations:"):
        assert title in r.stdout
    text = " ".join(r.stdout.split())  # argparse wraps to the terminal's width
    assert "(default 64)" in text and "(default 1048576)" in text  # written once, shown anyway
    assert "secret-in-env-789" not in r.stdout


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--max-queue", "0"], "max_queue must be at least 1"),
        (["--drain-timeout", "-1"], "drain_timeout must be at least 0"),
        (["--fim-threshold", "1.5"], "fim_threshold must be between 0 and 1"),
    ],
)
def test_a_bad_value_is_one_line_and_exit_2(flags, words) -> None:
    r = _serve(*flags)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and words in r.stderr, r.stderr


def test_choices_bind_a_settings_built_in_code_too() -> None:
    with pytest.raises(ValueError, match="log_level must be one of debug, info, warning, error"):
        Settings(log_level="loud")
    with pytest.raises(ValueError, match="dtype must be one of"):
        Settings(dtype="fp8")


def _docs_table() -> dict[str, str]:
    """docs/api.md's serve flags table: flag -> its default cell (backticks dropped)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    rows: dict[str, str] = {}
    for line in text.split("| flag | default | meaning |", 1)[1].splitlines()[2:]:
        if not line.startswith("| `--"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        flag = cells[0].strip("`").split()[0]
        assert flag not in rows, f"docs/api.md lists {flag} twice"
        rows[flag] = cells[1].replace("`", "")
    return rows


def test_the_api_docs_table_names_every_flag_with_its_default() -> None:
    rows = _docs_table()
    assert set(rows) == PUBLIC_FLAGS, set(rows) ^ PUBLIC_FLAGS
    for f in dataclasses.fields(Settings):
        if f.metadata.get("cli", True) is False:
            continue
        cell = rows[flag_name(Settings, f.name)]
        if isinstance(f.default, bool):  # a negated switch (--no-join) is off while the field is on
            on = f.default != bool(f.metadata.get("negate"))
            assert cell == ("on" if on else "off"), (f.name, cell)
        elif isinstance(f.default, (int, float)):
            assert float(cell.split()[0]) == f.default, (f.name, cell)
        elif isinstance(f.default, str):
            assert cell.split()[0] == f.default, (f.name, cell)
        else:  # None or empty: the docs say in words what happens
            assert cell, f.name


def test_serve_alone_parses_without_torch() -> None:
    """``editserver serve --help`` and a refused flag answer at once: no other command's imports."""
    code = "import sys; from editserver.cli.main import build_parser; build_parser('serve'); "
    code += "sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
