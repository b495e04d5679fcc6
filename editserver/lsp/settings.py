"""Typed configuration for the language server, parsed in one place.

Floor 1 (see lsp/__init__.py): over lsp/privacy.py.

Design decisions:
- The contract's options (``serverUrl, autostart, debounceMs, enableFim, enableNextEdit, languages,
  telemetry: {enabled, path}``) arrive as camelCase JSON from ``initializationOptions`` and from
  ``workspace/didChangeConfiguration`` (``{settings: {editserver: {...}}}``). Both go through
  ``parse_settings``, which never raises: an invalid value yields the default plus a warning string
  that the server shows once via ``window/showMessage``.
- Unknown keys are ignored (editors send their whole section), but a wrong *type* for a known key is
  reported, so a typo'd value is never silently accepted.
- ``excludeFiles`` (globs, lsp/privacy.py) adds to the default secret-file patterns; ``!PATTERN``
  removes a default. ``telemetry.keepPrompts`` (off) keeps prompt text, bounded by
  ``telemetry.retentionDays`` (30) and ``telemetry.maxMegabytes`` (100); see lsp/telemetry.py.
- Internal tuning knobs (timeouts, budgets) are dataclass fields with their defaults documented next
  to them; only the contract's keys are user-facing, plus the two timeouts, which users on slow
  machines need.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from editserver.lsp.privacy import effective

DEFAULT_LANGUAGES = ("python", "javascript", "javascriptreact", "typescript", "typescriptreact", "go", "rust")


def default_telemetry_path() -> str:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return str(Path(base) / "editserver" / "telemetry.sqlite3")


@dataclass(frozen=True)
class TelemetrySettings:
    enabled: bool = True  # local SQLite only; nothing is ever sent anywhere
    path: str = field(default_factory=default_telemetry_path)
    keep_prompts: bool = False  # store prompt and suggestion text (else sizes and hashes only)
    retention_days: float = 30.0  # kept text older than this is redacted
    max_megabytes: float = 100.0  # kept text beyond this is redacted, oldest first


@dataclass(frozen=True)
class Settings:
    # "": an autostarted `editserver serve` of our own on a free port (lsp/model_client.py)
    server_url: str = ""
    autostart: bool = True  # start `editserver serve` when nothing answers at server_url
    debounce_ms: int = 75  # wait this long after a keystroke before asking the model
    enable_fim: bool = True
    enable_next_edit: bool = True
    # LSP language ids we answer for; others get empty results. "*" in the list means every language.
    languages: tuple[str, ...] = DEFAULT_LANGUAGES
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)
    exclude_files: tuple[str, ...] = ()  # the user's globs, added to privacy.DEFAULT_EXCLUDES
    fim_timeout_ms: int = 5000  # a FIM answer later than this is useless: return empty instead
    next_edit_timeout_ms: int = 30000  # next edits are asked for explicitly, so they may take longer
    # Below: internal budgets, not user options.
    fim_max_tokens: int = 64  # canvas of a multi-line request (stop at a blank-line run)
    # canvas of a single-line request (stop at the newline): training pads an answer with 1-49
    # end-of-text, so the canvas length is a length prior. All 1,033 HumanEval single lines, shipped
    # model: pass@1 10.9% at 24, 10.3% at 32, 9.8% at 48, 6.9% at 64 (2026-11-25, `editserver bench fim
    # --limit 1033 --max-tokens N`, docs/experiments.md); 32, not 24, because 4.5% of real lines (Click) are longer than 23 tokens and 0.3% longer than 31
    fim_line_max_tokens: int = 32
    fim_prefix_chars: int = 6000
    fim_suffix_chars: int = 2000
    region_min_lines: int = 10  # Mercury recommends a ~10-25 line editable region
    region_max_lines: int = 25
    context_lines: int = 60  # file lines shown above/below the editable region in next-edit prompts
    max_candidates: int = 8  # use regions per next-edit request (the server's max_batch is 8)
    candidate_max_lines: int = 3  # a use region: the statement around the use, at most this many lines
    candidate_context_lines: int = 10  # file lines above/below a use region (a short prompt)
    # next edits in other files: uses of a changed name in the files that import it (nextedit/plan.py)
    cross_file: bool = True
    index_max_files: int = 5000  # the workspace index's bounds (lsp/index.py)
    index_max_bytes: int = 512_000
    cross_file_max_regions: int = 16  # two of the server's batches (max_batch 8)
    cross_file_max_files: int = 8
    history_events: int = 24  # bounded edit history per workspace
    history_prompt_events: int = 6  # newest events rendered into a prompt
    recent_snippets: int = 3

    def handles(self, language_id: str) -> bool:
        return "*" in self.languages or language_id in self.languages

    @property
    def excluded_patterns(self) -> tuple[str, ...]:
        return effective(self.exclude_files)


_KEYS = {
    "serverUrl": "server_url",
    "autostart": "autostart",
    "debounceMs": "debounce_ms",
    "enableFim": "enable_fim",
    "enableNextEdit": "enable_next_edit",
    "languages": "languages",
    "fimTimeoutMs": "fim_timeout_ms",
    "nextEditTimeoutMs": "next_edit_timeout_ms",
    "excludeFiles": "exclude_files",
    "crossFile": "cross_file",
    "indexMaxFiles": "index_max_files",
}


def _check(key: str, value: Any) -> tuple[Any, str | None]:
    """(converted value, None) or (None, reason)."""
    if key in ("autostart", "enableFim", "enableNextEdit", "crossFile"):
        return (value, None) if isinstance(value, bool) else (None, "true or false")
    if key in ("debounceMs", "fimTimeoutMs", "nextEditTimeoutMs", "indexMaxFiles"):
        ok = isinstance(value, int) and not isinstance(value, bool)
        hi = 5000 if key == "debounceMs" else 600_000
        lo = 0 if key in ("debounceMs", "indexMaxFiles") else 1
        if ok and lo <= value <= hi:
            return value, None
        return None, f"an integer {lo}..{hi}"
    if key == "serverUrl":
        if isinstance(value, str) and (value == "" or value.startswith(("http://", "https://"))):
            return value.rstrip("/"), None
        return None, "a URL"
    if key == "excludeFiles":
        if isinstance(value, list) and all(isinstance(v, str) and v.strip("!") for v in value):
            return tuple(value), None
        return None, "a list of file globs"
    if key == "languages":
        if isinstance(value, list) and all(isinstance(v, str) and v for v in value):
            return tuple(value), None
        return None, "a list of language ids"
    raise KeyError(key)


def _brief(value: Any) -> str:
    """A value as the one-line warning shows it (editors show long messages with a prompt)."""
    text = repr(value)
    return text if len(text) <= 24 else text[:23] + "…"


def parse_settings(
    raw: Any, base: Settings | None = None, defaults: Settings | None = None
) -> tuple[Settings, list[str]]:
    """``base`` updated from a client's JSON object; an invalid value falls back to its default (from
    ``defaults``), with a warning."""
    defaults = defaults or Settings()
    base = base or defaults
    warnings: list[str] = []
    if raw is None:
        return base, warnings
    if not isinstance(raw, dict):
        return base, [f"editserver settings must be an object, got {type(raw).__name__}; using defaults"]
    changes: dict[str, Any] = {}
    for key, attr in _KEYS.items():
        if key not in raw:
            continue
        value, reason = _check(key, raw[key])
        if reason is not None:
            warnings.append(
                f"editserver: {key}={_brief(raw[key])} is not {reason}; using {_brief(getattr(defaults, attr))}"
            )
            value = getattr(defaults, attr)
        changes[attr] = value
    if "telemetry" in raw:
        changes["telemetry"] = _telemetry(raw["telemetry"], base.telemetry, defaults.telemetry, warnings)
    return replace(base, **changes), warnings


_TELEMETRY = {  # key: (field, check, what a valid value is)
    "enabled": ("enabled", lambda v: isinstance(v, bool), "true or false"),
    "path": ("path", lambda v: isinstance(v, str) and bool(v.strip()), "a file path"),
    "keepPrompts": ("keep_prompts", lambda v: isinstance(v, bool), "true or false"),
    "retentionDays": ("retention_days", lambda v: _number(v, 0, 3650), "a number of days 0..3650"),
    "maxMegabytes": ("max_megabytes", lambda v: _number(v, 0, 1 << 20), "a number of megabytes"),
}


def _number(v: Any, lo: float, hi: float) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and lo <= v <= hi


def _telemetry(
    tel: Any, t: TelemetrySettings, defaults: TelemetrySettings, warnings: list[str]
) -> TelemetrySettings:
    if not isinstance(tel, dict):
        warnings.append(f"editserver: telemetry={_brief(tel)} is not an object; using the defaults")
        return TelemetrySettings()
    for key, (attr, ok, what) in _TELEMETRY.items():
        if key not in tel:
            continue
        value = tel[key]
        if not ok(value):
            shown = "the default" if key == "path" else _brief(getattr(defaults, attr))
            warnings.append(f"editserver: telemetry.{key}={_brief(value)} is not {what}; using {shown}")
            value = default_telemetry_path() if key == "path" else getattr(defaults, attr)
        elif key == "path":
            value = os.path.expanduser(value)
        t = replace(t, **{attr: value})
    return t


def settings_from_change(raw: Any) -> Any:
    """The editserver section of a didChangeConfiguration payload (``{editserver: {...}}`` or the section)."""
    if isinstance(raw, dict) and isinstance(raw.get("editserver"), dict):
        return raw["editserver"]
    return raw
