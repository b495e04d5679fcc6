"""tree-sitter: incremental parses, editable regions, definitions and next-edit candidates.

Floor 1 (see lsp/__init__.py): over lsp/documents.py.

Design decisions:
- One ``ParsedDocument`` per open document, updated on every change with ``Tree.edit`` plus a
  re-parse that reuses the old tree (tree-sitter then only re-lexes the damaged range); a whole-file
  parse happens only on open and on full-text replacements. Counters record which happened, so tests
  can tell.
- Grammars come from the per-language wheels (python, javascript, typescript/tsx, go, rust), looked
  up by LSP language id, falling back to the file extension.
- Region snapping: start from the smallest node at the cursor and climb to the largest ancestor that
  still fits ``max_lines`` (Mercury suggests ~10-25 lines), then widen with whole sibling nodes up to
  ``min_lines``. Regions are whole lines, since the prompt's ``<|code_to_edit|>`` is line-based.
  Without a tree (unknown language) or when no node fits, a window of lines around the cursor is used.
- Candidates for multi-location next edits are occurrences (identifier nodes, never text matches in
  strings or comments) of the names the latest edits removed (a rename's old name) or of the function
  whose definition the latest edit touched (its call sites must follow a signature change); each is
  snapped to a small region of its own, overlapping ones merged.
- Which identifiers are code: one walk (``code_identifiers``) serves the in-file candidates, the
  workspace index's uses (lsp/symbols.py) and the prompt's cursor (``first_use``). It never enters a
  comment, and enters a string only through its interpolations: a Python f-string's ``{...}`` (the
  ``{width}`` of a format spec and nested f-strings included, tree-sitter nests both inside the
  interpolation) and a JS/TS template literal's ``${...}`` (and a template literal type's). A name
  in a plain string ("format_filename" in a message) is text, never a use.
- The prompt's cursor in a use region sits on the first use itself (an identifier node), never on
  an earlier mention in a string or comment, nor inside a longer name that contains it.
- Definitions: named definition nodes (functions, classes, types, ...) found by field ``name``; the
  ones matching identifiers near the cursor, from *other* open documents, become prompt context.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

import tree_sitter as ts

from editserver.lsp.documents import Document, TextEdit

_EXT = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascriptreact",
    ".ts": "typescript",
    ".mts": "typescript",
    ".tsx": "typescriptreact",
    ".go": "go",
    ".rs": "rust",
}

IDENTIFIER_TYPES = {
    "identifier",
    "property_identifier",
    "type_identifier",
    "field_identifier",
    "shorthand_property_identifier",
}

COMMENT_TYPES = {"comment", "line_comment", "block_comment"}
# strings, which hold code only in their interpolation children (see ``code_identifiers``)
STRING_TYPES = {
    "string",  # Python (f-strings too), JavaScript/TypeScript quotes
    "template_string",  # JavaScript/TypeScript `...`
    "template_literal_type",  # TypeScript type `pre-${Name}`
    "interpreted_string_literal",  # Go
    "raw_string_literal",  # Go, Rust
    "string_literal",  # Rust
    "regex",
}
INTERPOLATION_TYPES = {"interpolation", "template_substitution", "template_type"}
MEMBER_TYPES = {
    "attribute",
    "member_expression",
    "field_expression",
    "selector_expression",
    "scoped_identifier",
}

DEFINITION_TYPES = {
    "python": {"function_definition", "class_definition"},
    "javascript": {
        "function_declaration",
        "generator_function_declaration",
        "class_declaration",
        "method_definition",
        "variable_declarator",
    },
    "go": {"function_declaration", "method_declaration", "type_spec"},
    "rust": {
        "function_item",
        "struct_item",
        "enum_item",
        "trait_item",
        "type_item",
        "const_item",
        "mod_item",
    },
}
DEFINITION_TYPES["typescript"] = DEFINITION_TYPES["javascript"] | {
    "interface_declaration",
    "type_alias_declaration",
    "enum_declaration",
    "abstract_class_declaration",
    "function_signature",
}

_LANGUAGES: dict[str, ts.Language] = {}


def grammar_name(language_id: str, uri: str = "") -> str | None:
    """Our grammar key (python/javascript/typescript/tsx/go/rust) for an LSP language id or file name."""
    lid = language_id or _EXT.get(posixpath.splitext(uri)[1].lower(), "")
    return {
        "python": "python",
        "javascript": "javascript",
        "javascriptreact": "javascript",
        "typescript": "typescript",
        "typescriptreact": "tsx",
        "go": "go",
        "rust": "rust",
    }.get(lid)


def load_language(name: str) -> ts.Language:
    if name not in _LANGUAGES:
        if name == "python":
            import tree_sitter_python as m

            cap = m.language()
        elif name == "javascript":
            import tree_sitter_javascript as m

            cap = m.language()
        elif name in ("typescript", "tsx"):
            import tree_sitter_typescript as m

            cap = m.language_typescript() if name == "typescript" else m.language_tsx()
        elif name == "go":
            import tree_sitter_go as m

            cap = m.language()
        elif name == "rust":
            import tree_sitter_rust as m

            cap = m.language()
        else:
            raise KeyError(name)
        _LANGUAGES[name] = ts.Language(cap)
    return _LANGUAGES[name]


def _def_types(grammar: str) -> set[str]:
    return DEFINITION_TYPES["typescript" if grammar == "tsx" else grammar]


class ParsedDocument:
    """A document's syntax tree, kept current with incremental re-parses."""

    def __init__(self, grammar: str, text: str):
        self.grammar = grammar
        self.parser = ts.Parser(load_language(grammar))
        self.full_parses = 0
        self.incremental_parses = 0
        self.tree = self._parse(text, None)

    def _parse(self, text: str, old: ts.Tree | None) -> ts.Tree:
        data = text.encode("utf-8", "surrogatepass")
        if old is None:
            self.full_parses += 1
            return self.parser.parse(data)
        self.incremental_parses += 1
        return self.parser.parse(data, old)

    def update(self, edit: TextEdit, new_text: str, full: bool = False) -> None:
        if full:
            self.tree = self._parse(new_text, None)
            return
        self.tree.edit(
            start_byte=edit.start_byte,
            old_end_byte=edit.old_end_byte,
            new_end_byte=edit.new_end_byte,
            start_point=edit.start_point,
            old_end_point=edit.old_end_point,
            new_end_point=edit.new_end_point,
        )
        self.tree = self._parse(new_text, self.tree)

    # ---- queries -------------------------------------------------------------------------------
    def identifiers(self, first_line: int = 0, last_line: int | None = None) -> list[ts.Node]:
        """Identifier nodes in code (``code_identifiers``) starting within [first_line, last_line]."""
        return code_identifiers(self.tree.root_node, first_line, last_line)

    def definitions(self) -> list[ts.Node]:
        types = _def_types(self.grammar)
        out: list[ts.Node] = []
        stack = [self.tree.root_node]
        while stack:
            node = stack.pop()
            if node.type in types and node.child_by_field_name("name") is not None:
                out.append(node)
            stack.extend(reversed(node.named_children))
        return out

    def definition_at_line(self, line: int, header_only: bool = True) -> ts.Node | None:
        """The innermost definition whose header (the lines before its body) contains ``line``."""
        best = None
        for d in self.definitions():
            body = d.child_by_field_name("body")
            last = d.end_point.row
            if header_only and body is not None:
                # the header ends on the line before the body (Python) or on the body's `{` line
                opens_with_brace = (body.text or b"")[:1] == b"{"
                last = max(d.start_point.row, body.start_point.row - (0 if opens_with_brace else 1))
            if d.start_point.row <= line <= last:
                if best is None or d.start_byte >= best.start_byte:
                    best = d
        return best


