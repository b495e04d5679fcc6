"""The replay's labelling rules, hunk order and metric arithmetic on hand-computed cases."""

from __future__ import annotations

import pytest

from editserver.replay import metrics
from editserver.replay.judge import change_tokens, judge_edit, judge_fim, kept_rate
from editserver.replay.points import EditPoint, Hunk, Options, developer_order, edit_points, fim_points


def point(
    lines: list[str], remaining: list[tuple[int, int, str]], lo: int = 0, hi: int | None = None
) -> EditPoint:
    hi = len(lines) if hi is None else hi
    return EditPoint("t#1", "o/r", "0" * 40, "f.py", "python", 1, 2, lines, remaining, lo, hi, 0, "", (0, 0))


FILE = ["def f(a):\n", "    x = foo(a)\n", "    y = bar(a)\n", "    return x + y\n"]
# the developer's remaining hunk rewrites lines 1-2
HUNK = (1, 2, "    x = foo(a, b)\n    y = bar(a, b)\n")


def region_with(*replacements: tuple[int, str]) -> str:
    lines = list(FILE)
    for i, text in replacements:
        lines[i] = text
    return "".join(lines)


def test_exact_partial_whitespace_and_wrong_suggestions():
    p = point(FILE, [HUNK])
    full = region_with((1, "    x = foo(a, b)\n"), (2, "    y = bar(a, b)\n"))
    v = judge_edit(p, full)
    assert (v.label, v.exact, v.kept) == ("accepted", True, 1.0)
    # whitespace differences do not matter
    assert judge_edit(p, full.replace("foo(a, b)", "foo(a,  b)  ")).exact
    # a strict part of the hunk: one of its two lines, done right
    v = judge_edit(p, region_with((1, "    x = foo(a, b)\n")))
    assert (v.label, v.exact, v.kept) == ("accepted", False, 1.0)
    # a partial line is not a part of the hunk's lines
    assert judge_edit(p, region_with((1, "    x = foo(a, \n"))).label == "rejected"
    # the hunk plus an unrelated change is rejected
    assert judge_edit(p, full.replace("return x + y", "return x - y")).label == "rejected"
    # unchanged and blank answers are not proposals
    assert judge_edit(p, "".join(FILE)).label == "unchanged"
    assert judge_edit(p, "".join(FILE).rstrip("\n")).label == "unchanged"  # a fence ate the last newline
    assert judge_edit(p, "  \n").label == "empty"
    # a rewrite that only moves layout is answered as unchanged (model/infer/scoring.py layout_only)
    assert judge_edit(p, region_with((1, "    x = foo(a)\n\n"))).label == "unchanged"
    assert judge_edit(p, region_with((1, "    x = foo(\na)\n"))).label == "unchanged"
    # nothing left to do: anything proposed is rejected
    assert judge_edit(point(FILE, []), full).label == "rejected"


def test_two_remaining_hunks_in_the_region_may_be_done_together_or_alone():
    h1, h2 = (0, 1, "def f(a, b):\n"), (3, 1, "    return x * y\n")
    p = point(FILE, [h1, h2])
    assert judge_edit(p, region_with((0, "def f(a, b):\n"))).exact
    assert judge_edit(p, region_with((3, "    return x * y\n"))).exact
    assert judge_edit(p, region_with((0, "def f(a, b):\n"), (3, "    return x * y\n"))).exact
    # a hunk outside the editable region cannot be reproduced from it
    far = point(FILE + ["\n"] * 30 + ["z = 1\n"], [(34, 1, "z = 2\n")], lo=0, hi=4)
    assert judge_edit(far, region_with((1, "    x = 3\n"))).label == "rejected"


def test_kept_rate_is_lcs_of_change_tokens_over_the_suggestion():
    old = ["x = foo(a)\n"]
    actual = change_tokens(old, ["x = foo(a, b)\n"])
    suggested = change_tokens(old, ["x = foo(a, c)\n"])
    # -x -= -foo -( -a -) then +x += +foo +( +a +, +c +): of the 8 written tokens all but "+c" kept
    assert len(suggested) == 14
    assert kept_rate(suggested, actual) == pytest.approx(7 / 8)
    # a pure deletion is compared on what it deletes
    assert (
        kept_rate(change_tokens(["a = 1\n", "b = 2\n"], ["a = 1\n"]), change_tokens(["b = 2\n"], [])) == 1.0
    )
    assert kept_rate([], actual) == 0.0
    p = point(["x = foo(a)\n", "pass\n"], [(0, 1, "x = foo(a, b)\n")])
    v = judge_edit(p, "x = foo(a, c)\npass\n")
    assert v.label == "rejected" and v.kept == pytest.approx(7 / 8)
    # wiping the region keeps nothing, even where the developer deleted lines too
    wipe = point(["a = 1\n", "b = 2\n"], [(1, 1, "")])
    assert judge_edit(wipe, "________\n").kept == 0.0


