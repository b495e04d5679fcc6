"""Settings parsing: one place, typed, invalid values -> default plus a warning."""

from __future__ import annotations

import asyncio

from lsprotocol import types

from editserver.lsp.settings import Settings, parse_settings, settings_from_change
from tests.lsp.conftest import lsp_session


def test_valid_options_are_typed():
    s, warnings = parse_settings(
        {
            "serverUrl": "http://127.0.0.1:9000/",
            "autostart": False,
            "debounceMs": 10,
            "enableFim": False,
            "enableNextEdit": True,
            "languages": ["python"],
            "telemetry": {"enabled": False, "path": "/tmp/x.sqlite3"},
            "someOtherEditorKey": 1,
        }
    )
    assert warnings == []
    assert s.server_url == "http://127.0.0.1:9000" and s.autostart is False and s.debounce_ms == 10
    assert s.languages == ("python",) and s.handles("python") and not s.handles("go")
    assert s.telemetry.enabled is False and s.telemetry.path == "/tmp/x.sqlite3"


def test_invalid_values_fall_back_to_defaults_with_one_warning_each():
    cli = Settings(server_url="http://127.0.0.1:8123")
    s, warnings = parse_settings(
        {"serverUrl": "ftp://x", "debounceMs": -5, "autostart": "yes", "telemetry": {"enabled": 1}}, cli, cli
    )
    assert s.server_url == "http://127.0.0.1:8123"  # the CLI's value is the default here
    assert s.debounce_ms == 75 and s.autostart is True and s.telemetry.enabled is True
    assert len(warnings) == 4 and all(
        w.startswith("editserver: ") and " is not " in w and len(w) <= 80 for w in warnings
    )
    _, warnings = parse_settings("nonsense")
    assert len(warnings) == 1


def test_change_payload_merges_into_current_settings():
    current, _ = parse_settings({"debounceMs": 10})
    s, _ = parse_settings(settings_from_change({"editserver": {"enableFim": False}}), current)
    assert s.debounce_ms == 10 and s.enable_fim is False
    assert settings_from_change({"debounceMs": 1}) == {"debounceMs": 1}


async def test_pull_configuration_when_the_change_carries_no_settings(base_options):
    async with lsp_session("http://127.0.0.1:9", base_options, wait_ready=False) as s:
        s.client.set_configuration({"debounceMs": "slow"}, section="editserver")
        s.client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
        for _ in range(100):
            if any("debounceMs" in m.message for m in s.messages):
                break
            await asyncio.sleep(0.05)
        assert any("debounceMs='slow' is not" in m.message for m in s.messages)
