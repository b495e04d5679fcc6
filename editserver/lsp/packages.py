"""Go packages and Rust modules: their imports as index records, and where those imports lead.

Floor 0 (see lsp/__init__.py): imports nothing of the language server.

Design decisions:
- Records keep the index's shape ``(spec, name, local)`` (lsp/symbols.py), so the index follows Go
  and Rust imports with the code that follows Python and TypeScript ones.
- Go imports a package, which is a directory: ``import u "example.com/m/pkg/util"`` is
  ``("example.com/m/pkg/util", None, "u")`` and resolves to the directory ``<module root>/pkg/util/``
  (a trailing slash marks a package), found through the nearest ``go.mod``'s ``module`` line. Uses
  are ``u.Helper`` (a selector on the local name). Files of one directory are one package and name
  each other's top-level declarations unqualified, without an import; the index treats them as
  importers at distance 1. Standard-library and third-party imports resolve to nothing.
- Rust: ``use crate::a::b::{f, g as h};`` is ``("crate::a::b", "f", "f")`` and
  ``("crate::a::b", "g", "h")``; ``mod util;`` (no body) is ``("self", "util", "util")``. A path resolves
  by module path: a file's module path comes from its place under the crate's ``src`` (``lib.rs``,
  ``main.rs`` and ``mod.rs`` name their directory), ``self``/``super``/``crate`` are taken from it, and
  a module lives in ``m.rs`` or ``m/mod.rs``. When the imported name is itself a module file, the whole
  module is imported (member None) and its uses are ``b::f`` paths, recorded as ``b.f``.
- ``go.mod`` is the one file read here (small, cached per path and mtime); everything else is asked of
  the index through ``exists``.
"""

from __future__ import annotations

import functools
import os
import posixpath

import tree_sitter as ts


def _text(node: ts.Node | None) -> str:
    return node.text.decode("utf-8", "replace") if node is not None and node.text is not None else ""


# ---- Go ------------------------------------------------------------------------------------------
def imports_go(root: ts.Node) -> list[list]:
    out: list[list] = []
    specs: list[ts.Node] = []
    for decl in root.named_children:
        if decl.type != "import_declaration":
            continue
        for c in decl.named_children:
            specs += (
                [s for s in c.named_children if s.type == "import_spec"] if c.type != "import_spec" else [c]
            )
    for s in specs:
        path = _text(s.child_by_field_name("path")).strip('"`')
        alias = _text(s.child_by_field_name("name"))
        if alias in ("_", "."):  # blank imports name nothing; dot imports are not followed
            continue
        out.append([path, None, alias or path.rsplit("/", 1)[-1]])
    return out


