"""Files that never leave the editor, and telemetry that keeps only what it needs, over a real LSP.

A secret marker is written into excluded files; after typing and asking in every file, it must be in
no prompt, no telemetry row and no snippet, and no request must have reached the model server for the
excluded file. Telemetry's failures (a corrupt file, a full disk) must not stop suggestions.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import time

import httpx
from lsprotocol import types

from editserver.lsp.privacy import DEFAULT_EXCLUDES, effective, match
from editserver.lsp.telemetry import Telemetry, prune
from tests.lsp.conftest import lsp_session

SECRET = "SECRET_TOKEN_9f3a"
APP = "file:///work/app.py"
ENV = "file:///work/.env.local"
PEM = "file:///work/certs/server.pem"
SRC = "def add(a, b):\n    return a + b\n\n\ndef main():\n    total = add(1, 2)\n    print(total)\n"


def rows(path, sql):
    db = sqlite3.connect(path)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def fim_requests(url: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    return sum(
        float(v)
        for v in re.findall(
            r'^editserver_requests_total\{endpoint="/v1/[^"]+",status="\d+"\} ([0-9.]+)$', text, re.M
        )
    )


def test_patterns():
    assert effective([]) == DEFAULT_EXCLUDES
    assert effective(["*.tfvars", "!*.key"]) == tuple(p for p in DEFAULT_EXCLUDES if p != "*.key") + (
        "*.tfvars",
    )
    for path in (
        ".env",
        ".env.production",
        "a/b/.ENV",
        "id_rsa.pub",
        "x/server.pem",
        "secrets.yaml",
        ".netrc",
    ):
        assert match(path, DEFAULT_EXCLUDES), path
    for path in ("env.py", "app/settings.py", "keys.py", "my_secrets.py", "docs/credentials.md/x.py"):
        assert match(path, DEFAULT_EXCLUDES) is None, path
    assert match("config/prod/db.yaml", ("config/prod/*",)) == "config/prod/*"
    assert match("/home/u/repo/config/prod/db.yaml", ("config/prod/*",)) == "config/prod/*"
    assert match("C:\\repo\\.env", DEFAULT_EXCLUDES) == ".env*"


async def test_excluded_files_reach_no_prompt_no_request_no_row(tiny_server, base_options, telemetry_path):
    options = {
        **base_options,
        "languages": ["*"],
        "telemetry": {**base_options["telemetry"], "keepPrompts": True},
    }
    async with lsp_session(tiny_server, options) as s:
        s.open(ENV, f"API_KEY={SECRET}\n", "dotenv")
        s.open(PEM, f"-----BEGIN KEY-----\n{SECRET}\n", "plaintext")
        s.open(APP, SRC, "python")
        s.replace(ENV, (0, 0), (0, 0), f"OTHER={SECRET}\n")  # an edit in the excluded file
        before = fim_requests(tiny_server)
        res = await s.inline(ENV, 1, 0)
        assert res is not None and not res.items
        nxt = await s.request(
            "editserver/nextEdit", {"textDocument": {"uri": ENV}, "position": {"line": 0, "character": 3}}
        )
        assert nxt["edits"] == [] and "excludeFiles" in nxt["skipped"] and ".env*" in nxt["skipped"]
        assert fim_requests(tiny_server) == before  # nothing was sent for the excluded file
        # the excluded files are in sync (the editor's buffer is the truth) but in nothing else
        assert (await s.state(ENV))["text"] == f"OTHER={SECRET}\nAPI_KEY={SECRET}\n"
        s.replace(APP, (6, 0), (6, 0), "    x = 1\n")
        res = await s.inline(APP, 6, 4)
        assert res is not None and len(res.items) == 1
        await s.request(
            "editserver/nextEdit", {"textDocument": {"uri": APP}, "position": {"line": 5, "character": 4}}
        )
        state = await s.state(APP)
        assert SECRET not in json.dumps(state) and state["recentlyViewed"] == []
        info = await s.request("editserver/info", {})
        assert {(e["path"], e["pattern"]) for e in info["excluded"]} == {
            (".env.local", ".env*"),
            ("certs/server.pem", "*.pem"),
        }
        assert any(st.get("excluded") for st in s.statuses)  # the clients are told, to say why
        assert rows(telemetry_path, "SELECT count(*) FROM suggestions WHERE uri LIKE '%app.py'")[0][0] >= 1
        dump = "\n".join(
            str(r) for t in ("suggestions", "events") for r in rows(telemetry_path, f"SELECT * FROM {t}")
        )
        assert SECRET not in dump and ".env" not in dump and ".pem" not in dump
        # a pattern added later takes an open file out at once; removing a default lets one back in
        s.client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(
                settings={"editserver": {"excludeFiles": ["app.py", "!*.pem"]}}
            )
        )
        info = await s.request("editserver/info", {})
        assert {e["path"] for e in info["excluded"]} == {".env.local", "app.py"}
        assert not (await s.inline(APP, 6, 4)).items


async def test_telemetry_keeps_no_code_by_default(tiny_server, base_options, telemetry_path):
    async with lsp_session(tiny_server, base_options) as s:
        s.open(APP, SRC, "python")
        res = await s.inline(APP, 6, 4)
        (item,) = res.items
        sid = item.command.arguments[0]["id"]
        s.client.protocol.notify("editserver/didAccept", {"id": sid, "acceptedText": "print"})
        await s.state(APP)
    ((prompt, suggestion, score),) = rows(telemetry_path, "SELECT prompt, suggestion, score FROM suggestions")
    p = json.loads(prompt)
    assert p["omitted"] is True and p["prefix"]["chars"] > 20 and len(p["prefix"]["sha256"]) == 16
    assert "def add" not in prompt and item.insert_text not in suggestion
    assert json.loads(suggestion)["chars"] == len(item.insert_text)
    assert rows(telemetry_path, "SELECT event, accepted_text FROM events") == [("accept", None)]


def test_retention_and_size_cap_redact_oldest_text(tmp_path):
    path = tmp_path / "t.sqlite3"
    t = Telemetry(str(path), warn=lambda m: None)
    t.configure(str(path), True, keep_prompts=True, retention_days=30, max_bytes=10_000)
    for i in range(5):
        t.suggestion(
            f"s{i}", "fim", "file:///a.py", "python", {"prefix": "x" * 3000, "suffix": ""}, "y", None
        )
    t.event("s0", "accept", accepted_text="y")
    with sqlite3.connect(path) as db:
        db.execute("UPDATE suggestions SET created = created - 40 * 86400 WHERE id = 's0'")
        db.execute("UPDATE events SET created = created - 40 * 86400")
    t.close()
    with sqlite3.connect(path) as db:
        assert prune(db, 30, 10_000) == 2  # s0 by age, then s1: the other three fit
        kept = dict(db.execute("SELECT id, prompt LIKE '{\"omitted\": true%' FROM suggestions"))
        assert kept == {"s0": 1, "s1": 1, "s2": 0, "s3": 0, "s4": 0}
        assert db.execute("SELECT accepted_text FROM events").fetchall() == [(None,)]


async def test_corrupt_telemetry_is_moved_aside_and_suggestions_go_on(
    tiny_server, base_options, telemetry_path
):
    telemetry_path.write_bytes(b"this is not a database, it was cut short by a crash\x00" * 100)
    async with lsp_session(tiny_server, base_options) as s:
        s.open(APP, SRC, "python")
        got = len((await s.inline(APP, 6, 4)).items)
        s.replace(APP, (6, 4), (6, 4), "x")
        got += len((await s.inline(APP, 6, 5)).items)
        await s.state(APP)
        warned = [m.message for m in s.messages if "telemetry" in m.message]
    assert len(warned) == 1 and "corrupt" in warned[0], warned
    aside = list(telemetry_path.parent.glob("telemetry.sqlite3.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes().startswith(b"this is not a database")
    assert got >= 1 and rows(telemetry_path, "SELECT count(*) FROM suggestions")[0][0] == got


async def test_full_disk_drops_telemetry_not_suggestions(tiny_server, base_options, telemetry_path):
    """The LSP runs with a file-size limit (``ulimit -f``): once the telemetry file reaches it, every
    write fails as on a full disk; suggestions still come, and one warning says so."""
    launcher = ["bash", "-c", 'ulimit -f 64; exec "$@"', "lsp"]  # 64 blocks of 512 bytes
    options = {**base_options, "telemetry": {**base_options["telemetry"], "keepPrompts": True}}
    big = SRC + "".join(f"# {'padding ' * 12}{i}\n" for i in range(400))
    async with lsp_session(tiny_server, options, launcher=launcher) as s:
        s.open(APP, big, "python")
        got = 0
        t0 = time.monotonic()
        for i in range(12):
            s.replace(APP, (6, 4), (6, 4), "x")  # a new prefix each time: no cache hit
            res = await s.inline(APP, 6, 5 + i)
            got += len(res.items)
        assert time.monotonic() - t0 < 120
        await s.state(APP)
        warned = [m.message for m in s.messages if "telemetry" in m.message]
    assert got >= 10  # the tiny model may leave a line blank; telemetry never costs one
    assert len(warned) == 1 and "not recorded" in warned[0], warned
    stored = rows(telemetry_path, "SELECT count(*) FROM suggestions")[0][0]
    assert 0 < stored < 12


def purge_cli(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "editserver.cli", "telemetry", "purge", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_telemetry_purge(tmp_path):
    path = tmp_path / "t.sqlite3"
    t = Telemetry(str(path), keep_prompts=True)
    for i in range(3):
        t.suggestion(f"s{i}", "fim", "file:///a.py", "python", {"prefix": SECRET, "suffix": ""}, "y", 0.5)
        t.event(f"s{i}", "accept", accepted_text=SECRET)
    # the language server still has the file open while the user purges
    r = purge_cli("--path", str(path), "--prompts-only")
    assert r.returncode == 0 and "redacted the text of 3 suggestions and 3 events" in r.stdout, r.stderr
    assert SECRET.encode() not in path.read_bytes()
    assert rows(path, "SELECT count(*), sum(score) FROM suggestions") == [(3, 1.5)]  # figures stay
    r = purge_cli("--path", str(path))
    assert r.returncode == 0 and "deleted 3 suggestions and 3 events" in r.stdout
    t.event("s9", "show")  # the open writer goes on, into the same file
    t.close()
    assert rows(path, "SELECT count(*) FROM events") == [(1,)]
    r = purge_cli("--path", str(tmp_path / "none.sqlite3"))
    assert r.returncode == 0 and "nothing to purge" in r.stdout
    (tmp_path / "x.sqlite3").write_text("not a database")
    r = purge_cli("--path", str(tmp_path / "x.sqlite3"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "not an editserver telemetry file" in r.stderr
    r = purge_cli("--path", str(path), "--older-than", "-1")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
