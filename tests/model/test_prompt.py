"""The next-edit prompt layout: build/parse round trip and clear errors."""

from __future__ import annotations

import pytest

from model.prompt import EditPrompt, PromptError, Snippet, build_prompt, parse_prompt, unified_diff

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
    from model.prompt import format_edit_response, parse_edit_response

    assert parse_edit_response(format_edit_response(region)) == region
    assert parse_edit_response("no fence here") is None
