"""``editserver bench keystrokes``: a typing replay built from commit records, through two real servers
(context reuse off and on), reporting latency, exact matches and identical answers."""

from __future__ import annotations

import json
import lzma
import subprocess
import sys
from pathlib import Path

import pytest

from editserver.bench.keystrokes import typing_lines

BEFORE = "import os\n\n\ndef main():\n    pass\n"
RECORD = {
    "repo": "jd/tenacity",
    "path": "a.py",
    "lang": "python",
    "before": BEFORE,
    # replace line 4 ("    pass") by two lines; the first one long enough to type
    "hunks": [[4, 1, "    names = sorted(os.listdir('.'))\n    return names\n"]],
}


# a file long enough that a keystroke's context has text to reuse beyond the store's margins
HELPERS = "".join(f"def helper_{i}(x):\n    return x + {i}\n\n\n" for i in range(12))
LONG = "import os\n\n\n" + HELPERS + "def main():\n    pass\n" + HELPERS.replace("helper", "tail")


def _records(d: Path, repo: str = "jd+tenacity", before: str = BEFORE) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    at = before.split("\n").index("    pass")  # hunks count lines from 0
    with lzma.open(d / f"{repo}.jsonl.xz", "wt", encoding="utf-8") as fh:
        fh.write(json.dumps({**RECORD, "before": before, "hunks": [[at, *RECORD["hunks"][0][1:]]]}) + "\n")
    return d


def test_typing_lines_come_from_held_out_records_only(tmp_path):
    edits = _records(tmp_path / "edits")
    [line] = typing_lines(edits, 5, 2, 0)
    assert line.typed == "names = sorted(os.listdir('.'))"
    assert line.above == "\ndef main():\n    "  # two lines above, then the indentation
    assert line.below == "\n    return names\n"
    other = _records(tmp_path / "train", repo="encode+httpx")  # a training repository: never typed
    try:
        typing_lines(other, 5, 2, 0)
    except FileNotFoundError as e:
        assert "held-out" in str(e)
    else:
        raise AssertionError("a training repository's records were typed")


@pytest.mark.parametrize("suffix", [False, True])
def test_bench_keystrokes_compares_reuse_on_and_off(tmp_path, tiny_checkpoint, suffix):
    edits = _records(tmp_path / "edits", before=LONG)
    out = tmp_path / "ks.json"
    cmd = [sys.executable, "-m", "editserver.cli", "bench", "keystrokes", "--edits", str(edits)]
    cmd += ["--model", str(tiny_checkpoint), "--chars", "10", "--max-tokens", "4", "--threads", "1"]
    cmd += ["--prefix-cache-suffix"] * suffix
    r = subprocess.run([*cmd, "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert res["lines"] == 1 and res["requests"] == 3  # stops after 10, 20 and 30 characters
    assert 0.0 <= res["identical"] <= 1.0
    for arm in ("on", "off"):
        assert res[arm]["first_p50_ms"] > 0 and res[arm]["p50_ms"] > 0 and 0 <= res[arm]["exact"] <= 1
    assert "identical answers" in r.stdout
    store = res["store"]  # the reuse server's /health: its later requests reused their contexts
    assert store["suffix"] is suffix and store["hits"] >= 2 and store["reused_tokens"] > 0


def test_bench_keystrokes_without_records_is_one_clear_line(tmp_path):
    cmd = [sys.executable, "-m", "editserver.cli", "bench", "keystrokes", "--edits", str(tmp_path)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "held-out" in r.stderr
