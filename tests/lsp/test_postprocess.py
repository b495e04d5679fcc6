"""FIM post-processing rules, on their own (pure functions; no model, no process)."""

from __future__ import annotations

from editserver.lsp.fim import indent_style, multiline_allowed, postprocess
from editserver.lsp.state import FimScheduler


def test_drops_text_that_repeats_the_suffix():
    # the model re-emits what already follows the cursor on this line
    assert postprocess("a, b)", "print(", "a, b)\n", "python") == ""
    assert postprocess("total + 1)", "print(", ")\n", "python") == "total + 1"
    assert postprocess("x + y", "z = ", "y + 1\n", "python") == "x + y"  # one shared letter: kept
    assert postprocess("name, rest)", "f(", "rest)\n", "python") == "name,"
    # multi-line: a line equal to the suffix's next line is not emitted again
    out = postprocess("    x = 1\n    return x\n", "def f():", "\n    return x\n", "python")
    assert out == "\n    x = 1" or out == "    x = 1"


def test_no_closing_bracket_the_suffix_already_has():
    assert postprocess("foo(1, 2)]", "x = [", "]", "python") == "foo(1, 2)"
    assert postprocess("a[0]", "f(", ")", "javascript") == "a[0]"  # balanced: kept
    assert postprocess("g(x))", "f(", ")\n", "go") == "g(x)"


def test_single_line_mid_line_and_multi_line_at_block_start():
    assert postprocess("abc\ndef\n", "x = ", " + 1\n", "python") == "abc"
    assert not multiline_allowed("x = ", "", "python")
    assert multiline_allowed("def f(a):", "", "python")
    assert multiline_allowed("function f() {", "", "javascript")
    assert multiline_allowed("", "", "rust")
    body = postprocess("\n    a = 1\n    return a\nprint('next')\n", "def f():", "\n", "python")
    assert body == "\n    a = 1\n    return a"  # stops where the code dedents out of the block


def test_indentation_follows_the_file():
    assert indent_style("func f() {\n\tx := 1\n}\n") == ("\t", 0)
    assert indent_style("def f():\n  return 1\n") == (" ", 2)
    out = postprocess("\n    x := 1\n    return x", "func f() int {", "\n}\n", "go", ("\t", 0))
    assert out == "\n\tx := 1\n\treturn x"
    out = postprocess("\n\tx = 1", "def f():", "\n", "python", (" ", 4))
    assert out == "\n    x = 1"
    # the cursor already stands at the indentation: the first line must not add more
    assert postprocess("    return 1", "    ", "\n", "python") == "return 1"


def test_broken_characters_and_empty_results():
    assert postprocess("abc\ufffd\ufffdxyz", "x = ", "\n", "python") == "abcxyz"
    assert postprocess("ok\x03\x7fgo", "x = ", "\n", "python") == "okgo"
    assert postprocess("   \n  ", "x = ", "\n", "python") == ""


def test_cache_serves_the_rest_while_typing_along():
    sched = FimScheduler()
    cid = sched.remember("u", "x = ", "\n", "compute(a, b)")
    hit = sched.from_cache("u", "x = comp", "\n")
    assert hit is not None and hit.text == "ute(a, b)" and hit.id == cid and hit.from_cache
    assert sched.from_cache("u", "x = cx", "\n") is None  # diverged
    assert sched.from_cache("u", "x = comp", ")\n") is None  # suffix changed
    assert sched.from_cache("u", "x = compute(a, b)", "\n") is None  # fully typed
