"""Tokenizer: exact round trip of any UTF-8 text, special tokens matched whole."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from editserver.model.infer.checkpoint import DEFAULT_CHECKPOINT
from editserver.model.infer.tokenizer import EDIT_TAGS, SPECIAL_TOKENS, Tokenizer, train_tokenizer
from tests.conftest import CORPUS


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


def test_special_tokens_are_single_ids(tok: Tokenizer) -> None:
    for s in SPECIAL_TOKENS:
        assert tok.encode(s) == [tok.special_ids[s]]
    assert len(set(tok.special_ids.values())) == len(SPECIAL_TOKENS)
    text = "x<|code_to_edit|>\ny = 1<|cursor|>\n<|/code_to_edit|>"
    ids = tok.encode(text)
    assert tok.special_ids["<|cursor|>"] in ids and tok.decode(ids) == text
    assert set(EDIT_TAGS) <= set(tok.special_ids)


def test_save_load(tok: Tokenizer, tmp_path) -> None:
    tok.save(tmp_path / "t.json")
    again = Tokenizer.load(tmp_path / "t.json")
    s = "for i in range(10):\n\tprint(i)  # é\n"
    assert again.encode(s) == tok.encode(s) and again.mask_id == tok.mask_id


@pytest.mark.skipif(not (DEFAULT_CHECKPOINT / "tokenizer.json").exists(), reason="no shipped checkpoint")
@settings(max_examples=200, deadline=None)
@given(text=st.one_of(st.text(max_size=300), code_like))
def test_shipped_tokenizer_round_trip(text: str) -> None:
    tok = Tokenizer.load(DEFAULT_CHECKPOINT / "tokenizer.json")
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
    tok = Tokenizer.load(DEFAULT_CHECKPOINT / "tokenizer.json")
    assert Tokenizer.min_tokens(text) <= len(tok.encode(text))


def test_min_tokens_counts_non_whitespace_runs() -> None:
    assert Tokenizer.min_tokens("def f(x):\n    return x\n") == 4
    assert Tokenizer.min_tokens("a\x1cb \u00a0c") == 2, "only ASCII whitespace splits"
