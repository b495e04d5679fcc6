"""The VS Code extension: strict compile, its node tests (pure logic + a real ``editserver lsp``
spoken to over stdio with vscode-jsonrpc, as the extension does) and packaging into a .vsix.

No VS Code binary can be downloaded here, so the editor half is covered by strict type checking
and by keeping every decision in modules that do not import ``vscode`` (extensions/vscode/src/logic).

Design decisions:
- The extension's sources are copied to a temporary directory and ``npm ci`` runs there from the
  committed package-lock.json, so concurrent test runs never share (or delete) a node_modules and
  the checkout gets no build output. npm's cache makes repeated installs quick. Skipped, with the
  reason, only when npm is absent.
- The node integration tests get a real ``editserver serve`` (tiny model), the tiny checkpoint for
  the language server's own server (the Show log test), and the venv's
  ``editserver`` (first on PATH); they write the suggestion ids they used to a JSON file and this test checks that
  the telemetry rows for those ids exist, i.e. that the notifications really reached the server.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.extensions.conftest import REPO, Telemetry, quiet_env

SOURCE = REPO / "extensions" / "vscode"
COPY = [
    "package.json",
    "package-lock.json",
    "tsconfig.json",
    "README.md",
    ".vscodeignore",
    "src",
    "test",
    "media",
]


def run(cmd: list[str], cwd: Path, timeout: float, **env: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        cmd, cwd=cwd, env=quiet_env(**env), capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-6000:]}\n{proc.stderr[-4000:]}"
    )
    return proc


@pytest.fixture(scope="module")
def ext(tmp_path_factory) -> Path:
    """A private copy of extensions/vscode with its dependencies installed."""
    if shutil.which("npm") is None or shutil.which("node") is None:
        pytest.skip("npm/node are not installed: the VS Code extension cannot be built here")
    work = tmp_path_factory.mktemp("vscode") / "vscode"
    work.mkdir()
    for name in COPY:
        src = SOURCE / name
        if src.is_dir():
            shutil.copytree(src, work / name)
        else:
            shutil.copy2(src, work / name)
    run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], work, timeout=300)
    return work


def test_node_tests_against_real_language_server(ext, tiny_server, tiny_checkpoint, tmp_path):
    result_file = tmp_path / "result.json"
    proc = run(
        ["npm", "test", "--silent"],
        ext,
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
        assert (ext / "out" / "test" / f"{name}.test.js").is_file(), name

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


def test_strict_compile_and_package_vsix(ext, tmp_path):
    run(["npm", "run", "compile", "--silent"], ext, timeout=300)
    vsix = tmp_path / "editserver.vsix"
    run(
        ["npx", "--no-install", "vsce", "package", "--no-dependencies", "--skip-license", "--out", str(vsix)],
        ext,
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
    bundle = (ext / "dist" / "extension.js").read_text()
    assert "registerInlineCompletionItemProvider" in bundle
    assert 'require("vscode")' in bundle
