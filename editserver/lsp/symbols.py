"""What one source file declares, imports and uses: the per-file records of the workspace index.

Floor 2 (see lsp/__init__.py): over lsp/treesitter.py and lsp/packages.py.

Design decisions:
- Pure functions of (path, text): the index runs them in a worker process and stores their JSON
  output in its cache, so nothing here holds tree-sitter objects beyond one call.
- Definitions: top-level ones (functions, classes, types, module constants) and class members
  (methods); each says whether another file can name it (``visible``: top level or a member; in
  TypeScript/JavaScript only what is exported, or a member of an exported class).
- Imports: ``(spec, name, local)`` where ``spec`` is the module as written (``.pkg.mod``,
  ``./x``), ``name`` the imported member (None for the whole module: ``import m``, ``import * as
  ns``) and ``local`` the name it is bound to in this file. Python (absolute and relative) and
  TypeScript/JavaScript (relative specifiers) resolve to files (``resolve``); Go packages and Rust
  modules resolve as lsp/packages.py says.
- Uses: every identifier node in code, as ``{name: [[row, byte column], ...]}``, in document
  order: those inside a Python f-string's or a JS/TS template literal's interpolations count, a
  name in a plain string or a comment never does (``treesitter.code_identifiers``, the walk the
  in-file candidates share). A member access on a plain name (``ns.f``, ``mod.f``) is also
  recorded under ``"ns.f"`` at the member, which is how a module imported whole is followed
  (``context.use_keys``).
"""

from __future__ import annotations

import posixpath

import tree_sitter as ts

from editserver.lsp.packages import imports_go, imports_rust, resolve_go, resolve_rust
from editserver.lsp.treesitter import code_identifiers, load_language, use_keys

_TOP_PY = {"function_definition", "class_definition"}
_TOP_TS = {
    "function_declaration",
    "generator_function_declaration",
    "class_declaration",
    "abstract_class_declaration",
    "interface_declaration",
    "type_alias_declaration",
    "enum_declaration",
}
_TOP_GO = {"function_declaration", "method_declaration", "type_spec", "const_spec", "var_spec"}
_TOP_RS = {
    "function_item",
    "struct_item",
    "enum_item",
    "trait_item",
    "type_item",
    "const_item",
    "static_item",
}
TS_EXTS = (".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs", ".mts")


def _text(node: ts.Node | None) -> str:
    return node.text.decode("utf-8", "replace") if node is not None and node.text is not None else ""


def _name(node: ts.Node) -> str:
    return _text(node.child_by_field_name("name"))


def _defs_python(root: ts.Node) -> list[list]:
    out: list[list] = []
    for top in root.named_children:
        node = top.child_by_field_name("definition") if top.type == "decorated_definition" else top
        if node is None:
            continue
        if node.type in _TOP_PY:
            out.append([_name(node), node.start_point.row, node.type.split("_")[0], True])
            if node.type == "class_definition":
                out += _members_python(node)
        elif node.type == "expression_statement" and node.named_child_count == 1:
            a = node.named_children[0]
            left = a.child_by_field_name("left") if a.type == "assignment" else None
            if left is not None and left.type == "identifier":
                out.append([_text(left), left.start_point.row, "constant", True])
    return out


def _members_python(cls: ts.Node) -> list[list]:
    body = cls.child_by_field_name("body")
    out = []
    for c in body.named_children if body is not None else []:
        node = c.child_by_field_name("definition") if c.type == "decorated_definition" else c
        if node is not None and node.type == "function_definition":
            out.append([_name(node), node.start_point.row, "method", True])
    return out


def _defs_ts(root: ts.Node) -> list[list]:
    out: list[list] = []
    for top in root.named_children:
        exported = top.type == "export_statement"
        node = top.child_by_field_name("declaration") if exported else top
        if node is None:
            continue
        if node.type in _TOP_TS:
            out.append([_name(node), node.start_point.row, node.type.split("_")[0], exported])
            body = node.child_by_field_name("body")
            for m in body.named_children if body is not None and "class" in node.type else []:
                if m.type in ("method_definition", "public_field_definition") and _name(m):
                    out.append([_name(m), m.start_point.row, "method", exported])
        elif node.type in ("lexical_declaration", "variable_declaration"):
            for d in node.named_children:
                if d.type == "variable_declarator" and d.child_by_field_name("name").type == "identifier":
                    out.append([_name(d), d.start_point.row, "constant", exported])
    return out


def _defs_generic(root: ts.Node, kinds: set[str]) -> list[list]:
    out, stack = [], [root]
    while stack:
        node = stack.pop()
        if node.type in kinds and _name(node):
            name = _name(node)
            out.append([name, node.start_point.row, node.type.split("_")[0], True])
        if node.type in ("source_file", "declaration_list", "const_declaration", "var_declaration"):
            stack.extend(node.named_children)
        elif node.type in ("type_declaration", "impl_item", "mod_item"):
            stack.extend(node.named_children)
    return out


