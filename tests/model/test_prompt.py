"""The next-edit prompt layout: build/parse round trip and clear errors."""

from __future__ import annotations

import pytest

from editserver.protocol.prompt import (
    EditPrompt,
    PromptError,
    Snippet,
    build_prompt,
    parse_prompt,
    unified_diff,
)

P = EditPrompt(
    file_path="src/app.py",
    above="import os\n\n",
    region="def load(path):\n    return open(path).read()\n",
    cursor=8,
    below="\nprint(load('x'))\n",
    snippets=[Snippet("src/util.py", "def helper():\n    pass\n")],
    history=unified_diff("src/app.py", "def read(p):\n", "def load(p):\n"),
)


def test_layout_has_every_tag_in_order() -> None:
    text = build_prompt(P)
    tags = [
        "<|recently_viewed_code_snippets|>",
        "<|recently_viewed_code_snippet|>",
        "code_snippet_file_path: src/util.py",
        "<|/recently_viewed_code_snippets|>",
        "<|current_file_content|>",
        "current_file_path: src/app.py",
        "<|code_to_edit|>",
        "def load<|cursor|>(path)",
        "<|/code_to_edit|>",
        "<|/current_file_content|>",
        "<|edit_diff_history|>",
        "--- src/app.py",
        "+++ src/app.py",
        "-def read(p):",
        "+def load(p):",
        "<|/edit_diff_history|>",
    ]
    pos = [text.index(t) for t in tags]
    assert pos == sorted(pos)


def test_round_trip() -> None:
    assert parse_prompt(build_prompt(P)) == P
    empty = EditPrompt("a.go", "", "x := 1\n", 0, "", [], "")
    text = build_prompt(empty)
    assert "<|recently_viewed_code_snippets|>\n<|/recently_viewed_code_snippets|>" in text
    assert parse_prompt(text) == empty
    assert parse_prompt(text.replace("\n", "\r\n")) == empty


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "empty"),
        ("<|current_file_content|>\nx\n<|/current_file_content|>", "<|code_to_edit|>"),
        ("<|code_to_edit|>\na<|cursor|>b<|cursor|>\n<|/code_to_edit|>", "2 <|cursor|>"),
        ("<|code_to_edit|>\nabc\n", "closing"),
        ("<|cursor|>x\n<|code_to_edit|>\nabc\n<|/code_to_edit|>", "inside"),
    ],
)
def test_malformed_prompts_name_the_problem(text: str, needle: str) -> None:
    with pytest.raises(PromptError, match=None) as e:
        parse_prompt(text)
    assert needle in str(e.value)


@pytest.mark.parametrize("region", ["def f():\n    return 1\n", "", "x = 1\n\n"])
def test_edit_response_round_trip(region: str) -> None:
    from editserver.protocol.prompt import format_edit_response, parse_edit_response

    assert parse_edit_response(format_edit_response(region)) == region
    assert parse_edit_response("no fence here") is None


def test_fit_prompt_cuts_outer_context_first_and_keeps_the_region() -> None:
    from editserver.protocol.prompt import (
        EditPrompt,
        Snippet,
        build_prompt,
        fit_prompt,
        split_history,
        unified_diff,
    )

    above = "".join(f"a{i} = {i}\n" for i in range(100))
    below = "".join(f"b{i} = {i}\n" for i in range(100))
    diffs = [unified_diff("m.py", f"x = {i}\n", f"x = {i + 1}\n") for i in range(5)]
    p = EditPrompt("m.py", above, "y = 1\n", 0, below, [Snippet("o.py", "z = 2\n" * 50)], "".join(diffs))
    assert split_history(p.history) == diffs

    def enc(q):  # characters stand in for tokens
        return list(build_prompt(q))

    kept = fit_prompt(p, enc, 10**6)
    assert kept is not None and kept[0] is p, "a prompt that fits is untouched"
    assert kept[1] == list(build_prompt(p)), "with the tokens of the prompt it kept"
    cut = fit_prompt(p, enc, 800)
    assert cut is not None
    q, ids = cut
    assert ids == list(build_prompt(q)) and len(ids) <= 800
    assert q.region == p.region and q.cursor == p.cursor and not q.snippets
    assert above.endswith(q.above) and below.startswith(q.below), "the lines nearest the region stay"
    assert q.history.endswith(diffs[-1])
    bare = fit_prompt(p, enc, 300)
    assert bare is not None and bare[0].above == "" and bare[0].history == diffs[-1]
    assert fit_prompt(p, enc, 50) is None


def test_edit_canvas_pos_lines_up_with_the_region() -> None:
    from editserver.protocol.prompt import edit_canvas_pos

    rewrite, region_open = 7, 3
    assert edit_canvas_pos([1, 2, 3, 9, 9, 4, 7], rewrite, region_open) == 3, "first token after the tag"
    assert edit_canvas_pos([1, 2, 3, 9, 4], rewrite, region_open) == 5, "not an edit row: after the context"
    assert edit_canvas_pos([1, 2, 9, 7], rewrite, region_open) == 4, "no region tag: after the context"
    assert edit_canvas_pos([], rewrite, region_open) == 0


