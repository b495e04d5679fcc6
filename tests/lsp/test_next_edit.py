"""Next edit: minimal edits, ranking, and the multi-location plumbing over stdio (tiny model).

The rename scenario's *quality* (does the model rewrite the call sites?) needs the shipped checkpoint
and lives in test_rename_slow.py; here we check deterministically that after a rename at the
definition the server asks the model about the call sites, and that replies come back in the
contract's shapes.
"""

from __future__ import annotations

from editserver.lsp.documents import Document
from editserver.lsp.nextedit.ask import RegionResult
from editserver.lsp.nextedit.plan import Ask
from editserver.lsp.nextedit.vet import rank
from editserver.lsp.rewrite import minimal_edits
from editserver.lsp.treesitter import Region
from tests.lsp.conftest import lsp_session

FILLER = "".join(
    f"\n\ndef helper_{i}(values):\n    out = []\n    for v in values:\n        if v > {i}:\n            out.append(v * {i})\n    return out\n"
    for i in range(4)
)
SRC = (
    "def compute(items, tax):\n"
    "    total = sum(items)\n"
    "    return total * (1 + tax)\n" + FILLER + "\n\ndef report(items):\n"
    "    value = compute(items, 0.2)\n"
    "    print(value)\n"
    "\n"
    "\n"
    "class Cart:\n"
    "    def __init__(self):\n"
    "        self.items = []\n"
    "\n"
    "    def total(self):\n"
    "        return compute(self.items, 0.1)\n"
)
CALL_SITES = [i for i, line in enumerate(SRC.splitlines()) if "compute(" in line and "def " not in line]
URI = "file:///work/shop.py"


def apply(text: str, edits) -> str:
    for e in sorted(edits, key=lambda e: -e.start):
        text = text[: e.start] + e.new_text + text[e.end :]
    return text


def test_minimal_edits_touch_only_what_changed():
    old = "a = compute(x)\nb = 2\nc = compute(y)\n"
    new = "a = compute_total(x)\nb = 2\nc = compute_total(y)\n"
    edits = minimal_edits(old, new, base=100)
    # whole tokens: the renamed identifier is replaced, never a few letters inside it
    assert [(e.start, e.end, e.new_text) for e in edits] == [
        (104, 111, "compute_total"),
        (125, 132, "compute_total"),
    ]
    assert apply("x" * 100 + old, edits) == "x" * 100 + new
    assert minimal_edits(old, old) == []
    # inserted and deleted lines
    for a, b in [("x\ny\n", "x\nnew\ny\n"), ("x\ny\nz\n", "x\nz\n"), ("", "hello\n"), ("a\n", "")]:
        assert apply(a, minimal_edits(a, b)) == b


def test_rank_keeps_confident_changes_best_first():
    def rr(score, above, changed=True):
        edits = minimal_edits("a\n", "b\n") if changed else []
        doc = Document("file:///x.py", "a\n", 1, "python")
        return RegionResult(
            Ask(doc, None, "x.py", Region(0, 0), 0, 10), "p", "a\n", "b\n", score, above, edits
        )

    results = [rr(0.5, True), rr(0.9, False), rr(0.7, True), rr(0.99, True, changed=False)]
    kept = rank(results)
    assert [r.score for r in kept] == [0.7, 0.5]


def test_document_offsets_round_trip_for_edit_ranges():
    doc = Document("file:///x.py", "a😀b\nc\n", 1, "python")
    assert doc.lsp_range(2, 3) == {"start": {"line": 0, "character": 3}, "end": {"line": 0, "character": 4}}


async def test_rename_at_definition_asks_about_call_sites(tiny_server, base_options):
    async with lsp_session(tiny_server, base_options) as s:
        s.open(URI, SRC, "python")
        # rename at the definition, typed one character at a time
        for i, ch in enumerate("_total"):
            s.replace(URI, (0, 11 + i), (0, 11 + i), ch)
        res = await s.request(
            "editserver/nextEdit", {"textDocument": {"uri": URI}, "position": {"line": 0, "character": 17}}
        )
        assert isinstance(res["id"], str) and res["id"]
        assert isinstance(res["edits"], list) and isinstance(res["score"], (int, float))
        regions = res["regions"]
        # a rename asks about the old name's uses only, each a few lines, not the cursor's region
        assert regions and all(r["reason"] == "occurrence" for r in regions)
        assert all(r["range"]["end"]["line"] - r["range"]["start"]["line"] <= 3 for r in regions)
        covered = {
            ln for r in regions for ln in range(r["range"]["start"]["line"], r["range"]["end"]["line"])
        }
        assert set(CALL_SITES) <= covered  # both call sites of the old name were asked about
        for e in res["edits"]:
            assert e["textDocument"] == {"uri": URI, "version": s.versions[URI]}
            assert set(e) == {"textDocument", "range", "newText"}
        # Copilot's NES shape answers from the same machinery
        cop = await s.request(
            "textDocument/copilotInlineEdit",
            {
                "textDocument": {"uri": URI, "version": s.versions[URI]},
                "position": {"line": 0, "character": 17},
            },
        )
        assert set(cop) == {"edits"}
        for e in cop["edits"]:
            assert {"text", "range", "textDocument", "command"} <= set(e)


