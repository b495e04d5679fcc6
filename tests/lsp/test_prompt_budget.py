"""Prompts within the model's tokens (lsp/budget.py).

Text that tokenizes badly (CJK, emoji, mixed scripts, random code points: up to a token a byte) in
the file, the edit history and the snippets must never take a next-edit or FIM prompt past the
model's context, counted with the real shipped tokenizer as the server counts; the farthest parts
go first; and over the real LSP and model server such a file gets its answers, not a 400
``context_length_exceeded`` (which the slow sync fuzz hit 25 times before budgets were in tokens).
"""

from __future__ import annotations

import asyncio
import functools
import random
import re
import time

import httpx
import pytest

from editserver.lsp.budget import CHUNK_CHARS, Limits, fit_edit_prompt, fit_fim
from editserver.lsp.documents import Document
from editserver.lsp.rewrite import build_region_prompt
from editserver.lsp.treesitter import Region
from editserver.model.infer.checkpoint import DEFAULT_CHECKPOINT
from editserver.model.infer.tokenizer import Tokenizer
from editserver.protocol.prompt import (
    EditPrompt,
    Snippet,
    cursor_index,
    fit_prompt,
    parse_prompt,
    split_history,
    unified_diff,
)
from tests.lsp.conftest import lsp_session, serving

SLACK = 32  # the shipped checkpoint's edit_slack_tokens: the server's canvas is the region's tokens plus this
REGION = "def total(items):\n    s = sum(items)\n    return s * 2\n"


@functools.cache
def shipped() -> Tokenizer:
    return Tokenizer.load(DEFAULT_CHECKPOINT / "tokenizer.json")


def bad(rnd: random.Random, n: int) -> str:
    """``n`` code points that cost 1-4 tokens each: CJK, emoji (ZWJ sequences too), Cyrillic,
    combining marks and random code points anywhere in Unicode (surrogates excepted)."""
    out = []
    while len(out) < n:
        k = rnd.randrange(6)
        if k == 0:
            out.append(chr(rnd.randint(0x4E00, 0x9FFF)))
        elif k == 1:
            out.append(chr(rnd.randint(0x1F300, 0x1FAFF)))
        elif k == 2:
            out.append("👩\u200d💻")
        elif k == 3:
            out.append(chr(rnd.randint(0x400, 0x4FF)) + "\u0301")
        else:
            c = rnd.randint(0x80, 0x10FFFF)
            out.append(chr(c) if not 0xD800 <= c < 0xE000 else "é")
    return "".join(out)[:n]


def bad_file(rnd: random.Random, lines: int = 40, width: int = 400) -> tuple[str, Region, int]:
    """A file of long badly tokenizing lines with a small code region in the middle; its cursor."""
    above = "".join(f"# {bad(rnd, width)}\n" for _ in range(lines))
    below = "".join(f"x_{i} = '{bad(rnd, width)}'\n" for i in range(lines))
    return above + REGION + below, Region(lines, lines + 2), len(above) + REGION.index("sum")


def bad_extras(rnd: random.Random) -> tuple[list[Snippet], str]:
    """Three snippets and six history diffs, all of bad text."""
    snippets = [Snippet(f"s{i}.py", f"v = '{bad(rnd, 3000)}'\n") for i in range(3)]
    history = "".join(unified_diff("a.py", f"x = {i}\n", f"x = '{bad(rnd, 2000)}'\n") for i in range(6))
    return snippets, history


def server_tokens(tok: Tokenizer, prompt: str, region: str, at: int, limits: Limits) -> int:
    """The tokens the server holds a next-edit request to (model/infer/engine.py): the prompt as
    its tokenizer encodes it, ``<|rewrite|>`` and the canvas (the region's tokens and the slack)."""
    parsed = parse_prompt(prompt, cursor_index(region, at))
    canvas = min(len(tok.encode(parsed.region)) + SLACK, limits.max_output)
    return len(tok.encode_prompt(parsed)) + 1 + canvas


LIMITS = [  # (context, window, counted with the served tokenizer)
    pytest.param(32_768, 32_768, True, id="32k-exact"),
    pytest.param(32_768, 32_768, False, id="32k-bytes"),
    pytest.param(4096, 4096, True, id="4k-exact"),
    pytest.param(2048, 2048, False, id="2k-bytes"),
    pytest.param(32_768, 256, True, id="32k-window-256"),
]


