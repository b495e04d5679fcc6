"""The next-edit draft: alignment on what was written, the history's renames, read from the context."""

from __future__ import annotations

from editserver.model.infer.draft import align_draft, apply_renames, draft_region, history_renames
from editserver.protocol.prompt import EditPrompt, unified_diff

EOT = 0


def test_aligned_draft_follows_a_change_of_length() -> None:
    region = [10, 11, 12, 13, 14]
    assert align_draft(region, [], 7, EOT) == [10, 11, 12, 13, 14, EOT, EOT], "nothing written: the region"
    # a rename to a longer name: 12 -> 20 21; the tokens after it still see what they copy
    assert align_draft(region, [10, 11, 20, 21, 13, 14], 8, EOT) == [10, 11, 12, 13, 13, 14, EOT, EOT]
    # written so far ends in the change: the rest continues the region after the replaced token
    assert align_draft(region, [10, 11, 20], 6, EOT) == [10, 11, 12, 13, 14, EOT]
    assert align_draft(region, [10, 11, 13, 14], 5, EOT) == [10, 11, 13, 14, EOT], "a deleted token"
    assert align_draft(region, [10, 11, 12, 13, 14, 15], 7, EOT) == region + [EOT, EOT], "an added tail"


def test_history_renames_are_identifier_substitutions_only() -> None:
    diff = unified_diff("a.py", "def area(width, height):\n    pass\n", "def area(size, height):\n    pass\n")
    assert history_renames(diff) == [("width", "size")]
    assert history_renames(unified_diff("a.py", "x = 1\n", "x = 2\n")) == [], "a number is not a name"
    assert history_renames(unified_diff("a.py", "f(a)\n", "f(a, b)\n")) == [], "words added: not a rename"
    assert history_renames(unified_diff("a.py", "f(a, a)\n", "f(b, c)\n")) == [], "one name, two new ones"
    assert history_renames(unified_diff("a.py", "f(a, b)\n", "f(b, a)\n")) == [], "a swap is no rename"
    assert history_renames(unified_diff("a.py", "x = a + b\n", "x = b + b\n")) == [], "b was there"
    assert history_renames(unified_diff("a.py", "a(a.x)\n", "a(b.x)\n")) == [], "a is still used"
    assert history_renames(unified_diff("a.py", "    echo(x)\n", "    yield(x)\n")) == [], "a keyword"
    assert history_renames(unified_diff("a.py", "def f(type):\n", "def f(kind):\n")) == [("type", "kind")]
    two = unified_diff("a.py", "a = b\n", "a = c\n") + unified_diff("a.py", "a = c\n", "z = c\n")
    assert history_renames(two) == [("b", "c"), ("a", "z")], "oldest first"
    assert apply_renames("return width * widths  # width\n", [("width", "size")]) == (
        "return size * widths  # size\n"
    ), "whole words; strings and comments are the model's call"


def test_draft_region_reads_region_and_history_back_from_the_context(tiny_checkpoint) -> None:
    from editserver.model.infer.loader import load_checkpoint

    tok = load_checkpoint(tiny_checkpoint).tokenizer
    hist = unified_diff("m.py", "def area(width, h):\n", "def area(size, h):\n")
    p = EditPrompt("m.py", "def area(size, h):\n", "    return width * h\n", 11, "", [], hist)
    ctx = [*tok.encode_prompt(p), tok.rewrite_id]
    # the cursor tag splits a token in the prompt; the draft is tokenized as the answer would be
    assert draft_region(ctx, tok) == tok.encode("    return size * h\n")
    plain = EditPrompt("m.py", "", "    return width * h\n", 0, "", [], "")
    assert draft_region([*tok.encode_prompt(plain), tok.rewrite_id], tok) == tok.encode(plain.region)
    fim = [tok.fim_prefix_id, *tok.encode("x = "), tok.fim_suffix_id, tok.fim_middle_id]
    assert draft_region(fim, tok) is None
    assert draft_region(ctx[:-1], tok) is None, "a row without <|rewrite|> is not a next-edit canvas"
