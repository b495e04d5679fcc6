"""Training rows: FIM and next-edit layouts match what inference sends; unchanged answers are real."""

from __future__ import annotations

import random

import pytest

from editserver.model.infer.tokenizer import train_tokenizer
from editserver.model.train.data import RowBuilder, apply_hunks
from editserver.protocol.prompt import parse_prompt
from tests.conftest import CORPUS

SRC = "".join(f"def f{i}(x):\n    y = x + {i}\n    return y\n\n" for i in range(30))


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(CORPUS + [SRC], vocab_size=500)


def test_apply_hunks() -> None:
    lines = ["a\n", "b\n", "c\n", "d\n"]
    assert apply_hunks(lines, [[0, 1, "A\n"], [2, 0, "x\ny\n"], [3, 1, ""]]) == [
        "A\n",
        "b\n",
        "x\n",
        "y\n",
        "c\n",
    ]


def test_fim_rows(tok) -> None:
    b = RowBuilder(tok, 256, random.Random(0))
    rows = [r for r in (b.fim(SRC) for _ in range(40)) if r]
    assert rows
    for r in rows:
        ctx, canvas = r.ids[: r.context_len], r.ids[r.context_len :]
        assert ctx[0] == tok.fim_prefix_id and ctx[-1] == tok.fim_middle_id and tok.fim_suffix_id in ctx
        assert canvas[-1] == tok.eot_id and len(r.ids) <= 256
        middle = canvas[: canvas.index(tok.eot_id)]
        assert all(t == tok.eot_id for t in canvas[len(middle) :])
        pre = tok.decode(ctx[1 : ctx.index(tok.fim_suffix_id)])
        suf = tok.decode(ctx[ctx.index(tok.fim_suffix_id) + 1 : -1])
        whole = pre + tok.decode(middle) + suf
        assert whole in SRC  # prefix + middle + suffix is a contiguous piece of the file


def _record() -> dict:
    before = "".join(f"def g{i}():\n    return old_name({i})\n\n" for i in range(12))
    lines = before.splitlines(keepends=True)
    hunks = [[i * 3 + 1, 1, f"    return new_name({i})\n"] for i in range(12)]
    return {"path": "m.py", "before": before, "hunks": hunks, "lines": lines}


def test_edit_rows_use_the_inference_prompt(tok) -> None:
    rec = _record()
    b = RowBuilder(tok, 512, random.Random(1))
    rows = [r for r in (b.edit(rec) for _ in range(60)) if r]
    assert len(rows) > 20
    unchanged = changed = 0
    for r in rows:
        ctx, canvas = r.ids[: r.context_len], r.ids[r.context_len :]
        assert ctx[-1] == tok.rewrite_id
        p = parse_prompt(tok.decode(ctx[:-1]))
        answer = tok.decode(canvas[: canvas.index(tok.eot_id)])
        assert p.file_path == "m.py"
        if answer == p.region:
            unchanged += 1
        else:
            changed += 1
            assert "new_name" in answer and answer.count("new_name") == p.region.count("new_name") + 1
    assert unchanged > 0 and changed > 0
