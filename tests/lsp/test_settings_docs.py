"""docs/lsp.md's settings table names every key the language server reads, with its default.

The keys and defaults are written once, in ``editserver/lsp/settings.py``; the table is the user's
reading of them and stays hand-written, so this test keeps the two in step.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from editserver.lsp.settings import _KEYS, _TELEMETRY, Settings, TelemetrySettings

DOCS = Path(__file__).resolve().parents[2] / "docs" / "lsp.md"


def _table() -> dict[str, str]:
    """key -> its default cell (backticks dropped)."""
    rows: dict[str, str] = {}
    for line in DOCS.read_text().split("| key | default | meaning |", 1)[1].splitlines()[2:]:
        if not line.startswith("| `"):
            break
        key, default = [c.strip() for c in line.strip("|").split("|")][:2]
        assert key not in rows, f"docs/lsp.md lists {key} twice"
        rows[key.strip("`")] = default.replace("`", "")
    return rows


def _check(cell: str, value, key: str) -> None:
    if isinstance(value, bool):
        assert cell == ("true" if value else "false"), (key, cell)
    elif isinstance(value, (int, float)):
        assert float(cell.split()[0]) == value, (key, cell)
    elif value == "":
        assert cell == '""', (key, cell)
    else:  # a list or a path: the docs say it in words
        assert cell, key


def test_every_setting_has_one_row_with_its_default() -> None:
    rows = _table()
    keys = {*_KEYS, *(f"telemetry.{k}" for k in _TELEMETRY)}
    assert set(rows) == keys, set(rows) ^ keys
    s, t = Settings(), TelemetrySettings()
    for key, attr in _KEYS.items():
        _check(rows[key], getattr(s, attr), key)
    for key, (attr, _, _) in _TELEMETRY.items():
        value = getattr(t, attr)
        if attr == "path":  # where it lands depends on $XDG_DATA_HOME
            value = "$XDG_DATA_HOME/editserver/telemetry.sqlite3"
            assert rows[f"telemetry.{key}"] == value
            continue
        _check(rows[f"telemetry.{key}"], value, f"telemetry.{key}")
    assert {f.name for f in dataclasses.fields(TelemetrySettings)} == {a for a, _, _ in _TELEMETRY.values()}
