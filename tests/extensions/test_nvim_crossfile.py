"""Next edits across files in a real headless Neovim, on the multi-package workspace
(editserver/bench/index.py): the hint "N more in M files", the quickfix list, Tab into the next file
(applied by the language server through workspace/applyEdit), and a request at once on leaving
insert mode. The rename's content needs the shipped model (slow); the plumbing runs on the tiny one.
After the Tabs, the telemetry file joins: the reply's id is a next_edit suggestion row with its show
and accepts, and no accept lacks its row.
"""

from __future__ import annotations

import re
import time

import pytest

from editserver.bench.index import FILES, NOT_USES, PRICING, USES, write_packages
from tests.extensions.conftest import wait_until
from tests.extensions.test_nvim import start


def open_workspace(n, tmp_path):
    root = write_packages(tmp_path / "ws")
    (root / ".git").mkdir()  # the plugin's root marker: the language server indexes this folder
    n.api.command(f"cd {root}")
    n.api.command(f"edit {root / PRICING}")
    n.wait("return #vim.lsp.get_clients({name = 'editserver', bufnr = 0}) > 0", 30, "the client to attach")
    n.wait("return require('editserver').status().state == 'ready'", 60, "server state 'ready'")
    return root


def snapshot(n):
    return n.lua(
        "return {vim.api.nvim_buf_get_name(0), vim.api.nvim_buf_get_changedtick(0),"
        " vim.api.nvim_win_get_cursor(0), require('editserver').next_edit.more()}"
    )


def test_leaving_insert_mode_asks_at_once(nvim_factory, tiny_server, tmp_path):
    """With a 20 s debounce, an answer within 15 s can only come from the request on <Esc>; a
    normal-mode change still waits for the debounce."""
    n, _ = start(nvim_factory, tiny_server.url, tmp_path, next_edit={"debounce_ms": 20000})
    open_workspace(n, tmp_path)
    n.api.current.window.cursor = (4, 4)
    n.input("ciwcompute_total<Esc>")
    n.wait("return require('editserver').next_edit.last() ~= nil", 15, "the request sent on <Esc>")
    first = n.lua("return require('editserver').next_edit.last().id")
    n.input("x")  # a normal-mode change: debounced
    time.sleep(2)
    assert n.lua("return require('editserver').next_edit.last().id") == first


def test_hint_statusline_and_quickfix_hold_other_files(nvim_factory, tiny_server, tmp_path):
    """A reply with edits in two other files: the virtual line, the statusline and the quickfix list."""
    n, _ = start(nvim_factory, tiny_server.url, tmp_path, next_edit={"auto": False})
    root = open_workspace(n, tmp_path)

    def edit(rel, line, c0, c1, text):
        uri = (root / rel).resolve().as_uri()
        rng = {"start": {"line": line, "character": c0}, "end": {"line": line, "character": c1}}
        return {"textDocument": {"uri": uri, "version": None}, "range": rng, "newText": text}

    here = (root / PRICING).resolve().as_uri()
    reply = {
        "id": "x1",
        "edits": [
            {**edit(PRICING, 9, 11, 18, "compute_total"), "textDocument": {"uri": here, "version": 1}},
            edit("app/orders.py", 0, 25, 32, "compute_total"),
            edit("app/orders.py", 4, 11, 18, "compute_total"),
            edit("app/cart.py", 8, 23, 30, "compute_total"),
        ],
        "score": 0.9,
    }
    n.lua(
        "local c = vim.lsp.get_clients({name = 'editserver'})[1];"
        " require('editserver.nextedit').show(0, c, ...)",
        reply,
    )
    assert n.lua("return require('editserver').next_edit.more()") == {"edits": 3, "files": 2}
    assert "3 more in 2 files" in n.lua("return require('editserver').statusline()")
    hint = n.lua(
        "local ns = vim.api.nvim_get_namespaces()['editserver.next_edit.more'];"
        " local m = vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, {details = true});"
        " return {m[1][2], m[1][4].virt_lines[1][1][1]}"
    )
    assert hint[0] == 9 and "3 more in 2 files" in hint[1]  # under the last in-file edit
    n.api.command("Editserver next_edits")
    qf = n.lua(
        "return vim.tbl_map(function(i) return {vim.api.nvim_buf_get_name(i.bufnr), i.lnum, i.text} end, vim.fn.getqflist())"
    )
    assert [(name.rsplit("/ws/", 1)[1], lnum) for name, lnum, _ in qf] == [
        (PRICING, 10),
        ("app/orders.py", 1),
        ("app/orders.py", 5),
        ("app/cart.py", 9),
    ]
    assert qf[1][2] == "from shop.pricing import compute_total"
    assert qf[3][2] == "return pricing.compute_total(self.items, pricing.RATE)"
    n.api.command("cclose")
    n.input("<Esc>")  # dismiss: the other files' edits go too
    n.wait("return require('editserver').next_edit.more() == nil", 5, "dismissed")


@pytest.mark.slow
def test_rename_then_tab_carries_it_into_the_importing_files(nvim_factory, shipped_server, tmp_path):
    n, tel = start(nvim_factory, shipped_server.url, tmp_path)
    root = open_workspace(n, tmp_path)
    n.api.current.window.cursor = (4, 4)
    n.input("ciwcompute_total<Esc>")
    n.wait("return require('editserver').next_edit.more()", 120, "edits proposed in other files")
    last = n.wait("return require('editserver').next_edit.last()", 120, "the final reply")
    more = n.lua("return require('editserver').next_edit.more()")  # the partials streamed first
    print("other files:", more, "reply edits:", last["count"])
    assert more["files"] == len(USES)
    n.api.command("Editserver next_edits")
    qf_files = set(
        n.lua(
            "return vim.tbl_map(function(i) return vim.api.nvim_buf_get_name(i.bufnr) end, vim.fn.getqflist())"
        )
    )
    assert {str((root / r).resolve()) for r in USES} <= qf_files
    n.api.command("cclose")
    n.api.command(f"buffer {root / PRICING}")
    for _ in range(30):  # Tab until nothing is proposed: in-file edits, then each file in turn
        if not n.lua("return require('editserver').next_edit.current()") and not n.lua(
            "return require('editserver').next_edit.more()"
        ):
            break
        before = snapshot(n)
        n.input("<Tab>")
        wait_until(lambda before=before: snapshot(n) != before, 15, "Tab to do something")
        n.wait("return not require('editserver.crossfile').busy()", 15, "the file's edits applied")
    n.api.command("silent! wall")
    for rel, count in USES.items():
        text = (root / rel).read_text()
        assert not re.search(r"\bcompute\b", text) and len(re.findall(r"\bcompute_total\b", text)) == count, (
            rel
        )
    for rel in NOT_USES:
        assert (root / rel).read_text() == FILES[rel]
    wait_until(lambda: [e for e in tel.events(last["id"]) if e[1] == "accept"], 10, "didAccept")
    # the reply's id is the telemetry row's: didShow, the in-file didAccepts and the server's own
    # accepts for the other files' edits all join the next_edit suggestion
    tel.assert_next_edits_joined({last["id"]})
