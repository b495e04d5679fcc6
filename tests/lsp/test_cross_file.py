"""Cross-file next edits on a multi-package workspace (Python and TypeScript), tiny model.

The index and the planning are deterministic, so here we check which files are asked about: after
a rename of ``compute`` in shop/pricing.py, every file that imports it (directly, as a module, or
through the package's re-export) and none that defines or imports a ``compute`` of its own, nor a
.gitignored one; the index follows files changed on disk; its cache makes a second start parse
nothing. Whether the shipped model renames them, and applying with a refusal of a stale file, is in
test_cross_file_slow.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from lsprotocol import types

from editserver.bench.index import NOT_USES, PRICING, TS_NOT_USES, USES, write_packages
from editserver.lsp.index import CACHE_VERSION, WorkspaceIndex
from editserver.lsp.rewrite import minimal_edits
from tests.lsp.conftest import lsp_session


@pytest.fixture
def workspace(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return write_packages(tmp_path / "ws")


def uri(root: Path, rel: str) -> str:
    return (root / rel).resolve().as_uri()


def rel_of(root: Path, u: str) -> str:
    return os.path.relpath(u.removeprefix("file://"), root.resolve())


async def rename(s, root: Path, rel: str, line: int, old: str, new: str, language: str) -> dict:
    text = (root / rel).read_text()
    s.open(uri(root, rel), text, language)
    col = text.splitlines()[line].index(old)
    s.replace(uri(root, rel), (line, col), (line, col + len(old)), new)
    return await s.request(
        "editserver/nextEdit",
        {"textDocument": {"uri": uri(root, rel)}, "position": {"line": line, "character": col + len(new)}},
    )


def asked(res: dict, root: Path) -> dict[str, int]:
    """Files other than the edited one asked about -> import-graph distance."""
    out: dict[str, int] = {}
    for r in res["regions"]:
        if r["distance"] > 0:
            out[rel_of(root, r["uri"])] = r["distance"]
    return out


def test_minimal_edits_replace_whole_tokens():
    assert [
        (e.start, e.end, e.new_text) for e in minimal_edits("x = host_header\n", "x = header_host\n")
    ] == [(4, 15, "header_host")]
    (e,) = minimal_edits("a = compute(x)\n", "a = compute_total(x)\n")
    assert (e.start, e.end, e.new_text) == (4, 11, "compute_total")
    (e,) = minimal_edits("f(a, b)\n", "f(a, b, c)\n")  # punctuation stays minimal
    assert (e.start, e.end, e.new_text) == (6, 6, ", c")


def test_index_records_imports_and_respects_gitignore(workspace, tmp_path):
    index = WorkspaceIndex([str(workspace)], cache_dir=str(tmp_path / "c"))
    paths, skipped = index.scan()
    rels = {os.path.relpath(p, workspace.resolve()) for p in paths}
    assert "build/generated.py" not in rels and {"app/orders.py", "web/cart.ts"} <= rels
    assert skipped == 0
    small = WorkspaceIndex([str(workspace)], cache_dir=str(tmp_path / "c"), max_files=3)
    assert len(small.scan()[0]) == 3 and small.scan()[1] > 0  # the bound holds


async def test_rename_asks_every_importing_file_and_no_other(tiny_server, base_options, workspace):
    options = {**base_options, "crossFile": True}
    async with lsp_session(tiny_server, options, root_uri=workspace.as_uri()) as s:
        state = await s.request("editserver/indexState", {"wait": True})
        assert state["state"] == "ready" and state["stats"]["parsed"] == state["files"] == 12
        res = await rename(s, workspace, PRICING, 3, "compute", "compute_total", "python")
        got = asked(res, workspace)
        assert set(got) == set(USES), got
        assert not set(got) & set(NOT_USES)
        # direct importers first, then the package's re-export's importer
        assert got == {"shop/__init__.py": 1, "app/orders.py": 1, "app/cart.py": 1, "app/api.py": 2}
        order = [rel_of(workspace, r["uri"]) for r in res["regions"] if r["distance"] > 0]
        assert order.index("app/api.py") > max(order.index(f) for f in got if got[f] == 1)
        in_file = [r for r in res["regions"] if r["distance"] == 0]
        assert res["regions"][: len(in_file)] == in_file  # in-file regions are asked first
        assert all(r["reason"] == "import" for r in res["regions"] if r["distance"] > 0)

        ts = await rename(s, workspace, "web/pricing.ts", 0, "computeTotal", "computeSum", "typescript")
        assert set(asked(ts, workspace)) == {"web/cart.ts"} and not set(asked(ts, workspace)) & set(
            TS_NOT_USES
        )

    # reopening: the cache has every file, nothing is parsed again
    async with lsp_session(tiny_server, options, root_uri=workspace.as_uri()) as s:
        state = await s.request("editserver/indexState", {"wait": True})
        assert state["stats"]["parsed"] == 0 and state["stats"]["fromCache"] == 12
        assert json.loads(Path(state["cache"]).read_text())["version"] == CACHE_VERSION


async def test_excluded_files_are_never_asked_about(tiny_server, base_options, workspace):
    """excludeFiles holds for other files too: an importer that matches is never read into a prompt."""
    options = {**base_options, "crossFile": True, "excludeFiles": ["cart.py"]}
    async with lsp_session(tiny_server, options, root_uri=workspace.as_uri()) as s:
        await s.request("editserver/indexState", {"wait": True})
        res = await rename(s, workspace, PRICING, 3, "compute", "compute_total", "python")
        got = asked(res, workspace)
        assert "app/cart.py" not in got and set(got) == set(USES) - {"app/cart.py"}, got


async def test_index_follows_files_changed_on_disk(tiny_server, base_options, workspace):
    options = {**base_options, "crossFile": True}
    async with lsp_session(tiny_server, options, root_uri=workspace.as_uri()) as s:
        await s.request("editserver/indexState", {"wait": True})
        # vendor.py now imports the shop's compute; a watcher reports the change
        (workspace / "other/vendor.py").write_text(
            "from shop.pricing import compute\n\n\ndef doubled(values):\n    return compute(values, 2)\n"
        )
        (workspace / "app/api.py").unlink()
        s.client.workspace_did_change_watched_files(
            types.DidChangeWatchedFilesParams(
                changes=[
                    types.FileEvent(uri(workspace, "other/vendor.py"), types.FileChangeType.Changed),
                    types.FileEvent(uri(workspace, "app/api.py"), types.FileChangeType.Deleted),
                ]
            )
        )
        res = await rename(s, workspace, PRICING, 3, "compute", "compute_total", "python")
        got = asked(res, workspace)
        assert "other/vendor.py" in got and "app/api.py" not in got