def test_fim_exact_and_accepted_prefix():
    assert judge_fim("return a + b", "return a + b  \nnext line").exact
    v = judge_fim("return a + b", "return a - b")
    assert (v.exact, v.prefix_chars) == (False, 9) and v.prefix_fraction == pytest.approx(9 / 12)
    assert judge_fim("x", None).prefix_chars == 0


def hunks_of(before: str, after_hunks: list) -> list[Hunk]:
    lines = before.splitlines(keepends=True)
    return [Hunk(s, n, t, lines[s : s + n]) for s, n, t in after_hunks]


def test_developer_order_definition_before_uses_and_callee_before_callers():
    before = "a = helper(1)\n\nb = helper(2)\n\ndef helper(x):\n    return x\n"
    hunks = hunks_of(
        before, [[0, 1, "a = assist(1)\n"], [2, 1, "b = assist(2)\n"], [4, 1, "def assist(x):\n"]]
    )
    assert developer_order(hunks) == [2, 0, 1]
    chain = "def top():\n    mid()\n\ndef mid():\n    low()\n\ndef low():\n    pass\n"
    hunks = hunks_of(
        chain, [[1, 1, "    mid(v)\n"], [3, 2, "def mid(v):\n    low(v)\n"], [6, 1, "def low(v):\n"]]
    )
    assert developer_order(hunks) == [2, 1, 0]
    # unrelated hunks keep file order
    hunks = hunks_of(chain, [[1, 1, "    mid()  # a\n"], [7, 1, "    return None\n"]])
    assert developer_order(hunks) == [0, 1]


def test_points_skip_and_count_unusable_records():
    from collections import Counter

    stats = Counter()
    rec = {"repo": "o/r", "sha": "1" * 40, "path": "f.py", "lang": "python", "before": "a = 1\n", "hunks": []}
    assert list(edit_points(rec, Options(), stats)) == [] and stats["no_hunks"] == 1
    assert list(edit_points({**rec, "hunks": [[0, 1, "a = 2\n"]]}, Options(), stats)) == []
    assert stats["single_hunk"] == 1
    wide = {**rec, "before": "x" * 5000 + "\n" + "y = 1\n", "hunks": [[0, 0, "# a\n"], [1, 1, "y = 2\n"]]}
    assert list(edit_points(wide, Options(), stats)) == [] and stats["region_too_long"] == 2
    fims = list(fim_points({**rec, "hunks": [[0, 1, "    value = compute(1)\n"]]}, Options(), stats))
    assert [(f.position, f.prefix[-4:] + "|" + f.expected) for f in fims][0] == (
        "start",
        "    |value = compute(1)",
    )
    assert (
        fims[1].position == "mid"
        and fims[1].prefix + fims[1].expected + fims[1].suffix == "    value = compute(1)\n"
    )


def test_summary_sweep_and_auc_arithmetic():
    rows = [
        {"label": "accepted", "exact": True, "kept": 1.0, "score": 0.9, "latency_ms": 10.0},
        {"label": "accepted", "exact": False, "kept": 0.5, "score": 0.6, "latency_ms": 20.0},
        {"label": "rejected", "kept": 0.0, "score": 0.7, "latency_ms": 30.0},
        {"label": "unchanged", "score": 0.99, "latency_ms": 40.0},
    ]
    s = metrics.summarize(rows, 0.65, None)
    assert (s["shown"], s["accepted"], s["rejected"]) == (2, 1, 1)
    assert s["shown_rate"] == 0.5 and s["acceptance_rate"] == 0.5 and s["exact_match_rate"] == 0.25
    assert s["kept_rate"] == 0.5 and s["utility"] == pytest.approx((0.75 - 0.25) / 4)
    assert s["latency_ms"]["p50"] == 25.0 and s["latency_ms"]["p95"] == pytest.approx(38.5)
    curve = {c["threshold"]: c for c in metrics.sweep(rows, None)}
    assert curve[0.0]["shown_rate"] == 0.75 and curve[0.8]["acceptance_rate"] == 1.0
    assert curve[0.95]["acceptance_rate"] is None and curve[0.95]["utility"] == 0.0
    assert metrics.auc(rows, None) == 0.5  # 0.9 beats 0.7, 0.6 loses to it
    # showing all three pays; every threshold up to the lowest score (0.6) does that: the middle wins
    assert metrics.best_threshold(metrics.sweep(rows, None))["threshold"] == 0.3
    rows.append({"label": "rejected", "kept": 0.0, "score": 0.1, "latency_ms": 1.0})
    best = metrics.best_threshold(metrics.sweep(rows, None))
    assert best["threshold"] == 0.35 and best["utility"] == pytest.approx((1.5 - 0.25) / 5)  # (0.1, 0.6]
    losing = [{"label": "rejected", "score": 0.4}, {"label": "accepted", "score": 0.05}] + [
        {"label": "rejected", "score": 0.1}
    ] * 3
    assert metrics.best_threshold(metrics.sweep(losing, None))["threshold"] == 1.0  # showing never pays
