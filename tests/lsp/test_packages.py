"""Cross-file candidates in Go and Rust: imports resolved to package directories and module files.

A Go workspace (a go.mod module with two packages, a same-named function in a third, and a standard
library import) and a Rust crate (``mod``/``use crate::``/``use super::``/aliases, and a same-named
function of another module) are indexed for real (the worker process, tree-sitter); the queries must
name every file that uses the renamed definition through its imports, and no other. One rename also
goes through the language server over stdio, to check these regions are asked about.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from editserver.lsp.index import WorkspaceIndex
from tests.lsp.conftest import lsp_session
from tests.lsp.test_cross_file import asked, rename

GO = {
    "go.mod": "module example.com/shop\n\ngo 1.22\n",
    "pricing/pricing.go": "package pricing\n\nfunc Total(xs []int) int {\n\treturn sum(xs)\n}\n",
    "pricing/sum.go": "package pricing\n\nfunc sum(xs []int) int {\n\tt := 0\n\tfor _, x := range xs {\n"
    "\t\tt += x\n\t}\n\treturn t\n}\n\nfunc Twice(xs []int) int { return 2 * Total(xs) }\n",
    "cart/cart.go": 'package cart\n\nimport (\n\t"fmt"\n\tp "example.com/shop/pricing"\n)\n\n'
    "func Show(xs []int) { fmt.Println(p.Total(xs)) }\n",
    "api/api.go": 'package api\n\nimport "example.com/shop/pricing"\n\n'
    "func Handle(xs []int) int { return pricing.Total(xs) }\n",
    # a Total of its own, and a file importing another package only
    "ledger/ledger.go": "package ledger\n\nfunc Total(xs []int) int { return len(xs) }\n",
    "report/report.go": 'package report\n\nimport "example.com/shop/ledger"\n\n'
    "func Lines(xs []int) int { return ledger.Total(xs) }\n",
}
RUST = {
    "Cargo.toml": '[package]\nname = "shop"\nversion = "0.1.0"\n',
    "src/lib.rs": "mod pricing;\nmod cart;\nmod ledger;\n\npub fn run() -> i32 { pricing::total(&[1]) }\n",
    "src/pricing.rs": "pub fn total(xs: &[i32]) -> i32 {\n    xs.iter().sum()\n}\n",
    "src/cart/mod.rs": "use crate::pricing::total;\nmod view;\n\npub fn show() -> i32 { total(&[2]) }\n",
    "src/cart/view.rs": "use super::super::pricing::{total as sum_of};\n\npub fn line() -> i32 { sum_of(&[3]) }\n",
    "src/ledger.rs": "pub fn total(xs: &[i32]) -> i32 { xs.len() as i32 }\n\npub fn n() -> i32 { total(&[]) }\n",
}


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


async def built(root: Path, tmp_path: Path) -> WorkspaceIndex:
    index = WorkspaceIndex([str(root)], cache_dir=str(tmp_path / "cache"))
    await index.build()
    return index


def importers(index: WorkspaceIndex, root: Path, rel: str, name: str) -> dict[str, tuple[str, int]]:
    base = os.path.realpath(root)
    found = index.importers(os.path.join(base, rel), name)
    return {os.path.relpath(i.path, base): (i.key, i.distance) for i in found}


async def test_go_imports_resolve_to_package_directories(tmp_path):
    root = write(tmp_path / "go", GO)
    index = await built(root, tmp_path)
    assert importers(index, root, "pricing/pricing.go", "Total") == {
        "pricing/sum.go": ("Total", 1),  # the same package names it unqualified
        "cart/cart.go": ("p.Total", 1),  # through an alias
        "api/api.go": ("pricing.Total", 1),
    }
    assert importers(index, root, "ledger/ledger.go", "Total") == {"report/report.go": ("ledger.Total", 1)}


async def test_go_imports_outside_the_module_resolve_to_nothing(tmp_path):
    root = write(tmp_path / "go", {**GO, "go.mod": "module example.com/other\n"})
    index = await built(root, tmp_path)
    assert importers(index, root, "pricing/pricing.go", "Total") == {"pricing/sum.go": ("Total", 1)}


async def test_rust_uses_resolve_through_mod_use_super_and_aliases(tmp_path):
    root = write(tmp_path / "rs", RUST)
    index = await built(root, tmp_path)
    assert importers(index, root, "src/pricing.rs", "total") == {
        "src/lib.rs": ("pricing.total", 1),  # `mod pricing;` then `pricing::total`
        "src/cart/mod.rs": ("total", 1),  # `use crate::pricing::total;`
        "src/cart/view.rs": ("sum_of", 1),  # `use super::super::pricing::{total as sum_of}`
    }
    assert importers(index, root, "src/ledger.rs", "total") == {}  # same name, another module


@pytest.mark.parametrize(
    ("files", "rel", "line", "old", "new", "language", "want"),
    [
        (GO, "pricing/pricing.go", 2, "Total", "Sum", "go", {"pricing/sum.go", "cart/cart.go", "api/api.go"}),
        (
            RUST,
            "src/pricing.rs",
            0,
            "total",
            "sum",
            "rust",
            {"src/lib.rs", "src/cart/mod.rs", "src/cart/view.rs"},
        ),
    ],
)
async def test_rename_asks_go_and_rust_importers_over_the_lsp(
    tiny_server, base_options, tmp_path, monkeypatch, files, rel, line, old, new, language, want
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = write(tmp_path / "ws", files)
    async with lsp_session(tiny_server, {**base_options, "crossFile": True}, root_uri=root.as_uri()) as s:
        assert (await s.request("editserver/indexState", {"wait": True}))["state"] == "ready"
        res = await rename(s, root, rel, line, old, new, language)
        assert set(asked(res, root)) == want
