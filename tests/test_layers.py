"""The layers' arrows point one way: editor -> lsp -> HTTP -> app -> model -> kernels.

All Python lives under the one import name ``editserver``; its rooms are ``editserver.lsp``,
``editserver.model``, ``editserver.kernels``, ``editserver.protocol``, and the app room (the server,
CLI, benchmarks and replay: every other module under ``editserver``). Every import in the package is
checked, at module level or inside a function, and so is every module name handed to
``importlib.import_module`` or ``__import__`` as a string (an f-string's literal start counts).
``protocol`` holds the wire formats every layer shares: it may be imported by all and imports nothing
of this repository. A process boundary (``python -m editserver.lsp``, an HTTP call) is not an import,
and that is how the upper layers reach the lower ones they may not import.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "editserver"
ROOMS = ("lsp", "model", "kernels", "protocol")  # the rest of editserver is the app room
# what each room may import of this repository (itself always)
ALLOWED = {
    "lsp": {"protocol"},
    "app": {"model", "kernels", "protocol"},
    "model": {"kernels", "protocol"},
    "kernels": {"protocol"},
    "protocol": set(),
}


def room_of(module: str) -> str | None:
    """The room an absolute module name belongs to; None outside this repository."""
    parts = module.split(".")
    if parts[0] != "editserver":
        return None
    if len(parts) == 1 or parts[1].startswith("__"):
        return "root"  # the root package: a docstring and __version__, open to every room
    return parts[1] if parts[1] in ROOMS else "app"


def _dynamic_name(call: ast.Call) -> str | None:
    """The module a call to importlib.import_module / __import__ names, if it is a string."""
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    if name not in ("import_module", "__import__") or not call.args:
        return None
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return str(arg.values[0].value)
    return None


def imported_modules(source: str) -> list[tuple[int, str]]:
    """(line, module) for every import in ``source``: statements anywhere, and string names."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module == "editserver":
            # `from editserver import bench` imports the subpackage, `__version__` only the root
            out += [(node.lineno, f"editserver.{a.name}") for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and (name := _dynamic_name(node)):
            out.append((node.lineno, name))
    return out


def violations(room: str, source: str, where: str) -> list[str]:
    bad = []
    for line, module in imported_modules(source):
        top = room_of(module)
        if top not in (None, "root", room) and top not in ALLOWED[room]:
            bad.append(f"{where}:{line}: {room} imports {module}")
    return bad


def test_no_import_points_against_the_layers() -> None:
    bad, seen = [], 0
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        room = rel.parts[0] if rel.parts[0] in ROOMS else "app"
        seen += 1
        bad += violations(room, path.read_text(encoding="utf-8"), str(rel))
    assert seen > 50, "the walk found the packages"
    assert not bad, "imports against the layers:\n" + "\n".join(bad)


def test_no_import_names_a_room_without_its_root() -> None:
    """``kernels.attention`` now means PyPI's kernels package: every import of a room goes through
    ``editserver.``, in statements and in strings handed to importlib alike."""
    stale = [
        f"{path.relative_to(PKG)}:{line}: {module}"
        for path in sorted(PKG.rglob("*.py"))
        for line, module in imported_modules(path.read_text(encoding="utf-8"))
        if module.split(".")[0] in ROOMS
    ]
    assert not stale, stale


def test_one_import_root() -> None:
    """No other top-level package sits beside editserver, so nothing of ours can shadow another
    distribution's import name from the repository root."""
    root = PKG.parent
    tops = {p.parent.name for p in root.glob("*/__init__.py")} - {"tests"}
    assert tops == {"editserver"}, tops
    assert (PKG / "__init__.py").read_text().count("import") == 0, "the root package stays cheap"


def test_the_check_catches_hidden_imports() -> None:
    src = (
        "import importlib\n"
        "def f():\n"
        "    from editserver.model.infer.engine import Engine\n"
        "    importlib.import_module('editserver.server.app')\n"
        "    importlib.import_module(f'editserver.kernels.{name}')\n"
        "    __import__('editserver.protocol.prompt')\n"
    )
    found = [m for _, m in imported_modules(src)]
    assert found == [
        "importlib",
        "editserver.model.infer.engine",
        "editserver.server.app",
        "editserver.kernels.",
        "editserver.protocol.prompt",
    ]
    assert len(violations("lsp", src, "x.py")) == 3  # protocol is allowed to everyone
    assert len(violations("kernels", src, "x.py")) == 2
    assert len(violations("protocol", src, "x.py")) == 3
    assert violations("app", src, "x.py") == []
    assert violations("lsp", "from editserver import __version__\n", "x.py") == []
    assert len(violations("lsp", "from editserver import model, protocol\n", "x.py")) == 1
