"""What a Neovim user sees, in real headless Neovim 0.12 with the real ``editserver lsp`` and a real
``editserver serve`` (tiny model): readable next edits (inline tokens for a one-line change, a
preview of virtual lines for a multi-line one, no sign column, accept by token span), when next
edits are asked for, ghost text colours and stale ghosts, failures without "Press ENTER" prompts,
the language server's own server restarted after every crash, and the withheld count in
:checkhealth.
"""

from __future__ import annotations

import os
import re
import signal

from editserver.bench.load import LocalServer
from tests.extensions.test_nvim import checkhealth, inject_result, open_file, start, wait_until

SRC = """import os


def expand(args):
    out = []
    for arg in args:
        arg = os.path.expanduser(arg)
        out.append(arg)
    return out
"""

MARKS = (
    "local ns = vim.api.nvim_get_namespaces()['editserver.next_edit']"
    " return vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, {details = true})"
)


def textoff(n) -> int:
    """Columns before the text (number and sign columns): must not change when edits are shown."""
    return n.lua("return vim.fn.getwininfo(vim.api.nvim_get_current_win())[1].textoff")


def test_one_line_edit_inline_tokens_and_multi_line_preview(nvim_factory, tiny_server, tmp_path):
    n, tel = start(nvim_factory, tiny_server.url, tmp_path, next_edit={"auto": False})
    open_file(n, tmp_path, SRC, name="paths.py")
    before = textoff(n)
    edits = [
        {  # one line, two uses renamed: inline, only the changed tokens
            "range": {"start": {"line": 6, "character": 8}, "end": {"line": 6, "character": 36}},
            "newText": "item = os.path.expanduser(item",
        },
        {  # a whole-line rewrite over two lines: previewed below, never garbled inline
            "range": {"start": {"line": 7, "character": 0}, "end": {"line": 8, "character": 14}},
            "newText": "        out.append(item)\n        out.sort()\n    return out",
        },
    ]
    inject_result(n, edits)
    marks = n.lua(MARKS)
    inline = [(m[1], m[2], m[3]["virt_text"][0][0]) for m in marks if m[3].get("virt_text")]
    assert sorted(inline) == [(6, 11, "item"), (6, 36, "item")]
    struck = sorted(
        (m[1], m[2], m[3]["end_col"]) for m in marks if m[3].get("hl_group") == "EditserverNextEditDelete"
    )
    assert (6, 8, 11) in struck and (6, 33, 36) in struck
    virt_lines = [m[3]["virt_lines"] for m in marks if m[3].get("virt_lines")]
    assert len(virt_lines) == 1
    preview = ["".join(chunk[0] for chunk in line) for line in virt_lines[0]]
    assert preview == ["        out.append(item)", "        out.sort()", "    return out"]
    changed = {chunk[0] for line in virt_lines[0] for chunk in line if chunk[1] == "EditserverNextEditInsert"}
    assert "item" in changed and "out" not in changed  # the diff is highlighted, the rest is plain
    assert not [m for m in marks if m[3].get("sign_text")] and textoff(n) == before
    assert n.lines() == SRC.rstrip("\n").split("\n")  # nothing applied yet

    # Word by word: each step replaces a whole token span, so the line is always old or new tokens.
    n.api.current.window.cursor = (7, 0)
    n.input("<C-Right>")
    n.wait(
        "return vim.api.nvim_buf_get_lines(0, 6, 7, true)[1] == ...",
        5,
        "hunk 1",
        "        item = os.path.expanduser(arg)",
    )
    n.input("<C-Right>")
    n.wait(
        "return vim.api.nvim_buf_get_lines(0, 6, 7, true)[1] == ...",
        5,
        "hunk 2",
        "        item = os.path.expanduser(item)",
    )
    # <Tab> on the previewed edit applies it whole
    n.api.current.window.cursor = (8, 0)
    n.input("<Tab>")
    n.wait("return vim.api.nvim_buf_line_count(0) == 10", 5, "the multi-line apply")
    assert n.lines()[7:] == ["        out.append(item)", "        out.sort()", "    return out"]
    assert n.lua("return require('editserver').next_edit.current() == nil")
    wait_until(
        lambda: [e for e in tel.events() if e[1] == "accept" and e[2] == 1], 10, "didAccept of the preview"
    )


