"""The rename benchmark: examples from held-out files only, scoring, and the command end to end."""

from __future__ import annotations

import json
import lzma
import subprocess
import sys

from editserver.bench.renames import _renamed, examples

SRC = "".join(f"def helper_{i}(value):\n    total = value + {i}\n    return total\n\n" for i in range(8))


def _write(path, repo: str) -> None:
    with lzma.open(path, "wt", encoding="utf-8") as fh:
        for i in range(5):
            rec = {"repo": repo, "path": f"pkg/m{i}.py", "before": SRC, "hunks": [[0, 1, "x = 1\n"]]}
            fh.write(json.dumps(rec) + "\n")


def test_examples_come_from_held_out_files_only(tmp_path) -> None:
    _write(tmp_path / "pallets+click.jsonl.xz", "pallets/click")  # held out
    _write(tmp_path / "psf+requests.jsonl.xz", "psf/requests")  # trained on
    exs = examples(tmp_path, 50, 0, 400)
    assert 0 < len(exs) <= 5, "one example per held-out file, none from training repositories"
    for p, answer, old, new in exs:
        assert old in p.region and new in answer and old != new


def test_renamed_finds_the_one_changed_identifier() -> None:
    assert _renamed("    total = value + 1", "    total = amount + 1") == ("value", "amount")
    assert _renamed("a = b", "c = d") is None
    assert _renamed("a = b", "a = b + 1") is None


def test_bench_renames_end_to_end(tiny_checkpoint, tmp_path) -> None:
    _write(tmp_path / "pallets+click.jsonl.xz", "pallets/click")
    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "editserver.cli", "bench", "renames", "--edits", str(tmp_path)]
    r = subprocess.run(
        [*cmd, "--model", str(tiny_checkpoint), "--limit", "3", "--effort", "low", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(out.read_text())
    assert d["n"] == len(d["samples"]) > 0 and d["effort"] == "low"
    for k in ("exact_match", "draft_exact", "propagated", "changed", "shown"):
        assert 0.0 <= d[k] <= 1.0
    assert d["latency_ms"]["p50"] > 0 and "propagated" in r.stdout
    bad = subprocess.run(
        [*cmd, "--model", str(tiny_checkpoint), "--effort", "fast"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "got 'fast'" in bad.stdout
    missing = subprocess.run([*cmd[:-1], str(tmp_path / "nope")], capture_output=True, text=True)
    assert missing.returncode == 2 and "not found" in missing.stdout
    no_model = subprocess.run([*cmd, "--model", str(tmp_path / "nope")], capture_output=True, text=True)
    assert no_model.returncode == 2 and "not a checkpoint directory" in no_model.stdout
    assert "Traceback" not in no_model.stderr
