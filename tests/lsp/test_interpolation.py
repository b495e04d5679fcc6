"""Uses inside string interpolation: Python f-strings, JavaScript and TypeScript template literals.

The real case: a function ``name`` renamed in one file of a package; every use in the importing
files was asked about but the one in ``f"'{name(value)}': {e.strerror}"``. Here, per language, a
module defines ``name`` and uses it in an interpolation next to a mention of the name in a plain
string, a comment and a longer name (``filename``); another module imports it and does the same.
Checked at two levels:
- the index (``symbols.extract``, ``WorkspaceIndex``): the interpolated use is recorded (nested
  f-strings and format specs too), the text mentions never are;
- over the LSP (a real language server over stdio, tiny model): after the rename the next-edit
  reply asks about the interpolated use in the file and in the importing file, with the prompt's
  cursor on the use itself (the reply's ``regions[].cursor``), never on the text before it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from editserver.lsp.documents import Document
from editserver.lsp.index import WorkspaceIndex
from editserver.lsp.symbols import extract
from editserver.lsp.treesitter import ParsedDocument, Region, code_identifiers, first_use
from tests.lsp.conftest import lsp_session
from tests.lsp.test_cross_file import rel_of, rename, uri

PY_DEF = """\
HELP = "format_filename: the name of a file"


def name(value):
    return str(value)


def describe(value, e):
    # the name is quoted, then the error
    return f"{value.filename}: '{name(value)}': {e.strerror}"
"""
PY_USE = """\
import os

from pkg.paths import name

HELP = "prints each name"


def show(value):
    try:
        os.stat(value)
    except OSError as e:
        print(f"{e.filename} → '{name(value)}': {e.strerror}")
"""
TS_DEF = """\
const HELP = "format_filename: the name of a file";

export function name(value: string): string {
  return value.trim();
}

export function describe(file: { filename: string }, e: Error): string {
  return `${file.filename}: '${name(file.filename)}': ${e.message}`;
}
"""
TS_USE = """\
import { name } from "./paths";

const HELP = "prints each name";

export function show(file: { filename: string }, e: Error): void {
  console.log(`${file.filename} → '${name(file.filename)}': ${e.message}`);
}
"""
JS_DEF = TS_DEF.replace(": string", "").replace(": { filename }", "").replace(", e: Error)", ", e)")
JS_USE = TS_USE.replace(": { filename: string }", "").replace(", e: Error): void", ", e)")
# language id -> (grammar, defining module, its text, importing module, its text)
CASES = {
    "python": ("python", "pkg/paths.py", PY_DEF, "app/report.py", PY_USE),
    "typescript": ("typescript", "web/paths.ts", TS_DEF, "web/report.ts", TS_USE),
    "javascript": ("javascript", "js/paths.js", JS_DEF, "js/report.js", JS_USE),
}


def interpolated(text: str) -> tuple[int, int]:
    """(row, column) of the use of ``name`` inside the string interpolation."""
    rows = text.splitlines()
    row = next(i for i, line in enumerate(rows) if "{name(" in line)
    return row, rows[row].index("name(")


def only_text(text: str) -> int:
    """The row that mentions ``name`` only in a plain string."""
    return next(i for i, line in enumerate(text.splitlines()) if line.startswith(("HELP", "const HELP")))


@pytest.fixture
def workspace(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = tmp_path / "ws"
    for _grammar, defs, def_text, user, use_text in CASES.values():
        for rel, text in ((defs, def_text), (user, use_text)):
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
    (root / "pkg/__init__.py").write_text("")
    return root


# ---- the index -----------------------------------------------------------------------------------
@pytest.mark.parametrize("language", sorted(CASES))
def test_index_records_interpolated_uses_and_never_text(language):
    grammar, _, def_text, _, use_text = CASES[language]
    for text in (def_text, use_text):
        row, col = interpolated(text)
        uses = extract(grammar, text)["uses"]
        assert [row, len(text.splitlines()[row][:col].encode())] in uses["name"], uses["name"]
        # the plain string's and the comment's "name", and "format_filename", are text
        assert not any(r == only_text(text) for r, _ in uses["name"])
        assert "format_filename" not in uses and "the" not in uses and "is" not in uses


def test_index_descends_nested_interpolations_and_format_specs():
    py = 'x = f"{a:{width}} {f"{inner!r:>{pad}}"} {"plain"}"  # comment_name\ny = "no_use" + r"{raw}"\n'
    assert set(extract("python", py)["uses"]) == {"x", "a", "width", "inner", "pad", "y"}
    js = "const s = `a ${`b ${nested(v)}`} ${'plain'}`; // comment_name\nconst t = 'no_use';\n"
    ts = js + "type T = `pre-${Named}`;\n"
    assert set(extract("javascript", js)["uses"]) == {"s", "nested", "v", "t"}
    assert set(extract("typescript", ts)["uses"]) == {"s", "nested", "v", "t", "T", "Named"}


@pytest.mark.parametrize("language", sorted(CASES))
def test_index_follows_an_import_used_only_in_an_interpolation(workspace, tmp_path, language):
    """The importing file (its import aside, it uses ``name`` only in an interpolation) is found and
    its record holds the interpolated use, so a cross-file plan asks about it."""
    _, defs, _, user, use_text = CASES[language]
    index = WorkspaceIndex([str(workspace)], cache_dir=str(tmp_path / "c"))
    for p in index.scan()[0]:
        index.update(p)
    root = workspace.resolve()
    (imp,) = index.importers(str(root / defs), "name")
    assert rel_of(workspace, "file://" + imp.path) == user and imp.distance == 1
    rows = [r for r, _ in index.files[imp.path]["uses"][imp.key]]
    assert interpolated(use_text)[0] in rows and only_text(use_text) not in rows


@pytest.mark.parametrize("language", sorted(CASES))
def test_first_use_lands_on_the_interpolated_use(language):
    """The prompt's cursor: the use, not "name" in the comment nor in "filename" before it."""
    grammar, _, def_text, _, use_text = CASES[language]
    for text in (def_text, use_text):
        doc, parsed = Document("file:///x", text, 1, language), ParsedDocument(grammar, text)
        row, col = interpolated(text)
        region = Region(row - 2, row)
        assert doc.position_at(first_use(doc, parsed, region, {"name"})) == (row, col)
        names = {n.text.decode() for n in code_identifiers(parsed.tree.root_node, row - 2, row)}
        assert "name" in names and "format_filename" not in names


