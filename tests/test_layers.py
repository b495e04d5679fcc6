"""The layers' arrows point one way: editor -> lsp -> HTTP -> editserver -> model -> kernels.

Every import in the product's packages is checked, at module level or inside a function, and so is
every module name handed to ``importlib.import_module`` or ``__import__`` as a string (an f-string's
literal start counts). ``protocol`` holds the wire formats every layer shares: it may be imported by
all and imports nothing of this repository. A process boundary (``python -m lsp``, an HTTP call) is
not an import, and that is how the upper layers reach the lower ones they may not import.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("lsp", "editserver", "model", "kernels", "protocol")
# what each package may import of this repository (itself always)
ALLOWED = {
    "lsp": {"protocol"},
    "editserver": {"model", "kernels", "protocol"},
    "model": {"kernels", "protocol"},
    "kernels": {"protocol"},
    "protocol": set(),
}


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
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and (name := _dynamic_name(node)):
            out.append((node.lineno, name))
    return out


def violations(package: str, source: str, where: str) -> list[str]:
    bad = []
    for line, module in imported_modules(source):
        top = module.split(".")[0]
        if top in PACKAGES and top != package and top not in ALLOWED[package]:
            bad.append(f"{where}:{line}: {package} imports {module}")
    return bad


def test_no_import_points_against_the_layers() -> None:
    bad, seen = [], 0
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            seen += 1
            bad += violations(package, path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert seen > 50, "the walk found the packages"
    assert not bad, "imports against the layers:\n" + "\n".join(bad)


def test_the_check_catches_hidden_imports() -> None:
    src = (
        "import importlib\n"
        "def f():\n"
        "    from model.infer.engine import Engine\n"
        "    importlib.import_module('editserver.server.app')\n"
        "    importlib.import_module(f'kernels.{name}')\n"
        "    __import__('protocol.prompt')\n"
    )
    found = [m for _, m in imported_modules(src)]
    assert found == [
        "importlib",
        "model.infer.engine",
        "editserver.server.app",
        "kernels.",
        "protocol.prompt",
    ]
    assert len(violations("lsp", src, "x.py")) == 3  # protocol is allowed to everyone
    assert len(violations("kernels", src, "x.py")) == 2
    assert len(violations("protocol", src, "x.py")) == 3
    assert violations("editserver", src, "x.py") == []