@pytest.mark.parametrize(("context", "window", "exact"), LIMITS)
def test_badly_tokenizing_prompts_fit_the_context(context, window, exact):
    tok, rnd = shipped(), random.Random(7)
    limits = Limits(context, window, 1024, tok if exact else None)
    text, region, at = bad_file(rnd)
    snippets, history = bad_extras(rnd)
    doc = Document("file:///w/bad.py", text, 1, "python")
    built = build_region_prompt(doc, "bad.py", region, at, snippets, history, 60, limits)
    assert built is not None
    prompt, start, original = built
    uncut = parse_prompt(prompt, cursor_index(original, at - start))
    assert uncut.region == original == REGION and uncut.region[uncut.cursor :].startswith("sum(items)")
    assert server_tokens(tok, prompt, original, at - start, limits) <= limits.context_length
    # without the budget the same prompt was far over: the characters bounded nothing
    whole = EditPrompt(
        "bad.py", text[:start], REGION, at - start, text[start + len(REGION) :], snippets, history
    )
    assert len(tok.encode_prompt(whole)) > 2 * limits.context_length


def _diffs(p: EditPrompt) -> list[str]:
    return split_history(p.history)


@pytest.mark.parametrize("exact", [True, False])
def test_the_farthest_parts_go_first(exact):
    """Snippets first (in prompt order), then old diffs (oldest first), then the file's context by
    distance from the region (either side, long lines in pieces), the newest diff last; at every
    budget the cut keeps what is nearest."""
    tok, rnd = shipped(), random.Random(11)
    text, region, at = bad_file(rnd, lines=12, width=150)
    snippets, history = bad_extras(rnd)
    above = text[: text.index(REGION)]
    below = text[text.index(REGION) + len(REGION) :] + bad(rnd, 3 * CHUNK_CHARS)  # a long last line
    p = EditPrompt("bad.py", above, REGION, at - len(above), below, snippets, history)
    seen = set()
    for context in (1500, 3000, 5000, 8000, 12_000, 16_000, 24_000, 32_000, 48_000, 80_000):
        limits = Limits(context, context, 1024, tok if exact else None)
        q = fit_edit_prompt(p, limits)
        assert q is not None and q.region == p.region and q.cursor == p.cursor and q.file_path == p.file_path
        canvas = min(len(tok.encode(REGION)) + SLACK, 1024)
        assert len(tok.encode_prompt(q)) + 1 + canvas <= context
        assert q.snippets == p.snippets[len(p.snippets) - len(q.snippets) :]  # the first ones went
        kept = _diffs(q)
        assert kept == _diffs(p)[len(_diffs(p)) - len(kept) :]  # the oldest went
        assert p.above.endswith(q.above) and p.below.startswith(q.below)
        if (q.above, q.below) != (p.above, p.below):
            assert q.snippets == [] and len(kept) <= 1  # context goes only after snippets and old diffs
        if q.above != p.above:
            assert len(q.above) <= len(q.below) + CHUNK_CHARS  # what went above was the farther
        if q.below != p.below:
            assert len(q.below) <= len(q.above) + CHUNK_CHARS
        if not kept:
            assert q.above == q.below == ""  # the newest diff goes last
        seen.add((len(q.snippets), len(kept), len(q.above) + len(q.below)))
    assert len(seen) >= 5  # the budgets above cut at many depths
    assert fit_edit_prompt(p, Limits(10**6, 10**6, 1024, tok if exact else None)) == p  # room: no cut


def test_a_region_over_the_context_alone_is_not_asked():
    rnd = random.Random(3)
    text, region, at = bad_file(rnd, lines=4, width=50)
    doc = Document("file:///w/bad.py", text, 1, "python")
    for tok in (shipped(), None):
        assert build_region_prompt(doc, "bad.py", region, at, [], "", 10, Limits(100, 100, 64, tok)) is None
        assert (
            build_region_prompt(doc, "bad.py", region, at, [], "", 10, Limits(800, 800, 64, tok)) is not None
        )


def test_the_window_cut_is_the_servers_own():
    """With the served tokenizer the prompt is cut to the window as the server cuts it: the server,
    cutting the LSP's prompt for its window, reads exactly what it would read of the whole one."""
    tok = shipped()
    code = (DEFAULT_CHECKPOINT.parents[2] / "lsp" / "treesitter.py").read_text()
    lines = code.splitlines(keepends=True)
    above, below = "".join(lines[:200]), "".join(lines[203:400])
    region = "".join(lines[200:203])
    history = "".join(unified_diff("n.py", f"a = {i}\n", f"b = {i}\n") for i in range(5))
    p = EditPrompt("n.py", above, region, 3, below, [Snippet("s.py", "def f():\n    pass\n")], history)
    q = fit_edit_prompt(p, Limits(32_768, 256, 1024, tok))
    assert q is not None and len(tok.encode_prompt(q)) <= 255 < len(tok.encode_prompt(p))
    server_budget = 256 - (len(tok.encode(region)) + SLACK) - 1
    assert fit_prompt(q, tok.encode_prompt, server_budget) == fit_prompt(p, tok.encode_prompt, server_budget)


