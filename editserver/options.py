"""Command-line flags generated from typed option dataclasses, so each option is written once.

Design decisions:
- An option is a dataclass field declared with ``opt(default, help, ...)``: its name, type, default
  and help text live there, and ``add_arguments`` turns it into a flag (``max_points`` ->
  ``--max-points``). ``from_args`` builds the dataclass back from the parsed namespace.
- Types come from the annotations: ``int``, ``float``, ``str``, ``Path`` and their ``| None`` forms
  take a value; ``bool`` is a switch (``--name``, or ``--no-name`` for a field that defaults to
  True, via ``negate``); ``list[str]`` and ``tuple[str, ...]`` take one or more values, or with
  ``repeat`` one value per use of the flag (``--allow-origin A --allow-origin B``); a tuple field
  gets a tuple.
- A field holding another option dataclass contributes that one's flags (a nested group), so a
  harness's sub-options need no copy line.
- A field without a ``help`` entry in its metadata (or with ``cli=False``) is not a flag (the
  caller fills it). The metadata is a plain dict, so a dataclass in ``model`` (``TrainConfig``) can
  declare flags without importing this module.
- ``cli_default`` is the flag's default where the command line's differs from the library's;
  ``scale`` converts units (``--time-budget`` minutes, the field seconds); ``aliases`` adds other
  names (``train --run-dir``: torchrun reads ``--run`` as its own ``--run-path``). A bool that
  defaults to True gets ``--name/--no-name`` unless ``negate`` makes it a single ``--no-name``.
- ``env`` names an environment variable whose value is the flag's default when set (``serve
  --api-key`` from ``$EDITSERVER_API_KEY``, so a secret need not show in the process list); it is
  read when the parser is built, never by the dataclass itself, and never shown in the help.
- The default is appended to the help text unless the help already names one.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import types
import typing
from pathlib import Path
from typing import Any


def opt(
    default: Any = None,
    help: str = "",
    *,
    flag: str | None = None,
    metavar: str | None = None,
    choices: list[str] | None = None,
    group: str | None = None,
    negate: bool = False,
    positional: bool = False,
    repeat: bool = False,
    env: str | None = None,
    factory: Any = None,
) -> Any:
    """A dataclass field that is also a command-line option (module docstring)."""
    meta = {
        "help": help,
        "flag": flag,
        "metavar": metavar,
        "choices": choices,
        "group": group,
        "negate": negate,
        "positional": positional,
        "repeat": repeat,
        "env": env,
    }
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


_DEFAULTS = {
    "cli": True,
    "aliases": (),
    "flag": None,
    "metavar": None,
    "choices": None,
    "group": None,
    "negate": False,
    "positional": False,
    "repeat": False,
    "env": None,
}


def _base(tp: Any) -> tuple[Any, bool]:
    """(the type without ``| None``, whether None is allowed)."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0], True
    return tp, False


def _is_flag(f: dataclasses.Field) -> bool:
    return "help" in f.metadata and f.metadata.get("cli", True)


def _default(f: dataclasses.Field) -> Any:
    if f.metadata.get("env") and os.environ.get(f.metadata["env"]):
        return os.environ[f.metadata["env"]]
    if "cli_default" in f.metadata:
        return f.metadata["cli_default"]
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _sequence(tp: Any) -> bool:
    return typing.get_origin(tp) in (list, tuple)


def _flag_kwargs(f: dataclasses.Field, tp: Any) -> dict:
    m = {**_DEFAULTS, **f.metadata}
    base, _ = _base(tp)
    default = _default(f)
    shown = default / m["scale"] if "scale" in m and default is not None else default
    plain = m["env"] or default in (None, [], ()) or isinstance(default, bool) or "default" in m["help"]
    help_ = m["help"] + ("" if plain else f" (default {shown})").replace("%", "%%")
    kw: dict[str, Any] = {"help": help_, "dest": f.name}
    if base is bool:
        if m["negate"]:
            kw["action"] = "store_false"
        else:
            kw["action"] = argparse.BooleanOptionalAction if default else "store_true"
            kw["default"] = default
        return kw
    if _sequence(base):
        if m["repeat"]:
            kw.update(action="append", default=list(default or []))
        else:
            kw.update(nargs="*" if m["positional"] else "+", default=list(default or []))
        kw["type"] = typing.get_args(base)[0]
    else:
        kw.update(type=base if base in (int, float, Path) else str, default=shown)
    for k in ("metavar", "choices"):
        if m[k] is not None:
            kw[k] = m[k]
    if m["positional"]:
        kw.pop("dest")
    return kw


def add_arguments(parser: argparse.ArgumentParser, cls: type, groups: dict[str, Any] | None = None) -> None:
    """Add a flag for every ``opt`` field of dataclass ``cls`` (and of nested option dataclasses);
    ``groups`` maps group titles to argument groups already made (shared with nested ones)."""
    hints = typing.get_type_hints(cls)
    groups = {} if groups is None else groups
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            add_arguments(parser, tp, groups)
            continue
        if not _is_flag(f):
            continue
        m = {**_DEFAULTS, **f.metadata}
        target = parser
        if m["group"]:
            target = groups.setdefault(m["group"], parser.add_argument_group(m["group"]))
        if m["positional"]:
            target.add_argument(f.name, **_flag_kwargs(f, tp))
            continue
        name = m["flag"] or ("--no-" if m["negate"] else "--") + f.name.replace("_", "-")
        target.add_argument(name, *m["aliases"], **_flag_kwargs(f, tp))


def flag_name(cls: type, name: str) -> str:
    """The flag a field is set by (for error messages)."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    m = {**_DEFAULTS, **f.metadata}
    return m["flag"] or ("--no-" if m["negate"] else "--") + name.replace("_", "-")


def _value(f: dataclasses.Field, tp: Any, args: argparse.Namespace) -> Any:
    v = getattr(args, f.name)
    if v is not None and "scale" in f.metadata:
        v = v * f.metadata["scale"]
    if isinstance(v, list):
        return tuple(v) if typing.get_origin(_base(tp)[0]) is tuple else list(v)
    return v


def config_values(cls: type, args: argparse.Namespace) -> dict[str, Any]:
    """The parsed flags of ``cls`` (not nested ones) as field values, in the field's unit."""
    hints = typing.get_type_hints(cls)
    return {
        f.name: _value(f, hints[f.name], args)
        for f in dataclasses.fields(cls)
        if _is_flag(f) and hasattr(args, f.name)
    }


def from_args(cls: type, args: argparse.Namespace, **given: Any) -> Any:
    """Dataclass ``cls`` from parsed ``args``; ``given`` fills (or overrides) fields by name."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in given:
            values[f.name] = given[f.name]
        elif dataclasses.is_dataclass(hints[f.name]):
            values[f.name] = from_args(hints[f.name], args)
        elif _is_flag(f) and hasattr(args, f.name):
            values[f.name] = _value(f, hints[f.name], args)
    return cls(**values)
