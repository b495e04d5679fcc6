"""Synthetic rename examples: the answer renames exactly the code occurrences, never strings."""

from __future__ import annotations

import random
import re

from editserver.model.infer.tokenizer import train_tokenizer
from editserver.model.train.data import RowBuilder
from editserver.model.train.synth import code_mask, new_name, rename_example
from editserver.protocol.prompt import parse_prompt
from tests.conftest import CORPUS

SRC = '''import os


def load_config(path):
    """Read the config at path; a missing file gives an empty config."""
    if not os.path.exists(path):
        return {}
    with open(path) as fh:
        text = fh.read()  # the whole file
    return parse_config(text)


def parse_config(text):
    result = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        result[key.strip()] = value.strip()
    return result


def main():
    settings = load_config("settings.ini")
    print("loaded", len(settings), "settings from load_config")
    return parse_config(str(settings))
'''


def test_code_mask_keeps_offsets_and_hides_strings_and_comments() -> None:
    mask = code_mask(SRC)
    assert len(mask) == len(SRC) and mask.count("\n") == SRC.count("\n")
    assert "missing file" not in mask and "whole file" not in mask and "settings.ini" not in mask
    assert "def load_config(path):" in mask


def test_rename_examples_rename_every_code_occurrence_and_nothing_else() -> None:
    seen = 0
    for seed in range(200):
        ex = rename_example("cfg.py", SRC, random.Random(seed))
        if ex is None:
            continue
        seen += 1
        p, answer = ex
        removed = re.findall(r"^-(?!--).*$", p.history, re.M)
        added = re.findall(r"^\+(?!\+\+).*$", p.history, re.M)
        assert removed and len(removed) == len(added), "the history shows the rename as line edits"
        assert answer != p.region, "the region still holds the old name"
        assert answer.count("\n") == p.region.count("\n")
        assert p.region_with_cursor.count("<|cursor|>") == 1
        # strings and comments never change; the code differs only in renamed identifiers
        assert code_mask(answer).replace(" ", "") != code_mask(p.region).replace(" ", "")
        for a, b in zip(answer.splitlines(), p.region.splitlines()):
            if a != b:
                assert re.findall(r'"[^"]*"', a) == re.findall(r'"[^"]*"', b)
    assert seen > 100


def test_new_names_are_fresh_and_keep_the_case_style() -> None:
    rng = random.Random(0)
    taken = {"load_config", "parse_config", "text"}
    for old in ("load_config", "ParseConfig", "MAX_SIZE", "loadConfig"):
        name = new_name(old, ["read_file", "WriteCache", "value_count"], taken, rng)
        assert name and name != old and name not in taken
        if "_" in old and old.islower():
            assert name == name.lower()
        if old.isupper():
            assert name.isupper()


def test_rename_rows_use_the_inference_prompt() -> None:
    tok = train_tokenizer([*CORPUS, SRC], vocab_size=500)
    b = RowBuilder(tok, 512, random.Random(0))
    rows = [r for r in (b.rename("cfg.py", SRC) for _ in range(30)) if r]
    assert len(rows) > 10
    for r in rows:
        ctx, canvas = r.ids[: r.context_len], r.ids[r.context_len :]
        assert ctx[-1] == tok.rewrite_id and len(r.ids) <= 512
        p = parse_prompt(tok.decode(ctx[:-1]))
        assert p.file_path == "cfg.py" and p.history
        assert tok.decode(canvas[: canvas.index(tok.eot_id)]) != p.region