def _imports_python(root: ts.Node) -> list[list]:
    out: list[list] = []
    for node in root.named_children:
        if node.type == "import_statement":
            for n in node.children_by_field_name("name"):
                if n.type == "aliased_import":
                    out.append(
                        [_text(n.child_by_field_name("name")), None, _text(n.child_by_field_name("alias"))]
                    )
                elif "." not in _text(n):  # `import a.b` binds `a`, a package: not followed
                    out.append([_text(n), None, _text(n)])
        elif node.type == "import_from_statement":
            spec = _text(node.child_by_field_name("module_name"))
            for n in node.children_by_field_name("name"):
                if n.type == "aliased_import":
                    out.append(
                        [spec, _text(n.child_by_field_name("name")), _text(n.child_by_field_name("alias"))]
                    )
                else:
                    out.append([spec, _text(n), _text(n)])
    return out


def _imports_ts(root: ts.Node) -> list[list]:
    out: list[list] = []
    for node in root.named_children:
        source = node.child_by_field_name("source")
        if node.type not in ("import_statement", "export_statement") or source is None:
            continue
        spec = _text(source).strip("'\"`")
        for c in node.named_children:
            if c.type == "import_clause":
                for part in c.named_children:
                    if part.type == "identifier":
                        out.append([spec, "default", _text(part)])
                    elif part.type == "namespace_import":
                        out.append([spec, None, _text(part.named_children[0])])
                    elif part.type == "named_imports":
                        for s in part.named_children:
                            name = _text(s.child_by_field_name("name"))
                            out.append([spec, name, _text(s.child_by_field_name("alias")) or name])
            elif c.type == "export_clause":  # `export {a} from './x'`: a re-export binds a here
                for s in c.named_children:
                    name = _text(s.child_by_field_name("name"))
                    out.append([spec, name, _text(s.child_by_field_name("alias")) or name])
    return out


def _uses(root: ts.Node) -> dict[str, list[list[int]]]:
    """``{key: [[row, byte column], ...]}`` of every identifier in code (``code_identifiers``: inside
    f-string and template literal interpolations too, never in plain strings or comments)."""
    uses: dict[str, list[list[int]]] = {}
    for node in code_identifiers(root):
        at = [node.start_point.row, node.start_point.column]
        for key in use_keys(node):
            uses.setdefault(key, []).append(at)
    return uses


def extract(grammar: str, text: str) -> dict:
    """The file's record: ``{defs, imports, uses}`` (see the module notes)."""
    root = ts.Parser(load_language(grammar)).parse(text.encode("utf-8", "surrogatepass")).root_node
    if grammar == "python":
        defs, imports = _defs_python(root), _imports_python(root)
    elif grammar in ("javascript", "typescript", "tsx"):
        defs, imports = _defs_ts(root), _imports_ts(root)
    elif grammar == "go":
        defs, imports = _defs_generic(root, _TOP_GO), imports_go(root)
    else:
        defs, imports = _defs_generic(root, _TOP_RS), imports_rust(root)
    return {"defs": defs, "imports": imports, "uses": _uses(root)}


def resolve(
    path: str, spec: str, name: str | None, grammar: str, roots: list[str], exists
) -> tuple[str, str | None] | None:
    """(file the import names, member imported from it) or None when it is not in the workspace.

    ``from pkg import mod`` names a submodule when ``pkg/mod.py`` exists: then the whole module
    (member None) is imported. ``exists(path)`` says whether a path is an indexed file (for Go, a
    directory with a trailing slash: whether it holds an indexed file)."""
    if grammar == "python":
        return _resolve_python(path, spec, name, roots, exists)
    if grammar == "go":
        pkg = resolve_go(path, spec, roots, exists)
        return None if pkg is None else (pkg, None)
    if grammar == "rust":
        return None if name is None else resolve_rust(path, spec, name, exists)
    if grammar in ("javascript", "typescript", "tsx") and spec.startswith("."):
        base = posixpath.normpath(posixpath.join(posixpath.dirname(path), spec))
        for cand in [base] + [base + e for e in TS_EXTS] + [f"{base}/index{e}" for e in TS_EXTS]:
            if exists(cand):
                return cand, name
        if base.endswith(".js"):  # TypeScript's ESM style: `./x.js` names `./x.ts`
            for e in TS_EXTS:
                if exists(base[:-3] + e):
                    return base[:-3] + e, name
    return None


def _resolve_python(path, spec, name, roots, exists):
    dots = len(spec) - len(spec.lstrip("."))
    parts = [p for p in spec.lstrip(".").split(".") if p]
    if dots:
        base = posixpath.dirname(path)
        for _ in range(dots - 1):
            base = posixpath.dirname(base)
        bases = [base]
    else:
        bases = [r for root in roots for r in (root, posixpath.join(root, "src"))]
    for b in bases:
        mod = posixpath.join(b, *parts) if parts else b
        if name is not None:
            for sub in (f"{mod}/{name}.py", f"{mod}/{name}/__init__.py"):
                if exists(sub):
                    return sub, None
        for f in (f"{mod}.py", f"{mod}/__init__.py"):
            if parts and exists(f) or not parts and f.endswith("__init__.py") and exists(f):
                return f, name
    return None
