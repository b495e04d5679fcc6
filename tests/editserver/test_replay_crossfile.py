"""Cross-file replay points and the quiet case, on hand-made commit records (computed by hand).

One commit renames ``compute`` in lib.py and its uses in use1.py (two hunks) and use2.py (one); a
second commit touches one file only. So: 2 cross-file points (use1.py, use2.py), whose history is
lib.py's diff and whose remaining hunks are all of their file's.
"""

from __future__ import annotations

import json
import lzma
from collections import Counter

import pytest

from editserver.replay.crossfile import commit_points, cross_file_points, quiet_summary
from editserver.replay.harness import ReplayConfig, run
from editserver.replay.points import Options
from tests.editserver.test_replay import Scripted

pytest.importorskip("git")  # test_replay's module needs gitpython

LIB = "import math\n\n\ndef compute(items):\n    return sum(items)\n\n\ndef twice(items):\n    return 2 * compute(items)\n"
USE1 = "from lib import compute\n\n\ndef a(x):\n    y = 1\n    z = 2\n    return compute(x) + y + z\n"
USE2 = "import lib\n\n\ndef b(x):\n    return lib.compute(x)\n"
SHA = "a" * 40


def rec(path, before, hunks, sha=SHA):
    return {"repo": "acme/shop", "sha": sha, "path": path, "lang": "python", "before": before, "hunks": hunks}


RECORDS = [
    rec(
        "lib.py",
        LIB,
        [[3, 1, "def compute_total(items):\n"], [8, 1, "    return 2 * compute_total(items)\n"]],
    ),
    rec(
        "use1.py",
        USE1,
        [[0, 1, "from lib import compute_total\n"], [6, 1, "    return compute_total(x) + y + z\n"]],
    ),
    rec("use2.py", USE2, [[4, 1, "    return lib.compute_total(x)\n"]]),
    rec("other.py", "x = 1\n", [[0, 1, "x = 2\n"]], sha="b" * 40),
]


def test_commit_points_follow_the_rename_from_the_defining_file():
    stats = Counter()
    pts = commit_points(RECORDS[:3], Options(), stats)
    assert [p.path for p in pts] == ["use1.py", "use2.py"]
    assert all(p.where == "cross_file" and p.k == 0 for p in pts)
    assert all("--- lib.py" in p.prompt and "+def compute_total(items):" in p.prompt for p in pts)
    use1 = pts[0]
    assert use1.remaining == [
        (0, 1, "from lib import compute_total\n"),
        (6, 1, "    return compute_total(x) + y + z\n"),
    ]
    assert use1.region == USE1  # a short file: the region is all of it
    assert [p.path for p in cross_file_points(RECORDS, Options(), Counter(), limit=10)] == [
        "use1.py",
        "use2.py",
    ]


@pytest.fixture
def records(tmp_path):
    path = tmp_path / "acme+shop.jsonl.xz"
    with lzma.open(path, "wt", encoding="utf-8") as fh:
        for r in RECORDS:
            fh.write(json.dumps(r) + "\n")
    return path


def cfg(records, **kw) -> ReplayConfig:
    return ReplayConfig(
        records=[str(records)], max_points=50, max_fim=0, progress=False, points=Options(), **kw
    )


def test_cross_file_and_quiet_figures(records):
    right = run(cfg(records), Scripted("right"))
    c = right["cross_file"]
    assert c["requests"] == 2 and c["shown"] == 2 and c["accepted"] == 2 and c["exact"] == 2
    # in-file points of the same records: lib.py and use1.py have two hunks each (k = 1, 2)
    assert right["in_file"]["requests"] == 4 and right["summary"]["requests"] == 6
    q = right["quiet"]  # k = 2: the file is done; a right model says nothing there
    assert q["requests"] == 2 and q["false_alarms"] == 0 and q["silent_rate"] == 1.0
    assert q["silence_precision"] == 1.0
    wrong = run(cfg(records), Scripted("wrong"))["quiet"]
    assert wrong["false_alarms"] == 2 and wrong["silent_rate"] == 0.0 and wrong["silence_precision"] is None
    off = run(cfg(records, max_cross=0), Scripted("right"))
    assert off["cross_file"]["requests"] == 0 and off["summary"]["requests"] == 4


def test_quiet_summary_counts_silence():
    rows = [
        {"reachable": False, "label": "rejected", "above_threshold": True},  # false alarm
        {"reachable": False, "label": "unchanged"},  # right to be silent
        {"reachable": True, "label": "unchanged"},  # silent where work was left
    ]
    q = quiet_summary(rows, None, None)
    assert q == {"requests": 2, "false_alarms": 1, "silent_rate": 0.5, "silence_precision": 0.5}