def code_identifiers(root: ts.Node, first_line: int = 0, last_line: int | None = None) -> list[ts.Node]:
    """Identifier nodes that are code, in document order, whose start lies within [first_line,
    last_line] (all when last is None): comments are skipped, strings entered only through their
    interpolations (see the module notes)."""
    out: list[ts.Node] = []
    stack = [root]
    while stack:
        node = stack.pop()
        if last_line is not None and (node.end_point.row < first_line or node.start_point.row > last_line):
            continue
        kind = node.type
        if kind in IDENTIFIER_TYPES:
            if node.start_point.row >= first_line:
                out.append(node)
            continue
        if kind in COMMENT_TYPES:
            continue
        children = node.children
        if kind in STRING_TYPES:
            # an interpolation is code again: its expression (nested strings, format specs) walks as any
            children = [c for c in children if c.type in INTERPOLATION_TYPES]
        stack.extend(reversed(children))
    return out


def _text(node: ts.Node | None) -> str:
    return node.text.decode("utf-8", "replace") if node is not None and node.text is not None else ""


def use_keys(node: ts.Node) -> list[str]:
    """What a use is recorded under: its name, and ``"ns.name"`` too when it is the member looked up
    on a plain name (``ns.name``, ``mod.name``, Rust's ``util::name``): how a module imported whole
    is followed."""
    keys = [_text(node)]
    parent = node.parent
    if parent is not None and parent.type in MEMBER_TYPES:
        obj = (
            parent.child_by_field_name("object")
            or parent.child_by_field_name("value")
            or parent.child_by_field_name("operand")
            or parent.child_by_field_name("path")  # Rust's ``util::helper``
        )
        if obj is not None and obj.id != node.id and obj.type == "identifier":
            keys.append(f"{_text(obj)}.{keys[0]}")
    return keys