async def test_a_file_that_spells_the_cursor_tag_gets_next_edits(tiny_server, base_options):
    """A call site whose line spells ``<|cursor|>`` is asked like any other over the real LSP and HTTP
    server: the request names which tag is the cursor, so the server does not refuse it as two
    cursors, and the file's own spelling is never edited away."""
    spelled = SRC.replace("value = compute(items, 0.2)", "value = compute(items, 0.2)  # '<|cursor|>'")
    line = spelled.splitlines().index("    value = compute(items, 0.2)  # '<|cursor|>'")
    async with lsp_session(tiny_server, base_options) as s:
        s.open(URI, spelled, "python")
        for i, ch in enumerate("_total"):
            s.replace(URI, (0, 11 + i), (0, 11 + i), ch)
        res = await s.request(
            "editserver/nextEdit", {"textDocument": {"uri": URI}, "position": {"line": 0, "character": 17}}
        )
        covered = {
            ln for r in res["regions"] for ln in range(r["range"]["start"]["line"], r["range"]["end"]["line"])
        }
        assert line in covered  # answered, not refused
        text = spelled.replace("def compute(", "def compute_total(", 1)
        edits = [e for e in res["edits"] if e["range"]["start"]["line"] == line]
        for e in edits:  # whatever the tiny model rewrites, the comment's spelling is not removed by us
            assert "<|cursor|>" in e["newText"] or "<|cursor|>" not in _span(text, e["range"])


def _span(text: str, rng: dict) -> str:
    lines = text.splitlines(keepends=True)
    start = sum(map(len, lines[: rng["start"]["line"]])) + rng["start"]["character"]
    end = sum(map(len, lines[: rng["end"]["line"]])) + rng["end"]["character"]
    return text[start:end]


async def test_next_edit_errors_and_disabled(tiny_server, base_options):
    async with lsp_session(tiny_server, {**base_options, "enableNextEdit": False}) as s:
        s.open(URI, SRC, "python")
        res = await s.request(
            "editserver/nextEdit", {"textDocument": {"uri": URI}, "position": {"line": 0, "character": 0}}
        )
        assert res["edits"] == [] and res["regions"] == []
        for bad, needle in [
            (
                {"textDocument": {"uri": "file:///nope.py"}, "position": {"line": 0, "character": 0}},
                "not open",
            ),
            ({"textDocument": {"uri": URI}, "position": {"line": -1, "character": 0}}, "position"),
            ({"position": {"line": 0, "character": 0}}, "textDocument"),
        ]:
            try:
                await s.request("editserver/nextEdit", bad)
            except Exception as e:  # pygls raises JsonRpcInvalidParams on the client side
                assert needle in str(e), e
            else:
                raise AssertionError(f"no error for {bad}")


def test_region_prompt_round_trips_through_the_model_parser():
    from editserver.lsp.rewrite import build_region_prompt
    from editserver.protocol.prompt import Snippet, parse_prompt

    doc = Document(URI, SRC, 3, "python")
    cursor = SRC.index("compute(items, 0.2)")
    line = SRC.count("\n", 0, cursor)
    region = Region(line - 1, line + 1)
    prompt, start, text = build_region_prompt(
        doc,
        "shop.py",
        region,
        cursor,
        [Snippet("lib.py", "def f():\n    pass\n")],
        "--- shop.py\n+++ shop.py\n",
        5,
    )
    p = parse_prompt(prompt)
    assert p.file_path == "shop.py" and p.region == text and text.startswith("def report(items):\n")
    assert p.region[p.cursor :].startswith("compute(items, 0.2)")
    assert p.snippets[0].path == "lib.py" and p.history.startswith("--- shop.py")
    assert len(p.above.splitlines()) == 5 and len(p.below.splitlines()) == 5


async def test_newer_next_edit_request_supersedes_older(tiny_server, base_options):
    import asyncio

    async with lsp_session(tiny_server, base_options) as s:
        s.open(URI, SRC, "python")
        params = {"textDocument": {"uri": URI}, "position": {"line": 0, "character": 4}}
        first = asyncio.ensure_future(s.request("editserver/nextEdit", params))
        await asyncio.sleep(0.01)
        second = await s.request("editserver/nextEdit", params)
        old = await first
        assert old["regions"] == [] and old["edits"] == []  # superseded before its answers came back
        assert second["regions"] and second["regions"][0]["reason"] == "cursor"


