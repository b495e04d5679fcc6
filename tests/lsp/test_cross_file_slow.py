"""Cross-file next edits with the shipped model: a rename in shop/pricing.py carried into every file
that imports it, applied through ``editserver/applyEdits`` (the LSP's ``workspace/applyEdit``, which
this test's client applies to the files on disk as an editor would), and a file changed on disk
since the edits were computed refused, never applied."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from lsprotocol import types

from editserver.bench.index import FILES, NOT_USES, PRICING, USES
from tests.lsp.conftest import lsp_session
from tests.lsp.test_cross_file import rel_of, rename, uri, workspace  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow


def _apply_to_disk(params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
    """The editor's side of workspace/applyEdit, on files on disk (ASCII, so UTF-16 = code points)."""
    for change in params.edit.document_changes or []:
        path = Path(change.text_document.uri.removeprefix("file://"))
        lines = path.read_text().splitlines(keepends=True)
        starts = [0]
        for ln in lines:
            starts.append(starts[-1] + len(ln))
        text = "".join(lines)
        for e in sorted(
            change.edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True
        ):
            a = starts[e.range.start.line] + e.range.start.character
            b = starts[e.range.end.line] + e.range.end.character
            text = text[:a] + e.new_text + text[b:]
        path.write_text(text)
    return types.ApplyWorkspaceEditResult(applied=True)


def _uses(text: str, name: str) -> int:
    return len(re.findall(rf"\b{name}\b", text))


async def test_rename_carried_into_importing_files_and_stale_file_refused(shipped_server, workspace):  # noqa: F811
    options = {"debounceMs": 0, "telemetry": {"enabled": False}, "crossFile": True}
    async with lsp_session(
        shipped_server, options, root_uri=workspace.as_uri(), on_apply_edit=_apply_to_disk
    ) as s:
        await s.request("editserver/indexState", {"wait": True})
        res = await rename(s, workspace, PRICING, 3, "compute", "compute_total", "python")
        files = {rel_of(workspace, e["textDocument"]["uri"]) for e in res["edits"]}
        print("files with edits:", sorted(files))
        assert files - {PRICING} == set(USES), res["regions"]
        assert all(
            e["textDocument"]["version"] is None
            for e in res["edits"]
            if PRICING not in e["textDocument"]["uri"]
        )
        # api.py changes on disk after the edits were computed: its edits are refused
        (workspace / "app/api.py").write_text(FILES["app/api.py"] + "# edited elsewhere\n")
        refused = await s.request(
            "editserver/applyEdits", {"id": res["id"], "uri": uri(workspace, "app/api.py")}
        )
        assert refused["applied"] is False and "changed" in refused["reason"]
        again = await s.request(
            "editserver/applyEdits", {"id": res["id"], "uri": uri(workspace, "app/api.py")}
        )
        assert again["applied"] is False  # dropped for good
        for rel in sorted(set(USES) - {"app/api.py"}):
            done = await s.request("editserver/applyEdits", {"id": res["id"], "uri": uri(workspace, rel)})
            assert done["applied"] is True, (rel, done)
    for rel, n in USES.items():
        text = (workspace / rel).read_text()
        if rel == "app/api.py":
            assert text == FILES[rel] + "# edited elsewhere\n"  # never touched
            continue
        assert _uses(text, "compute") == 0 and _uses(text, "compute_total") == n, (rel, text)
    for rel in NOT_USES:
        assert (workspace / rel).read_text() == FILES[rel]
