"""protocol/postprocess.py: the FIM rules the HTTP server and the LSP share (pure functions)."""

from __future__ import annotations

import pytest

from editserver.protocol.postprocess import balance_closers, cut_runaway, trim


def test_same_line_hole_ends_at_the_end_of_the_line():
    t = trim("x, y)\nprint(x)\nprint(y)", "total = add(", ")\n", "python")
    assert t.text == "x, y"
    assert t.trimmed == ["same_line", "suffix_overlap"]


def test_retyped_suffix_is_cut():
    assert trim("a, b)", "print(", "a, b)\n").text == ""
    assert trim("name, rest)", "f(", "rest)\n").text == "name,"
    # the rest of the line written out inside the answer
    t = trim("x: int) -> int: return x", "def f(", ") -> int:\n")
    assert t.text == "x: int" and "suffix_overlap" in t.trimmed
    assert trim("x + y", "z = ", "y + 1\n").text == "x + y"  # one shared letter is a coincidence


def test_an_answer_rewriting_the_rest_of_the_line_is_dropped():
    # just after a rename: `def compute_total|(items, tax):`, the model writes the signature again
    t = trim("(items):", "def compute_total", "(items, tax):\n    return 1\n", "python")
    assert t.text == "" and t.trimmed == ["rewrites_rest"]
    assert trim("(items)", "def compute_total", "(items, tax):\n").text == ""
    assert trim("(items_list)", "def compute_total", "(items, tax):\n").text == "(items_list)"
    # insertions before the rest of the line stay
    assert trim(" + baz", "x = foo", " + bar\n").text == " + baz"  # an operator alone
    assert trim("bar_baz, ", "f(", "bar)\n").text == "bar_baz,"  # a new argument before it
    assert trim("(items)", "def compute_total", "\n").text == "(items)"  # nothing after the cursor
    # a new line before the next one (nothing before the cursor) may open as that line does
    assert trim("    return x", "def f(x):\n", "    return y\n", "python").text == "    return x"


def test_runaway_repetition_is_cut():
    raw = "= weight_data * X_size_factor * X_size_factor * X_size_factor * X_size_factor"
    t = trim(raw, "    grad ", "\n", "python")
    assert t.text == "= weight_data * X_size_factor"
    assert "runaway" in t.trimmed
    assert cut_runaway("[0, 0, 0, 0, 0]") == "[0, 0, 0, 0, 0]"  # numbers, not a runaway
    assert cut_runaway("# ================") == "# ================"


def test_repeated_lines_are_cut():
    raw = "\n        total += x\n        total += x\n        total += x"
    t = trim(raw, "def f(xs):\n    for x in xs:", "\n", "python")
    assert t.text == "\n        total += x"
    assert "repeated_line" in t.trimmed


def test_a_space_already_typed_is_not_doubled():
    t = trim(" width)", "area = (width + ", ")\n", "python")
    assert t.text == "width" and t.trimmed[0] == "double_space"
    assert trim(" # the sum", "x = a + b ", "\n", "python").text == " # the sum"  # two spaces before #
    assert trim("width", "area = (width + ", "\n").text == "width"
    assert trim("    return x", "def f(x):\n    ", "\n", "python").text == "return x"  # indentation


def test_brackets_balanced_against_the_suffix():
    assert trim("foo(1, 2)]", "x = [", "]").text == "foo(1, 2)"
    assert trim("a[0]", "f(", ")").text == "a[0]"  # balanced: kept
    assert trim("g(x))", "f(", ")\n").text == "g(x)"
    # a dangling closer after a balanced line (the suffix brings nothing) is dropped
    t = trim("print(x))", "    ", "\n", "python")
    assert t.text == "print(x)" and t.trimmed == ["brackets"]
    # a call opened lines above still gets its closer
    assert balance_closers("f(\n    a,\n    b", ")", "") == ")"
    assert balance_closers("s = '('\nx = ", "g(1))", "") == "g(1)"  # a bracket in a string does not count


def test_stop_is_never_undone_and_trim_only_shortens():
    # the engine applied the request's stop already; post-processing cannot bring text back
    for raw, prefix, suffix in [
        ("return a + b", "def add(a, b):\n    ", "\n"),
        ("x, y)\nz", "f(", ")\n"),
        ("\n    if x:\n        return 1\nprint(2)", "def g(x):", "\n"),
    ]:
        out = trim(raw, prefix, suffix, "python").text
        assert len(out) <= len(raw)


@pytest.mark.parametrize(
    "raw,prefix,suffix,lang",
    [
        ("x, y)\nprint(x)", "total = add(", ")\n", "python"),
        ("= a * b_c * b_c * b_c * b_c", "v ", "\n", ""),
        ("\n    return x\n    return x\n\nclass A:", "def f(x):", "\n\nprint(1)\n", "python"),
        ("\u0001abc\ufffd))", "f(g(", "\n", ""),
        ("a, b) + c", "h(", ")\n", "go"),
        (" width)", "area = (width + ", ")\n", "python"),
        ("(items):", "def compute_total", "(items, tax):\n", "python"),
    ],
)
def test_idempotent(raw, prefix, suffix, lang):
    """The server trims, then the LSP trims again: the second pass must change nothing."""
    once = trim(raw, prefix, suffix, lang).text
    twice = trim(once, prefix, suffix, lang)
    assert twice.text == once and twice.trimmed == []


def test_multiline_block_stops_at_dedent_and_unknown_language_allows_colon_blocks():
    raw = "\n    y = x + 1\n    return y\nprint('after')"
    t = trim(raw, "def f(x):", "\n", "")
    assert t.text == "\n    y = x + 1\n    return y"
    assert t.trimmed == ["dedent"]


def test_settled_means_nothing_more_can_be_shown() -> None:
    from editserver.protocol.postprocess import settled

    assert not settled("x = 1", "def f():\n    ", "\n")  # a line still being written
    assert settled("(items)", "def compute_total", "(items, tax):\n")  # re-typing the rest of the line
    assert not settled("(items", "def compute_total", "(items, tax):\n")  # it may go on: (items_list
    assert settled("x = 1\ny = 2", "print(", ")\n")  # a one-line hole got a newline
    assert settled("a\n\ndef g(", "def f():\n    return ", "\n")  # dedented out of the block
    assert settled("w * size * size * size * size", "x = ", "\n")  # runaway repetition
