"""Reproduce the Neovim captures in extensions/README.md from a real run.

Neovim runs in a tmux pane (a real terminal UI) with this plugin, talking through `editserver lsp`
to the `editserver serve` at --url; pynvim drives it over its --listen socket (exact keys, polled
waits) and `tmux capture-pane -p` takes the text of the screen:
  1. rename a parameter in normal mode until next edits are on screen;
  2. dismiss, undo, and type in insert mode until ghost text is on screen.

    python extensions/nvim/scripts/demo.py --url http://127.0.0.1:8000 [--nvim PATH]

Needs tmux, pynvim, nvim (0.12 for native ghost text) and `editserver` on PATH.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLUGIN = Path(__file__).resolve().parents[1]
SOURCE = """def area(width, height):
    return width * height


def describe(width, height):
    print("area", area(width, height))


describe(2, 3)
"""


def wait(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise TimeoutError(f"gave up waiting for {what}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--nvim", default=shutil.which("nvim") or "nvim")
    p.add_argument("--timeout", type=float, default=180.0)
    args = p.parse_args()
    import pynvim

    work = Path(tempfile.mkdtemp())
    (work / "shapes.py").write_text(SOURCE)
    (work / "init.lua").write_text(
        f"""vim.opt.rtp:prepend({str(PLUGIN)!r})
vim.o.signcolumn = 'yes'
vim.o.number = true
vim.o.laststatus = 2
vim.o.statusline = "%f %= %{{v:lua.require'editserver'.statusline()}} "
require('editserver').setup({{ server_url = {args.url!r}, autostart = false, telemetry = {{ enabled = false }} }})
"""
    )
    sock = work / "nvim.sock"
    tmux_name = f"editserver-demo-{int(time.time())}"
    cmd = f"cd {work} && {args.nvim} --listen {sock} -u init.lua shapes.py"
    subprocess.run(["tmux", "new-session", "-d", "-s", tmux_name, "-x", "92", "-y", "17", cmd], check=True)
    try:
        wait(sock.exists, 30, "the Neovim socket")
        nvim = pynvim.attach("socket", path=str(sock))
        status = "return require('editserver').status().state"
        wait(lambda: nvim.exec_lua(status) == "ready", args.timeout, "the server")

        def screen() -> str:
            nvim.command("redraw!")
            return subprocess.run(
                ["tmux", "capture-pane", "-p", "-t", tmux_name], capture_output=True, text=True, check=True
            ).stdout

        nvim.command("call cursor(1, 10)")
        nvim.input("ciwsize<Esc>")
        answer = "return require('editserver').next_edit.last() ~= nil"
        wait(lambda: nvim.exec_lua(answer), args.timeout, "the next-edit answer")
        shown = nvim.exec_lua("return require('editserver').next_edit.current()")
        print("--- next edits ---" if shown else "--- next edits: the model proposed none ---")
        print(screen(), end="")

        nvim.input("<Esc>")  # dismiss
        nvim.command("silent undo")
        nvim.input("Goresult = area(")
        ghost = "local g = require('editserver').ghost.current() return g ~= nil and g.text:match('%S') ~= nil"
        wait(lambda: nvim.exec_lua(ghost), args.timeout, "ghost text")
        print("--- ghost text ---")
        print(screen(), end="")
        try:
            nvim.command("qall!")
        except (EOFError, OSError):
            pass  # Neovim exits before it answers
    finally:
        subprocess.run(["tmux", "kill-session", "-t", tmux_name], capture_output=True, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
