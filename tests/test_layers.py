"""The layers' arrows point one way: editor -> lsp -> HTTP -> app -> model -> kernels.

All Python lives under the one import name ``editserver``; its rooms are ``editserver.lsp``,
``editserver.model``, ``editserver.kernels``, ``editserver.protocol``, and the app room (the server,
CLI, benchmarks and replay: every other module under ``editserver``). Every import in the package is
checked, at module level or inside a function, and so is every module name handed to
``importlib.import_module`` or ``__import__`` as a string (an f-string's literal start counts).
``protocol`` holds the wire formats every layer shares: it may be imported by all and imports nothing
of this repository. A process boundary (``python -m editserver.lsp``, an HTTP call) is not an import,
and that is how the upper layers reach the lower ones they may not import.

Inside the rooms too, no two modules import each other, however indirectly and wherever the import
sits (module level, in a function, under ``TYPE_CHECKING``): a circle is a module that cannot be read
without its reader. The language server's one known circle is listed (``KNOWN_LSP_CIRCLE``) until it
is removed. And no product file is over 500 lines.
"""

from __future__ import annotations

import ast
import re
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


# ---- import circles --------------------------------------------------------------------------------
# The language server's one import circle (lsp/server.py and the modules that imported it back) is
# gone: its floors (test_lsp_floors) keep it so. From here on no circle at all passes.
KNOWN_LSP_CIRCLE: frozenset[str] = frozenset()
MAX_LINES = 500  # a product file longer than this is split where its contents divide


def module_name(path: Path) -> str:
    """``editserver/a/b.py`` -> ``editserver.a.b``; a package's ``__init__.py`` is the package."""
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _known(name: str, modules: set[str]) -> str | None:
    """The module of ours ``name`` runs: itself, else the nearest package above it that is one (an
    f-string handed to importlib names only its package); None outside this repository."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the modules of ``sources`` it imports: statements anywhere (module level, in a
    function, under ``TYPE_CHECKING``) and names handed to importlib. ``from pkg import name`` imports
    the submodule ``pkg.name`` where there is one, else ``pkg`` (its ``__init__``); a submodule's
    import does not count its packages' ``__init__``s, or every package that re-exports one of its
    modules would be a circle."""
    modules = set(sources)
    graph: dict[str, set[str]] = {}
    for module, source in sources.items():
        names: list[str] = []
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                names += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names += [
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                    for a in node.names
                ]
            elif isinstance(node, ast.Call) and (name := _dynamic_name(node)):
                names.append(name)
        graph[module] = {m for n in names if (m := _known(n, modules)) is not None} - {module}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The import circles of ``graph``: each set of modules that all reach one another."""
    reach = {}
    for start in graph:
        seen, todo = set(), list(graph[start])
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo += graph[m]
        reach[start] = seen
    circles = {frozenset(n for n in reach[m] if m in reach[n]) for m in graph if m in reach[m]}
    return sorted(circles, key=sorted)


def test_no_import_circles() -> None:
    graph = import_graph({module_name(p): p.read_text(encoding="utf-8") for p in PKG.rglob("*.py")})
    circles = import_circles(graph)
    expected = [KNOWN_LSP_CIRCLE] if KNOWN_LSP_CIRCLE else []
    shown = [
        f"{sorted(c)}: " + ", ".join(f"{m} -> {sorted(graph[m] & c)}" for m in sorted(c)) for c in circles
    ]
    assert circles == expected, "import circles:\n" + "\n".join(shown)


def test_the_circle_check_sees_every_kind_of_import() -> None:
    graph = import_graph(
        {
            "editserver.a": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from editserver.b import B\n",
            "editserver.b": "def f():\n    from editserver.pkg import c\n",
            "editserver.pkg": "from editserver.d import helper\n",
            "editserver.pkg.c": "import editserver.a\n",
            "editserver.d": "from editserver.pkg import name\n",
            "editserver.e": "import importlib\nimportlib.import_module(f'editserver.pkg.{x}')\nimport json\n",
        }
    )
    assert graph["editserver.b"] == {"editserver.pkg.c"}, "from pkg import submodule: the submodule"
    assert graph["editserver.d"] == {"editserver.pkg"}, "from pkg import a name: the package"
    assert graph["editserver.e"] == {"editserver.pkg"}, "an f-string names its package; json is not ours"
    assert import_circles(graph) == [
        frozenset({"editserver.a", "editserver.b", "editserver.pkg.c"}),  # TYPE_CHECKING, in a function
        frozenset({"editserver.d", "editserver.pkg"}),  # a package's __init__ is the package
    ]


def test_no_product_file_is_too_long() -> None:
    long = {
        str(p.relative_to(PKG.parent)): n
        for p in sorted(PKG.rglob("*.py"))
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"over {MAX_LINES} lines: {long}"


# ---- the LSP's floors ------------------------------------------------------------------------------
LSP = PKG / "lsp"


def lsp_floors() -> dict[str, int]:
    """Module -> floor, from the table in editserver/lsp/__init__.py's docstring; the package files
    (``__init__.py``) are floor 0: they import nothing."""
    doc = ast.get_docstring(ast.parse((LSP / "__init__.py").read_text(encoding="utf-8"))) or ""
    floors = {"editserver.lsp": 0, "editserver.lsp.nextedit": 0}
    for floor, names in re.findall(r"^ {4}(\d+) +([\w. ]+?) *$", doc, re.M):
        floors |= {f"editserver.lsp.{n}": int(floor) for n in names.split()}
    return floors


def floor_violations(graph: dict[str, set[str]], floors: dict[str, int]) -> list[str]:
    """Every import of a module on the importer's floor or above."""
    return [
        f"{m} (floor {floors[m]}) imports {d} (floor {floors[d]})"
        for m in sorted(graph)
        for d in sorted(graph[m])
        if floors[d] >= floors[m]
    ]


def test_lsp_floors() -> None:
    """Each module of editserver/lsp imports only modules of a lower floor (module level, inside a
    function, under TYPE_CHECKING, or by name through importlib alike): no arrow runs up a floor."""
    sources = {module_name(p): p.read_text(encoding="utf-8") for p in LSP.rglob("*.py")}
    floors = lsp_floors()
    assert set(sources) == set(floors), (
        f"lsp/__init__.py's floors: no floor for {sorted(set(sources) - set(floors))}, "
        f"no module {sorted(set(floors) - set(sources))}"
    )
    graph = import_graph(sources)
    assert not floor_violations(graph, floors), "imports up a floor:\n" + "\n".join(
        floor_violations(graph, floors)
    )
    # the check sees a hidden arrow: the state naming the server for its type hints only
    hidden = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from editserver.lsp.server import X\n"
    probe = import_graph({**sources, "editserver.lsp.state": hidden})
    assert floor_violations(probe, floors) == [
        "editserver.lsp.state (floor 4) imports editserver.lsp.server (floor 8)"
    ]