def test_next_edits_follow_edits_not_bare_insert_leave(nvim_factory, tiny_server, tmp_path):
    n, _ = start(nvim_factory, tiny_server.url, tmp_path, next_edit={"debounce_ms": 50})
    open_file(n, tmp_path, SRC, name="paths.py")
    n.api.current.window.cursor = (7, 8)
    n.input("i<Esc>")  # insert mode entered and left, nothing typed: no request
    n.lua("vim.wait(400)")
    assert n.lua("return require('editserver').next_edit.last()") is None
    n.input("ciwitem<Esc>")  # a rename: the idle request goes out (trigger auto), streamed
    last = n.wait("return require('editserver').next_edit.last()", 60, "the nextEdit answer")
    assert isinstance(last["id"], str) and not last.get("skipped")
    # typing a new line of code is not a rename: the server answers without asking the model
    n.input("Go# a comment<Esc>")
    n.wait(
        "local l = require('editserver').next_edit.last() return l and l.skipped ~= nil and l.skipped ~= vim.NIL",
        30,
        "a skipped request",
    )


def test_ghost_highlight_reads_without_gui_colours(nvim_factory, tiny_server, tmp_path):
    n, _ = start(nvim_factory, tiny_server.url, tmp_path)
    hl = "return vim.api.nvim_get_hl(0, {name = ..., link = false})"
    ghost, comment = n.lua(hl, "EditserverGhost"), n.lua(hl, "Comment")
    assert ghost.get("fg") == comment.get("fg")  # Comment's colour in the GUI
    assert ghost.get("ctermfg") is not None  # and a colour in a 16/256-colour terminal too
    assert n.lua("return vim.api.nvim_get_hl(0, {name = 'ComplHint'}).link") == "EditserverGhost"
    n2, _ = start(nvim_factory, tiny_server.url, tmp_path, highlights={"ghost": "Special"})
    assert n2.lua(hl, "EditserverGhost").get("fg") == n2.lua(hl, "Special").get("fg")


def test_stale_ghost_cleared_on_the_first_contradicting_key(nvim_factory, tiny_server, tmp_path):
    # a long debounce: the next answer cannot be what clears the ghost
    n, tel = start(nvim_factory, tiny_server.url, tmp_path, fim={"native": False})
    open_file(n, tmp_path, SRC, name="paths.py")
    n.input("Goresult = expand(")
    item = n.wait(
        "local g = require('editserver').ghost.current(); return g and g.id and g.text ~= '' and g or nil",
        60,
        "ghost text",
    )
    n.lua("require('editserver').options().debounce_ms = 5000")
    key = "Z" if not item["text"].startswith("Z") else "Q"  # contradicts the ghost's next character
    n.input(key)
    n.wait("return require('editserver').ghost.current() == nil", 2, "the stale ghost to be cleared")
    ns_marks = n.lua(
        "local ns = vim.api.nvim_get_namespaces()['editserver.ghost']"
        " return #vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, {})"
    )
    assert ns_marks == 0
    wait_until(lambda: "reject" in [e[1] for e in tel.events(item["id"])], 10, "didReject")


