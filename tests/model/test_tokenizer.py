"""Tokenizer: exact round trip of any UTF-8 text; text is text, the layout's tags are ids."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from editserver.model.infer.checkpoint import DEFAULT_CHECKPOINT
from editserver.model.infer.tokenizer import EDIT_TAGS, SPECIAL_TOKENS, Tokenizer, train_tokenizer
from editserver.protocol.prompt import EditPrompt, Snippet, build_prompt
from tests.conftest import CORPUS


@functools.cache
def shipped_tokenizer() -> Tokenizer:
    """Loaded once: the property tests below run hundreds of examples each."""
    return Tokenizer.load(DEFAULT_CHECKPOINT / "tokenizer.json")


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return train_tokenizer(CORPUS, vocab_size=400)


code_like = st.lists(
    st.sampled_from(
        list("abcdefxyz_(){}[]:;.,=+-*/'\"#\t\r\n ") + ["    ", "\r\n", "é", "中", "🙂", "\u00a0"]
    ),
    max_size=120,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(max_size=200), code_like))
def test_round_trip_any_text(tok: Tokenizer, text: str) -> None:
    assert tok.decode(tok.encode(text)) == text


def test_round_trip_indentation_tabs_crlf(tok: Tokenizer) -> None:
    text = "def f():\r\n" + " " * 64 + "x = 1\r\n\t\t\treturn x\n" + "\t" * 40 + "\n\n\n"
    assert tok.decode(tok.encode(text)) == text


def test_special_tokens_are_single_ids_only_where_the_layout_puts_them(tok: Tokenizer) -> None:
    assert len(set(tok.special_ids.values())) == len(SPECIAL_TOKENS)
    assert set(EDIT_TAGS) <= set(tok.special_ids)
    for s in SPECIAL_TOKENS:  # text is text: the string never becomes the control token
        ids = tok.encode(s)
        assert tok.special_ids[s] not in ids and len(ids) > 1 and tok.decode(ids) == s
    p = EditPrompt("m.py", "x = 1\n", "y = 1\n", 5, "", [], "")
    ids = tok.encode_prompt(p)
    for tag in ("<|code_to_edit|>", "<|/code_to_edit|>", "<|cursor|>", "<|current_file_content|>"):
        assert ids.count(tok.special_ids[tag]) == 1, tag
    assert tok.decode(ids) == build_prompt(p)


@pytest.mark.parametrize("shipped", [False, True])
def test_a_prompt_without_tag_text_keeps_the_ids_inline_tags_gave(tok: Tokenizer, shipped: bool) -> None:
    """Before text was text, the prompt was encoded with its tags inline; a prompt whose text spells
    no tag gets exactly those ids, so the shipped model's inputs do not move."""
    if shipped:
        if not (DEFAULT_CHECKPOINT / "tokenizer.json").exists():
            pytest.skip("no shipped checkpoint")
        tok = shipped_tokenizer()
    p = EditPrompt(
        "m.py", "def f(x):\n", "    return x\n", 4, "\nf(1)\n", [Snippet("o.py", "z = 2\n")], "--- a\n"
    )
    assert tok.encode_prompt(p) == tok.hf.encode(build_prompt(p), add_special_tokens=False).ids


def _near(tok, make) -> None:
    """``make(s)`` with ``s`` a special token's spelling costs what a near-identical plain string costs
    (one character more: ``<|maskq|>``), within one token."""
    for s in SPECIAL_TOKENS:
        plain = s[:-2] + "q|>"
        a, b = len(make(s)), len(make(plain))
        assert abs(a - b) <= 1, (s, a, b)


@pytest.mark.parametrize("shipped", [False, True])
def test_text_that_spells_a_special_token_costs_its_characters(tok: Tokenizer, shipped: bool) -> None:
    if shipped:
        if not (DEFAULT_CHECKPOINT / "tokenizer.json").exists():
            pytest.skip("no shipped checkpoint")
        tok = shipped_tokenizer()
    _near(tok, lambda s: tok.encode(f"s = '{s}'\n"))
    for part in ("above", "region", "below", "history", "file_path"):

        def prompt(s: str, part: str = part) -> list[int]:
            kw = {"file_path": "m.py", "above": "a = 1\n", "region": "b = 2\n", "cursor": 0, "below": ""}
            kw["history"] = ""
            kw[part] = f"x = '{s}'\n"
            return tok.encode_prompt(EditPrompt(**kw, snippets=[Snippet("o.py", "c = 3\n")]))

        _near(tok, prompt)
        base = prompt("<|maskq|>")
        tags = [i for i in prompt("<|code_to_edit|>") if i in tok.special_ids.values()]
        assert tags == [i for i in base if i in tok.special_ids.values()], "the layout stays the same"
    _near(tok, lambda s: tok.encode_prompt(EditPrompt("m.py", "", "r\n", 0, "", [Snippet("o.py", s)], "")))


def test_save_load(tok: Tokenizer, tmp_path) -> None:
    tok.save(tmp_path / "t.json")
    again = Tokenizer.load(tmp_path / "t.json")
    s = "for i in range(10):\n\tprint(i)  # é\n"
    assert again.encode(s) == tok.encode(s) and again.mask_id == tok.mask_id


@pytest.mark.skipif(not (DEFAULT_CHECKPOINT / "tokenizer.json").exists(), reason="no shipped checkpoint")
@settings(max_examples=200, deadline=None)
@given(text=st.one_of(st.text(max_size=300), code_like))
def test_shipped_tokenizer_round_trip(text: str) -> None:
    tok = shipped_tokenizer()
    assert tok.decode(tok.encode(text)) == text


whitespace_heavy = st.lists(
    st.sampled_from(
        list("ab1_(.'s \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85")
        + ["\u00a0", "\u2028", "\u3000", "'ll", "<|cursor|>"]
    ),
    max_size=80,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(max_size=200), code_like, whitespace_heavy))
def test_min_tokens_is_a_lower_bound(tok: Tokenizer, text: str) -> None:
    # fit_prompt skips encoding a cut whose bound is over budget, so an overestimate would change rows
    assert Tokenizer.min_tokens(text) <= len(tok.encode(text))


@pytest.mark.skipif(not (DEFAULT_CHECKPOINT / "tokenizer.json").exists(), reason="no shipped checkpoint")
@settings(max_examples=200, deadline=None)
@given(text=st.one_of(st.text(max_size=300), code_like, whitespace_heavy))
def test_min_tokens_is_a_lower_bound_for_the_shipped_tokenizer(text: str) -> None:
    tok = shipped_tokenizer()
    assert Tokenizer.min_tokens(text) <= len(tok.encode(text))


def test_min_tokens_counts_non_whitespace_runs() -> None:
    assert Tokenizer.min_tokens("def f(x):\n    return x\n") == 4
    assert Tokenizer.min_tokens("a\x1cb \u00a0c") == 2, "only ASCII whitespace splits"