def test_fit_prompt_with_a_token_bound_keeps_the_same_cut() -> None:
    from editserver.model.infer.tokenizer import Tokenizer, train_tokenizer
    from editserver.protocol.prompt import EditPrompt, fit_prompt, unified_diff
    from tests.conftest import CORPUS

    tok = train_tokenizer(CORPUS, vocab_size=400)
    above = "".join(f"a{i} = f(x, {i})\n" for i in range(100))
    below = "".join(f"b{i} = g({i})\n" for i in range(100))
    diffs = "".join(unified_diff("m.py", f"x = {i}\n", f"x = {i + 1}\n") for i in range(5))
    p = EditPrompt("m.py", above, "y = 1\n", 0, below, [], diffs)
    calls: list[int] = []

    def enc(q: EditPrompt) -> list[int]:
        calls.append(1)
        return tok.encode_prompt(q)

    for budget in (20, 60, 150, 400, 1200, 10**6):
        plain = fit_prompt(p, tok.encode_prompt, budget)
        calls.clear()
        bounded = fit_prompt(p, enc, budget, Tokenizer.min_tokens)
        assert bounded == plain, budget
        if budget == 60:
            assert len(calls) <= 1, "cuts that cannot fit are not encoded"


def test_code_that_spells_the_tags_parses_back_as_text() -> None:
    """A tag counts where it stands alone on its line (or, for the cursor, inside the region); code that
    mentions a tag inside a line is text, in every part of the prompt."""
    from editserver.model.infer.tokenizer import EDIT_TAGS
    from editserver.protocol.prompt import EditPrompt, PromptError, Snippet, build_prompt, parse_prompt

    spelled = "".join(f"s{i} = '{t}'\n" for i, t in enumerate(EDIT_TAGS))
    p = EditPrompt(
        "m.py",
        "x = 1\n" + spelled,
        "y = '<|code_to_edit|>'\nz = 2\n",
        len("y = '<|code_to_edit|>'\n"),
        spelled + "w = 3\n",
        [Snippet("o.py", spelled), Snippet("q.py", "if '<|/recently_viewed_code_snippet|>' in t: pass\n")],
        "--- m.py\n+++ m.py\n@@ -1 +1 @@\n-a = '<|/edit_diff_history|>'\n+b = '<|edit_diff_history|>'\n",
    )
    assert parse_prompt(build_prompt(p)) == p
    # the one place a string format cannot tell: the region itself spelling the cursor
    twice = build_prompt(p).replace("z = 2", "z = '<|cursor|>'")
    with pytest.raises(PromptError, match="exactly one"):
        parse_prompt(twice)


def test_a_region_that_spells_the_cursor_names_its_cursor() -> None:
    """``cursor_index`` says which ``<|cursor|>`` of the region is the cursor: the user's spellings
    before, after and right beside it parse back as text, CRLF included; a wrong index is one clear
    error, and without one the region may hold only one tag."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from editserver.protocol.prompt import CURSOR, cursor_index

    pieces = st.sampled_from(["x", "\n", "\r\n", " ", "<|", "|>", "cursor", CURSOR, "'"])

    @settings(max_examples=200, deadline=None)
    @given(st.lists(pieces, max_size=12), st.integers(0, 60))
    def round_trip(parts: list[str], at: int) -> None:
        region = "".join(parts).replace("\r\n", "\n") + "\n"
        at = min(at, len(region) - 1)
        p = EditPrompt("m.py", "a = 1\n", region, at, "b = '<|cursor|>'\n")
        assert parse_prompt(build_prompt(p), cursor_index(region, at)) == p

    round_trip()
    region = "s = '<|cursor|>'\nt = '<|cursor|>'\n"
    p = EditPrompt("m.py", "", region, region.index("t"), "")
    crlf = build_prompt(p).replace("\n", "\r\n")
    assert parse_prompt(crlf, cursor_index(region, p.cursor)) == p
    with pytest.raises(PromptError, match="exactly one"):
        parse_prompt(build_prompt(p))
    with pytest.raises(PromptError, match="cursor_index 3 names no <\\|cursor\\|> tag: the region holds 3"):
        parse_prompt(build_prompt(p), 3)


def test_answers_keep_the_regions_own_cursor_spellings() -> None:
    from editserver.protocol.prompt import CURSOR, drop_cursor_tags

    region = "s = '<|cursor|>'\nx = 1\n"
    assert drop_cursor_tags(region, region) == region  # the user's spelling is text
    assert drop_cursor_tags("s = '<|cursor|>'\nx = <|cursor|>1\n", region) == region  # an echoed tag
    assert drop_cursor_tags(f"{CURSOR}s = '<|cursor|>'\nx = 2\n", region) == "s = '<|cursor|>'\nx = 2\n"
    assert drop_cursor_tags(f"x = {CURSOR}1\n", "x = 1\n") == "x = 1\n"
