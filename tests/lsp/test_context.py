"""tree-sitter context per language: region snapping, incremental parsing, definitions, candidates."""

from __future__ import annotations

import pytest

from editserver.lsp.documents import Document
from editserver.lsp.treesitter import (
    ParsedDocument,
    Region,
    candidate_regions,
    definitions_for,
    grammar_name,
    node_name,
    snap_region,
)

# Each source: a helper definition (lines 0..3 or so), a long caller, and a second caller.
SOURCES = {
    "python": (
        "def scale(v, k):\n"
        "    out = v * k\n"
        "    return out\n"
        "\n"
        "\n"
        "def main():\n"
        "    a = scale(1, 2)\n"
        "    b = scale(a, 3)\n"
        "    print(a, b)\n"
        "\n"
        "\n"
        "def other():\n"
        "    return scale(5, 5)\n",
        "scale",
    ),
    "javascript": (
        "function scale(v, k) {\n"
        "  const out = v * k;\n"
        "  return out;\n"
        "}\n"
        "\n"
        "function main() {\n"
        "  const a = scale(1, 2);\n"
        "  const b = scale(a, 3);\n"
        "  console.log(a, b);\n"
        "}\n"
        "\n"
        "function other() {\n"
        "  return scale(5, 5);\n"
        "}\n",
        "scale",
    ),
    "typescript": (
        "function scale(v: number, k: number): number {\n"
        "  const out = v * k;\n"
        "  return out;\n"
        "}\n"
        "\n"
        "function main(): void {\n"
        "  const a = scale(1, 2);\n"
        "  const b = scale(a, 3);\n"
        "  console.log(a, b);\n"
        "}\n"
        "\n"
        "function other(): number {\n"
        "  return scale(5, 5);\n"
        "}\n",
        "scale",
    ),
    "go": (
        "func scale(v int, k int) int {\n"
        "\tout := v * k\n"
        "\treturn out\n"
        "}\n"
        "\n"
        "func main() {\n"
        "\ta := scale(1, 2)\n"
        "\tb := scale(a, 3)\n"
        "\tfmt.Println(a, b)\n"
        "}\n"
        "\n"
        "func other() int {\n"
        "\treturn scale(5, 5)\n"
        "}\n",
        "scale",
    ),
    "rust": (
        "fn scale(v: i32, k: i32) -> i32 {\n"
        "    let out = v * k;\n"
        "    out\n"
        "}\n"
        "\n"
        "fn main() {\n"
        "    let a = scale(1, 2);\n"
        "    let b = scale(a, 3);\n"
        '    println!("{} {}", a, b);\n'
        "}\n"
        "\n"
        "fn other() -> i32 {\n"
        "    scale(5, 5)\n"
        "}\n",
        "scale",
    ),
}


@pytest.mark.parametrize("language", sorted(SOURCES))
def test_region_snaps_to_enclosing_definition(language):
    src, _ = SOURCES[language]
    doc = Document(f"file:///m.{language}", src, 1, language)
    parsed = ParsedDocument(grammar_name(language), src)
    assert not parsed.tree.root_node.has_error
    # a small budget: the whole caller function (lines 5..8/9), never half of it
    r = snap_region(doc, parsed, 7, 1, 6)
    first, last = r.first_line, r.last_line
    assert first == 5 and last in (8, 9), (language, r)
    # a budget too small for the function: the statement at the cursor only
    r = snap_region(doc, parsed, 7, 1, 2)
    assert r.first_line == r.last_line == 7
    # the default-sized budget widens with whole neighbouring definitions, still whole lines around 7
    r = snap_region(doc, parsed, 7, 10, 25)
    assert r.first_line <= 5 and r.last_line >= 9 and r.lines <= 25


@pytest.mark.parametrize("language", sorted(SOURCES))
def test_incremental_parse_keeps_tree_current(language):
    src, name = SOURCES[language]
    doc = Document(f"file:///m.{language}", src, 1, language)
    parsed = ParsedDocument(grammar_name(language), src)
    line = doc.line_text(0)
    col = line.index(name) + len(name)
    for i, ch in enumerate("_by"):
        edit = doc.apply(ch, (0, col + i, 0, col + i))
        parsed.update(edit, doc.text)
    assert parsed.full_parses == 1 and parsed.incremental_parses == 3
    fresh = ParsedDocument(grammar_name(language), doc.text)
    assert str(parsed.tree.root_node) == str(fresh.tree.root_node)
    names = {node_name(d) for d in parsed.definitions()}
    assert {f"{name}_by", "main", "other"} <= names


@pytest.mark.parametrize("language", sorted(SOURCES))
def test_candidates_at_other_occurrences_and_definitions(language):
    src, name = SOURCES[language]
    doc = Document(f"file:///m.{language}", src, 1, language)
    parsed = ParsedDocument(grammar_name(language), src)
    cursor = Region(0, 3)
    cands = candidate_regions(doc, parsed, {name}, cursor, max_regions=4)
    lines = {ln for r in cands for ln in range(r.first_line, r.last_line + 1)}
    assert {6, 7, 12} <= lines, (language, cands)
    assert all(r.last_line < cursor.first_line or r.first_line > cursor.last_line for r in cands)
    assert all(a.last_line < b.first_line for a, b in zip(cands, cands[1:]))  # disjoint
    defs = definitions_for({name}, [("lib", doc, parsed)])
    assert len(defs) == 1 and name in defs[0][1].splitlines()[0]
    # a string or comment mentioning the name is not an occurrence
    assert candidate_regions(doc, parsed, {"nothing_here"}, cursor, 4) == []


def test_definition_header_lookup_and_grammar_lookup():
    src, _ = SOURCES["python"]
    parsed = ParsedDocument("python", src)
    d = parsed.definition_at_line(0)
    assert d is not None and node_name(d) == "scale"
    assert parsed.definition_at_line(1) is None  # a body line is not the header
    assert grammar_name("", "file:///x/y.tsx") == "tsx"
    assert grammar_name("typescriptreact") == "tsx"
    assert grammar_name("plaintext", "file:///a.txt") is None