def test_failures_never_prompt(nvim_factory, tmp_path):
    """A UI 80 columns wide: the outage message fits one line, no hit-enter prompt blocks typing."""
    n, _ = start(nvim_factory, "http://127.0.0.1:9", tmp_path)
    n.api.ui_attach(80, 24, rgb=False)
    open_file(n, tmp_path, SRC, name="paths.py", ready=False)
    n.wait("return require('editserver').status().state == 'unreachable'", 30, "state 'unreachable'")
    msgs = n.wait(
        "local m = vim.api.nvim_exec2('messages', {output = true}).output return m ~= '' and m",
        30,
        "a message",
    )
    assert all(len(line) <= 80 for line in msgs.splitlines())
    mode = n.lua("return vim.api.nvim_get_mode()")
    assert mode["mode"] not in ("r", "rm") and not mode["blocking"]
    n.input("Gox = 1<Esc>")
    n.wait("return vim.api.nvim_buf_get_lines(0, -2, -1, true)[1] == 'x = 1'", 5, "typing goes on")
    report = checkhealth(n)
    assert "server state: unreachable" in report and ":Editserver restart" in report


def test_own_server_restarted_after_three_kills(nvim_factory, tiny_checkpoint, tmp_path):
    n, _ = start(nvim_factory, None, tmp_path, autostart=True, model=str(tiny_checkpoint))
    open_file(n, tmp_path, SRC, name="paths.py", ready=False)
    n.wait("return require('editserver').status().state == 'ready'", 240, "its own server")
    for crash in range(1, 4):
        pid = n.lua("return require('editserver').info().serverPid")
        os.kill(pid, signal.SIGKILL)  # the model server the language server started
        n.wait("return require('editserver').status().state ~= 'ready'", 30, "the crash noticed")
        n.wait("return require('editserver').status().state == 'ready'", 240, f"restart {crash}")
        assert n.lua("return require('editserver').info().restarts") == crash
    msgs = n.messages()
    assert "restarting in" in msgs and all(len(line) <= 80 for line in msgs.splitlines())
    report = checkhealth(n)
    assert "OK server state: ready" in report and "its own, on a free port" in report
    assert "restarts so far: 3" in report
    log = tmp_path / "nvim0" / "state" / "editserver" / "serve.log"
    assert log.is_file() and str(log) in report
    n.api.command("Editserver log")
    assert n.lua("return vim.api.nvim_buf_get_name(0)") == str(log)


def test_withheld_completions_in_statusline_and_checkhealth(nvim_factory, tiny_checkpoint, tmp_path):
    with LocalServer(["--model", str(tiny_checkpoint), "--fim-threshold", "1"]) as server:
        n, _ = start(nvim_factory, server.url, tmp_path)
        open_file(n, tmp_path, SRC, name="paths.py")
        n.input("Goresult = expand(")
        line = n.wait(
            "local s = require('editserver').statusline() return s:find('withheld') and s",
            60,
            "withheld in the statusline",
        )
        assert "<1" in line
        report = checkhealth(n)
        assert re.search(r"withheld below the threshold \(1(\.0)?\) in the last minute: [1-9]", report), (
            report
        )
        assert "--fim-threshold" in report


def test_no_ghost_after_an_accept_that_completes_the_line(nvim_factory, tiny_server, tmp_path):
    n, tel = start(nvim_factory, tiny_server.url, tmp_path, fim={"native": False})
    open_file(n, tmp_path, SRC, name="paths.py")
    n.input("Goresult = expand(")
    item = n.wait(
        "local g = require('editserver').ghost.current(); return g and g.id and g.text ~= '' and g or nil",
        60,
        "ghost text",
    )
    n.input("<Tab>")
    wait_until(lambda: "accept" in [e[1] for e in tel.events(item["id"])], 10, "the accept")
    # the editor asks again after the accept (the cursor moved), but nothing is shown for it
    n.lua("vim.wait(1500)")
    marks = n.lua(
        "local ns = vim.api.nvim_get_namespaces()['editserver.ghost']"
        " return #vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, {})"
    )
    assert marks == 0
    cur = n.lua("local g = require('editserver').ghost.current() return g and g.id or vim.NIL")
    assert cur in (None, item["id"])
    # typing again is a fresh request: suggestions come back
    n.input("<CR>x = expand(")
    n.wait(
        "local g = require('editserver').ghost.current(); return g and g.id ~= ... and g.text ~= '' and g or nil",
        60,
        "a new ghost after typing",
        item["id"],
    )
