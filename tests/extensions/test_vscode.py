"""The VS Code extension: strict compile, its node tests (pure logic + a real ``editserver lsp``
spoken to over stdio with vscode-jsonrpc, as the extension does) and packaging into a .vsix.

The extension in a real VS Code (code-server in chromium) is tests/extensions/test_vscode_editor.py.

Design decisions:
- The extension's sources are copied to a temporary directory and ``npm ci`` runs there from the
  committed package-lock.json (the ``vscode_ext`` fixture in conftest.py), so concurrent test runs
  never share (or delete) a node_modules and the checkout gets no build output. npm's cache makes
  repeated installs quick. Skipped, with the reason, only when npm is absent.
- The node integration tests get a real ``editserver serve`` (tiny model), the tiny checkpoint for
  the language server's own server (the Show log test), and the venv's
  ``editserver`` (first on PATH); they write the suggestion ids they used to a JSON file and this test checks that
  the telemetry rows for those ids exist, i.e. that the notifications really reached the server.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

from editserver.lsp.privacy import DEFAULT_EXCLUDES
from tests.extensions.conftest import SOURCE, Telemetry, run


def test_node_tests_against_real_language_server(vscode_ext, tiny_server, tiny_checkpoint, tmp_path):
    result_file = tmp_path / "result.json"
    proc = run(
        ["npm", "test", "--silent"],
        vscode_ext,
        timeout=300,
        EDITSERVER_SERVER_URL=tiny_server.url,
        EDITSERVER_RESULT_FILE=str(result_file),
        EDITSERVER_TINY_MODEL=str(tiny_checkpoint),  # for the language server's own model server (Show log)
    )
    out = proc.stdout
    assert "ℹ fail 0" in out and "ℹ skipped 0" in out, out[-3000:]
    assert "initialize: the server offers inline completions" in out
    assert "Show log: the language server's own model server log" in out
    for name in ("acceptSpan", "ghost", "preview", "log"):  # the pure-logic suites ran
        assert (vscode_ext / "out" / "test" / f"{name}.test.js").is_file(), name

    used = json.loads(result_file.read_text())
    tel = Telemetry(Path(used["telemetryPath"]))
    inline = used["inline"]
    events = tel.wait_events(
        inline["id"], lambda ev: any(e[1] == "accept" and e[3] is None for e in ev), "the full accept"
    )
    kinds = [(e[1], e[3], e[4]) for e in events]
    assert ("show", None, None) in kinds
    # the accepted word itself is code: stored only with telemetry.keepPrompts (off here)
    assert ("accept", "word", None) in kinds and inline["word"]
    assert any(k[0] == "accept" and k[1] is None for k in kinds)  # the command on full accept
    ne = used["nextEdit"]
    events = tel.wait_events(ne["id"], lambda ev: any(e[1] == "reject" for e in ev), "the reject")
    assert [e[1] for e in events] == ["show", "reject"]


def test_strict_compile_and_package_vsix(vscode_ext, tmp_path):
    run(["npm", "run", "compile", "--silent"], vscode_ext, timeout=300)
    vsix = tmp_path / "editserver.vsix"
    run(
        ["npx", "--no-install", "vsce", "package", "--no-dependencies", "--skip-license", "--out", str(vsix)],
        vscode_ext,
        timeout=300,
    )
    with zipfile.ZipFile(vsix) as z:
        names = set(z.namelist())
        manifest = json.loads(z.read("extension/package.json"))
    assert "extension/dist/extension.js" in names
    assert {"extension/media/next-edit-up.svg", "extension/media/next-edit-down.svg"} <= names
    assert not any("node_modules" in n or n.endswith(".ts") for n in names)
    assert manifest["main"] == "./dist/extension.js"
    # The bundle carries vscode-languageclient (vsix has no node_modules) and leaves `vscode` external.
    bundle = (vscode_ext / "dist" / "extension.js").read_text()
    assert "registerInlineCompletionItemProvider" in bundle
    assert 'require("vscode")' in bundle


def test_extension_matches_excluded_files_with_the_server_defaults():
    """The status bar names the pattern for files no client attaches to (logic/privacy.ts), so the
    extension's default list must be the server's (editserver/lsp/privacy.py)."""
    source = (SOURCE / "src" / "logic" / "privacy.ts").read_text()
    listed = re.search(r"export const DEFAULT_EXCLUDES = (\[.*?\]);", source, re.S)
    assert listed is not None
    assert json.loads(listed.group(1)) == list(DEFAULT_EXCLUDES)