@pytest.mark.parametrize("exact", [True, False])
def test_fim_prompts_fit_the_context(exact):
    tok, rnd = shipped(), random.Random(5)
    prefix = "".join(f"# {bad(rnd, 200)}\n" for _ in range(30)) + "def f():\n    return "
    suffix = "\n" + "".join(f"# {bad(rnd, 200)}\n" for _ in range(10))
    limits = Limits(4096, 4096, 1024, tok if exact else None)
    pre, suf = fit_fim(prefix, suffix, 64, limits)
    assert len(tok.encode(pre)) + len(tok.encode(suf)) + 3 + 64 <= 4096
    assert prefix.endswith(pre) and pre.endswith("def f():\n    return ") and suffix.startswith(suf)
    assert len(suf) > 0 and pre.startswith("#")  # both sides kept, the prefix from a line start
    assert fit_fim("a = 1\n", "b = 2\n", 64, limits) == ("a = 1\n", "b = 2\n")  # fits: unchanged


# ---- over the LSP --------------------------------------------------------------------------------
CONTEXT = 4096


@pytest.fixture(scope="module")
def small_context_server(tiny_checkpoint, tmp_path_factory):
    """A real ``editserver serve`` of the tiny checkpoint whose context is 4,096 tokens: the
    budget binds on a file of a few long lines, and the tiny model decodes such prompts at once."""
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with serving(tiny_checkpoint, log, "--max-context", str(CONTEXT)) as url:
        yield url


async def _exact_tokens(s, timeout: float = 60.0) -> dict:
    """``editserver/info`` once the LSP has the served tokenizer (it loads in the background)."""
    deadline = time.monotonic() + timeout
    while True:
        info = await s.request("editserver/info", {})
        if info["exactTokens"] or time.monotonic() > deadline:
            return info
        await asyncio.sleep(0.1)


async def test_a_file_of_long_badly_tokenizing_lines_gets_answers(small_context_server, base_options):
    """The cursor's region (10-25 lines) is plain code; above and below it, within the prompt's
    context lines, lines of bad text that cost far more than the context in the model's tokens."""
    rnd = random.Random(1)
    code = "".join(f"def f{i}(items):\n    s = sum(items)\n    return s * {i}\n\n" for i in range(10))
    top, _, _ = bad_file(rnd, lines=20, width=400)
    text = top + code + top
    uri = "file:///work/bad.py"
    line = top.count("\n") + 21  # in the middle of the code
    async with lsp_session(small_context_server, base_options) as s:
        info = await _exact_tokens(s)
        assert info["contextLength"] == CONTEXT and info["exactTokens"], info
        s.open(uri, text, "python")
        s.replace(uri, (2, 0), (2, 0), f"# {bad(rnd, 3000)}\n")  # a pasted long line: history
        line += 1
        res = await s.request(
            "editserver/nextEdit", {"textDocument": {"uri": uri}, "position": {"line": line, "character": 8}}
        )
        assert res["regions"], res  # the model answered: no context_length_exceeded
        assert any(r["reason"] == "cursor" for r in res["regions"])
        await s.inline(uri, line, 8)
        metrics = httpx.get(f"{small_context_server}/metrics", timeout=10).text
    for endpoint in ("/v1/edit/completions", "/v1/fim/completions"):
        assert not re.search(rf'endpoint="{endpoint}",status="400"\}} [1-9]', metrics), metrics
        assert re.search(rf'endpoint="{endpoint}",status="200"\}} [1-9]', metrics), metrics


def test_the_lsp_counts_as_the_server_encodes():
    """The LSP's view of the served tokenizer.json (it may not import the model) gives the model's
    own ids: tags as ids, text that spells a tag as its characters, badly tokenizing text alike."""
    from editserver.lsp.budget import ServedTokens

    served = ServedTokens((DEFAULT_CHECKPOINT / "tokenizer.json").read_text())
    text = "x = '<|mask|>' + \"<|cursor|>\"\n" + bad(random.Random(3), 200)
    p = EditPrompt("a.py", text, REGION, 4, "\n", [Snippet("b.py", bad(random.Random(4), 50))], "")
    assert served.encode(text) == shipped().encode(text)
    assert served.encode_prompt(p) == shipped().encode_prompt(p)
    assert served.min_tokens(text) == shipped().min_tokens(text)