def node_name(node: ts.Node) -> str:
    return _text(node.child_by_field_name("name"))


def _rows(node: ts.Node) -> tuple[int, int]:
    """Inclusive line span of a node (a node ending at column 0 does not own that line)."""
    end = node.end_point.row
    if node.end_point.column == 0 and end > node.start_point.row:
        end -= 1
    return node.start_point.row, end


@dataclass(frozen=True)
class Region:
    first_line: int  # inclusive
    last_line: int  # inclusive
    reason: str = "cursor"

    @property
    def lines(self) -> int:
        return self.last_line - self.first_line + 1

    def __contains__(self, line: int) -> bool:
        return self.first_line <= line <= self.last_line

    def overlaps(self, other: Region) -> bool:
        """Whether the two regions share a line."""
        return self.first_line <= other.last_line and self.last_line >= other.first_line


def snap_region(
    doc: Document,
    parsed: ParsedDocument | None,
    line: int,
    min_lines: int,
    max_lines: int,
    reason: str = "cursor",
) -> Region:
    """The editable region around ``line``: an enclosing syntax node that fits the line budget."""
    n = doc.line_count
    line = max(0, min(line, n - 1))
    chosen: tuple[int, int] | None = None
    if parsed is not None:
        text = doc.line_text(line)
        indent = len(text) - len(text.lstrip())
        col = len(text[:indent].encode("utf-8"))
        root = parsed.tree.root_node
        node = root.named_descendant_for_point_range((line, col), (line, max(col, len(text.encode()))))
        while node is not None and node.id != root.id:
            s, e = _rows(node)
            if s <= line <= e and e - s + 1 <= max_lines:
                chosen = (s, e)
            elif chosen is not None:
                break
            node = node.parent
        if chosen is not None and chosen[1] - chosen[0] + 1 < min_lines:
            chosen = _widen(parsed, chosen, line, min_lines, max_lines)
    if chosen is None:
        half = max(min_lines // 2, 1)
        chosen = (max(0, line - half), min(n - 1, line + half))
    return Region(chosen[0], chosen[1], reason)


def _widen(
    parsed: ParsedDocument, span: tuple[int, int], line: int, min_lines: int, max_lines: int
) -> tuple[int, int]:
    """Grow a span with whole neighbouring statements (siblings at the cursor's level) up to min_lines."""
    s, e = span
    root = parsed.tree.root_node
    node = root.named_descendant_for_point_range((s, 0), (s, 0))
    # climb to the node that starts the span, so siblings are whole statements at that level
    while (
        node is not None
        and node.parent is not None
        and node.parent.id != root.id
        and _rows(node.parent)[0] == s
    ):
        if _rows(node.parent)[1] > e:
            break
        node = node.parent
    prev = node.prev_named_sibling if node is not None else None
    nxt = node
    while nxt is not None and _rows(nxt)[1] < e:
        nxt = nxt.next_named_sibling
    nxt = nxt.next_named_sibling if nxt is not None else None
    while e - s + 1 < min_lines and (prev is not None or nxt is not None):
        grew = False
        if nxt is not None and _rows(nxt)[1] - s + 1 <= max_lines:
            e, nxt, grew = _rows(nxt)[1], nxt.next_named_sibling, True
        else:
            nxt = None
        if e - s + 1 >= min_lines:
            break
        if prev is not None and e - _rows(prev)[0] + 1 <= max_lines:
            s, prev, grew = _rows(prev)[0], prev.prev_named_sibling, True
        else:
            prev = None
        if not grew:
            break
    return s, e


def definitions_for(
    names: set[str], others: list[tuple[str, Document, ParsedDocument]], max_lines: int = 12
) -> list[tuple[str, str]]:
    """(path, code) of definitions of ``names`` in other open documents, header plus up to max_lines."""
    out: list[tuple[str, str]] = []
    for path, doc, parsed in others:
        for d in parsed.definitions():
            if node_name(d) in names:
                s, e = _rows(d)
                e = min(e, s + max_lines - 1)
                a, _ = doc.line_bounds(s)
                _, b = doc.line_bounds(e)
                out.append((path, doc.text[a:b] + "\n"))
    return out


_OWN_OBJECTS = {b"self", b"cls", b"this"}


def foreign_attribute(node: ts.Node) -> bool:
    """``textwrap.shorten``'s ``shorten``: a name looked up on another object (a module, a value),
    which a rename of our own ``shorten`` must leave alone; ``self.x``/``this.x`` stay ours."""
    parent = node.parent
    if parent is None or parent.type not in (
        "attribute",
        "member_expression",
        "field_expression",
        "selector_expression",
    ):
        return False
    obj = (
        parent.child_by_field_name("object")
        or parent.child_by_field_name("value")
        or parent.child_by_field_name("operand")
    )
    if obj is None or obj.id == node.id:
        return False
    return obj.text not in _OWN_OBJECTS


def candidate_regions(
    doc: Document,
    parsed: ParsedDocument | None,
    names: set[str],
    exclude: Region,
    max_regions: int,
    max_lines: int = 8,
) -> list[Region]:
    """Small regions around other occurrences of ``names`` (outside ``exclude``), nearest first."""
    if parsed is None or not names:
        return []
    hits = [n.start_point.row for n in parsed.identifiers() if _text(n) in names and not foreign_attribute(n)]
    return regions_at(doc, parsed, hits, exclude, max_regions, max_lines)


def regions_at(
    doc: Document,
    parsed: ParsedDocument | None,
    rows: list[int],
    exclude: Region,
    max_regions: int,
    max_lines: int = 8,
    reason: str = "occurrence",
) -> list[Region]:
    """A small region (at most ``max_lines``) around each row outside ``exclude``, nearest to it first,
    none overlapping another; sorted by line."""
    regions: list[Region] = []
    for row in sorted(set(rows), key=lambda r: (abs(r - exclude.first_line), r)):
        if row in exclude:
            continue
        if any(row in r for r in regions):
            continue
        r = snap_region(doc, parsed, row, 1, max_lines, reason=reason)
        # never overlap another region: each candidate is its own place, its edits cannot collide
        if any(r.overlaps(o) for o in [exclude, *regions]):
            r = Region(row, row, reason)
        regions.append(r)
        if len(regions) >= max_regions:
            break
    return sorted(regions, key=lambda r: r.first_line)


def first_use(doc: Document, parsed: ParsedDocument | None, region: Region, names: set[str]) -> int:
    """Offset of the first use of ``names`` in a region, the prompt's cursor: an identifier node (see
    ``code_identifiers``), never a mention in a string or comment nor a longer name that contains it.
    A name is a use unless looked up on another object (``foreign_attribute``); an ``"ns.name"`` key
    (a module imported whole) is the member of ``ns.name``. The region's start when there is none."""
    start, _ = doc.line_bounds(region.first_line)
    if parsed is None:
        return start
    for node in parsed.identifiers(region.first_line, region.last_line):
        keys = use_keys(node)
        if (keys[0] in names and not foreign_attribute(node)) or any(k in names for k in keys[1:]):
            row, col = node.start_point
            line = doc.line_text(row).encode("utf-8", "surrogatepass")
            # tree-sitter counts UTF-8 bytes; the document counts code points
            return doc.line_bounds(row)[0] + len(line[:col].decode("utf-8", "surrogatepass"))
    return start
