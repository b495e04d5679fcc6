"""Suggestion scores and what counts as a proposal."""

from __future__ import annotations

import pytest

from editserver.model.infer.scoring import aggregate, layout_only

REGION = "def f(a, b):\n    x = foo(a,\n            b)\n    return x\n"


def test_layout_only_rewrites_are_no_proposal() -> None:
    joined = "def f(a, b):\n    x = foo(a, b)\n    return x\n"
    assert layout_only(REGION, joined), "two lines joined"
    assert layout_only(joined, REGION), "a line broken mid-expression"
    assert layout_only(REGION, REGION.replace("    return", "\n    return")), "a stray blank line"
    assert layout_only(REGION, REGION.replace("x\n", "x  \n")), "trailing blanks"
    assert not layout_only(REGION, REGION), "equal is unchanged, not a layout change"
    assert not layout_only(REGION, REGION.replace("foo", "bar")), "a token changed"
    indented = "".join("    " + line for line in REGION.splitlines(keepends=True))
    assert not layout_only(REGION, indented), "re-indenting lines is a real edit"


def test_aggregates() -> None:
    c = [0.9, 0.5, 1.0, 0.7]
    assert aggregate(c, "min") == 0.5 and aggregate(c, "median") == pytest.approx(0.8)
    assert aggregate([], "min") == 1.0, "an empty answer proposes nothing uncertain"
    with pytest.raises(ValueError, match="unknown score aggregate"):
        aggregate(c, "max")