# ---- over the LSP --------------------------------------------------------------------------------
def asked_at(res: dict, workspace: Path, rel: str, row: int) -> list[dict]:
    """The reply's regions in ``rel`` that cover ``row``."""
    return [
        r
        for r in res["regions"]
        if rel_of(workspace, r["uri"]) == rel
        and r["range"]["start"]["line"] <= row < r["range"]["end"]["line"]
    ]


@pytest.mark.parametrize("language", sorted(CASES))
async def test_rename_asks_about_interpolated_uses_here_and_in_importers(
    tiny_server, base_options, workspace, language
):
    _, defs, def_text, user, use_text = CASES[language]
    options = {**base_options, "crossFile": True}
    async with lsp_session(tiny_server, options, root_uri=workspace.as_uri()) as s:
        await s.request("editserver/indexState", {"wait": True})
        line = next(
            i for i, t in enumerate(def_text.splitlines()) if "function name(" in t or "def name(" in t
        )
        res = await rename(s, workspace, defs, line, "name", "display_name", language)
        for rel, text, distance, reason in ((defs, def_text, 0, "occurrence"), (user, use_text, 1, "import")):
            row, col = interpolated(text)
            (hit,) = asked_at(res, workspace, rel, row)
            assert (hit["distance"], hit["reason"]) == (distance, reason), hit
            # the prompt's cursor is on the use, not on "name" in a comment or in "filename" before it
            assert hit["cursor"] == {"line": row, "character": col}, (rel, hit)
            assert not asked_at(res, workspace, rel, only_text(text))  # a plain string is no use
        assert uri(workspace, user) in {r["uri"] for r in res["regions"]}


def test_click_format_filename_reaches_its_use_in_an_f_string(tmp_path):
    """The held-out case: click's ``format_filename`` (utils.py) renamed; ``types.py`` uses it in
    ``f"'{format_filename(value)}': {e.strerror}"`` beside six plain calls. The index now records
    every use in every importing file, that one included (the old walk skipped the f-string)."""
    import shutil

    import click

    src = Path(click.__file__).parent
    root = tmp_path / "ws"
    shutil.copytree(src, root / "click", ignore=shutil.ignore_patterns("__pycache__"))
    in_fstring = [
        i
        for i, line in enumerate((root / "click" / "types.py").read_text().splitlines())
        if "{format_filename(" in line
    ]
    assert in_fstring, "this click has the f-string use"
    index = WorkspaceIndex([str(root)], cache_dir=str(tmp_path / "c"))
    for p in index.scan()[0]:
        index.update(p)
    found = {
        Path(imp.path).name: {r for r, _ in index.files[imp.path]["uses"][imp.key]}
        for imp in index.importers(str((root / "click" / "utils.py").resolve()), "format_filename")
    }
    assert {"types.py", "exceptions.py"} <= set(found)
    assert set(in_fstring) <= found["types.py"]
    calls = [
        i
        for i, line in enumerate((root / "click" / "types.py").read_text().splitlines())
        if "format_filename(" in line
    ]
    assert set(calls) <= found["types.py"]  # every call, the f-string's among them