def test_vet_rejects_wiping_and_syntax_breaking_rewrites():
    from editserver.lsp.nextedit.vet import vet
    from editserver.lsp.treesitter import ParsedDocument

    doc = Document(URI, SRC, 1, "python")
    parsed = ParsedDocument("python", SRC)
    line = CALL_SITES[0]
    start = sum(len(ln) + 1 for ln in SRC.split("\n")[:line])
    original = SRC.split("\n")[line] + "\n"

    def result(rewritten):
        a = Ask(doc, parsed, "shop.py", Region(line, line), start, 10)
        return RegionResult(a, "p", original, rewritten, 0.9, True, minimal_edits(original, rewritten, start))

    good = result(original.replace("compute(", "compute_total("))
    assert vet(good) is None
    assert vet(result("\n")) == "deletes the whole region"
    assert vet(result("    value = compute(items, 0.2\n")) == "introduces a syntax error"
    broken = result("________________________________\n")  # the body dedented away: an empty block
    broken.rejected = vet(broken)
    assert broken.rejected == "empties a block" and rank([broken, good]) == [good]


async def test_auto_requests_follow_only_edits_that_can_propagate(tiny_server, base_options):
    """trigger "auto": typing new code or leaving insert mode with nothing renamed asks no model;
    a rename, a changed literal or an edited signature does, once per fresh edit."""
    async with lsp_session(tiny_server, base_options) as s:
        s.open(URI, SRC, "python")
        auto = {"textDocument": {"uri": URI}, "position": {"line": 2, "character": 4}, "trigger": "auto"}
        first = await s.request("editserver/nextEdit", auto)  # nothing edited yet
        assert first["skipped"] and first["regions"] == [] and first["edits"] == []
        s.replace(URI, (3, 0), (3, 0), "x = 1\n")  # new code: nothing elsewhere depends on it
        assert (await s.request("editserver/nextEdit", auto))["skipped"]
        s.replace(URI, (3, 4), (3, 5), "2")  # a literal changed
        lit = await s.request("editserver/nextEdit", auto)
        assert "skipped" not in lit and lit["regions"]
        assert (await s.request("editserver/nextEdit", auto))["skipped"]  # nothing new since
        for i, ch in enumerate("_total"):  # a rename at the definition
            s.replace(URI, (0, 11 + i), (0, 11 + i), ch)
        ren = await s.request("editserver/nextEdit", {**auto, "position": {"line": 0, "character": 17}})
        assert "skipped" not in ren and {r["reason"] for r in ren["regions"]} == {"occurrence"}
        # partials (if any region was kept) carry the final reply's id and a subset of its edits
        with_partials = await s.request(
            "editserver/nextEdit", {**auto, "trigger": "manual", "partialResults": True}
        )
        for p in s.partials:
            assert p["id"] == with_partials["id"] and all(e in with_partials["edits"] for e in p["edits"])
        bad = {**auto, "trigger": "sometimes"}
        try:
            await s.request("editserver/nextEdit", bad)
        except Exception as e:
            assert "trigger" in str(e)
        else:
            raise AssertionError("no error for a bad trigger")


async def test_a_new_edit_cancels_the_inflight_next_edit(tiny_server, base_options):
    import asyncio

    async with lsp_session(tiny_server, base_options) as s:
        s.open(URI, SRC, "python")
        params = {"textDocument": {"uri": URI}, "position": {"line": 0, "character": 4}}
        pending = asyncio.ensure_future(s.request("editserver/nextEdit", params))
        await asyncio.sleep(0.05)
        s.replace(URI, (1, 0), (1, 0), "#")
        res = await pending
        assert res["edits"] == [] and res["skipped"] == "superseded by a newer edit"


def test_prompts_stay_bounded_on_very_long_lines():
    """A file of 20,000-character lines: the context is cut to CONTEXT_CHARS each side (whole lines
    where they fit), and a region too long for any answer is not asked about."""
    from editserver.lsp.rewrite import CONTEXT_CHARS, build_region_prompt, region_too_long

    long = "x = '" + "a" * 20_000 + "'\n"
    text = long * 6 + "def f():\n    return 1\n" + long * 6
    doc = Document("file:///long.py", text, 1, "python")
    region = Region(6, 7)
    prompt, start, original = build_region_prompt(doc, "long.py", region, text.index("return"), [], "", 8)
    assert original == "def f():\n    return 1\n"
    assert len(prompt) < 2 * CONTEXT_CHARS + 1000, len(prompt)
    assert not region_too_long(doc, region) and region_too_long(doc, Region(0, 2))
    short = "a = 1\n" * 40 + "def f():\n    return 1\n" + "b = 2\n" * 40
    doc2 = Document("file:///short.py", short, 1, "python")
    full, _, _ = build_region_prompt(doc2, "short.py", Region(40, 41), short.index("return"), [], "", 8)
    assert "a = 1\n" * 8 in full and "b = 2\n" * 8 in full  # short lines: the context lines, uncut