@functools.lru_cache(maxsize=64)
def _module_line(gomod: str, mtime_ns: int) -> str | None:
    try:
        with open(gomod, encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[0] == "module":
                    return parts[1].strip('"')
    except OSError:
        pass
    return None


def _go_module(path: str, roots: list[str]) -> tuple[str, str] | None:
    """(directory of the nearest go.mod above ``path`` inside a root, its module path)."""
    d = posixpath.dirname(path)
    while any(d == r or d.startswith(r + "/") for r in roots):
        gomod = posixpath.join(d, "go.mod")
        try:
            st = os.stat(gomod)
        except OSError:
            d, up = posixpath.dirname(d), d
            if d == up:
                return None
            continue
        module = _module_line(gomod, st.st_mtime_ns)
        return (d, module) if module else None
    return None


def resolve_go(path: str, spec: str, roots: list[str], exists) -> str | None:
    """The package directory (with a trailing slash) an import names, or None outside the workspace;
    ``exists(dir + "/")`` says whether an indexed Go file lies in that directory."""
    found = _go_module(path, roots)
    if found is None:
        return None
    base, module = found
    if spec != module and not spec.startswith(module + "/"):
        return None
    pkg = posixpath.join(base, spec[len(module) + 1 :]) if spec != module else base
    return pkg + "/" if exists(pkg + "/") else None


def go_package(path: str) -> str:
    """The package key of a Go file: its directory with a trailing slash."""
    return posixpath.dirname(path) + "/"


# ---- Rust ----------------------------------------------------------------------------------------
def _path_parts(node: ts.Node) -> list[str]:
    """``crate::a::b`` as ["crate", "a", "b"]."""
    if node.type == "scoped_identifier":
        path = node.child_by_field_name("path")
        return ([] if path is None else _path_parts(path)) + [_text(node.child_by_field_name("name"))]
    return [_text(node)]


def _use_tree(node: ts.Node, prefix: list[str], out: list[list]) -> None:
    if node.type in ("scoped_identifier", "identifier", "self", "crate", "super"):
        parts = prefix + _path_parts(node)
        if len(parts) >= 2 and parts[-1] not in ("self", "super", "crate"):
            out.append(["::".join(parts[:-1]), parts[-1], parts[-1]])
    elif node.type == "use_as_clause":
        parts = prefix + _path_parts(node.child_by_field_name("path"))
        if len(parts) >= 2:
            out.append(["::".join(parts[:-1]), parts[-1], _text(node.child_by_field_name("alias"))])
    elif node.type == "scoped_use_list":
        path = node.child_by_field_name("path")
        inner = prefix + ([] if path is None else _path_parts(path))
        lst = node.child_by_field_name("list")
        for c in lst.named_children if lst is not None else []:
            _use_tree(c, inner, out)
    elif node.type == "use_list":
        for c in node.named_children:
            _use_tree(c, prefix, out)


def imports_rust(root: ts.Node) -> list[list]:
    out: list[list] = []
    for node in root.named_children:
        if node.type == "use_declaration" and node.child_by_field_name("argument") is not None:
            _use_tree(node.child_by_field_name("argument"), [], out)
        elif node.type == "mod_item" and node.child_by_field_name("body") is None:
            name = _text(node.child_by_field_name("name"))
            out.append(["self", name, name])
    return out


def _crate_src(path: str, exists) -> str | None:
    """The crate's ``src`` directory above ``path``: the nearest one holding lib.rs or main.rs."""
    d = posixpath.dirname(path)
    while True:
        if posixpath.basename(d) == "src" and (
            exists(posixpath.join(d, "lib.rs")) or exists(posixpath.join(d, "main.rs"))
        ):
            return d
        up = posixpath.dirname(d)
        if up == d:
            return None
        d = up


def _module_of(path: str, src: str) -> list[str]:
    """The module path of a file under ``src``: lib.rs/main.rs are the crate, a/mod.rs and a.rs are a."""
    rel = posixpath.relpath(path, src)[: -len(".rs")].split("/")
    if rel in (["lib"], ["main"]):
        return []
    return rel[:-1] if rel[-1] == "mod" else rel


def _module_file(src: str, mod: list[str], exists) -> str | None:
    if not mod:
        for root in ("lib.rs", "main.rs"):
            if exists(posixpath.join(src, root)):
                return posixpath.join(src, root)
        return None
    for cand in (posixpath.join(src, *mod) + ".rs", posixpath.join(src, *mod, "mod.rs")):
        if exists(cand):
            return cand
    return None


def resolve_rust(path: str, spec: str, name: str, exists) -> tuple[str, str | None] | None:
    """(file, member) a ``use`` names, or None when it leaves the crate (std, other crates)."""
    src = _crate_src(path, exists)
    if src is None:
        return None
    here = _module_of(path, src)
    parts = spec.split("::")
    if parts[0] == "crate":
        mod = []
    elif parts[0] == "self":
        mod = list(here)
    elif parts[0] == "super":
        mod = here[:-1]
    else:
        return None
    for p in parts[1:]:
        if p == "super":
            mod = mod[:-1]
        elif p != "self":
            mod.append(p)
    whole = _module_file(src, [*mod, name], exists)
    if whole is not None:
        return whole, None
    owner = _module_file(src, mod, exists)
    return (owner, name) if owner is not None and owner != path else None
