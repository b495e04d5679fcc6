"""``editserver telemetry stats`` as a user runs it (a subprocess), on logs written by the real
``Telemetry`` class, and the rule that turns a log into KTO examples (protocol/telemetry_log.py):
partial accepts, ``editIndex`` into a reply's flat edits, ``applyEdits``' accepts, orphan events,
and suggestions stored without their prompts. ``align --dry-run`` must count what ``stats`` counts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from editserver.lsp.telemetry import Telemetry
from editserver.protocol.telemetry_log import read_telemetry
from tests.lsp.conftest import REPO, quiet_env

FIM = {"prefix": "def area(w, h):\n    return ", "suffix": "\n", "max_tokens": 32, "stop": ["\n"]}
PROMPTS = [f"<|code_to_edit|>\nregion {i}\n<|/code_to_edit|>" for i in range(3)]


def cli(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "editserver.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO, env=quiet_env())


def regions(counts: list[int | None]) -> list[dict]:
    """A next-edit row's regions; ``edits`` is how many of the reply's edits each made (None: an older
    row that does not say)."""
    out = []
    for i, n in enumerate(counts):
        r = {"uri": "file:///geo.py", "region": [i * 5, i * 5 + 2], "rewritten": f"new {i}", "score": 0.9}
        out.append(r if n is None else {**r, "edits": n})
    return out


def write_log(path: Path, keep_prompts: bool = True) -> Path:
    t = Telemetry(str(path), keep_prompts=keep_prompts)

    def fim(sid: str, text: str) -> None:
        t.suggestion(sid, "fim", "file:///geo.py", "python", FIM, text, None)

    fim("whole", "w * h")
    t.event("whole", "show")
    t.event("whole", "accept")  # the item's command
    fim("words", "w * h + 1")
    t.event("words", "show")
    t.event("words", "accept", None, "word", "w")
    t.event("words", "accept", None, "word", " *")  # pieces: desirable "w *"
    fim("typed", "w * h")
    t.event("typed", "accept", None, "word", " h")  # "w *" typed through: desirable "w * h"
    fim("refused", "h - w")
    t.event("refused", "show")
    t.event("refused", "reject")
    fim("ignored", "w")
    t.event("ignored", "show")  # shown, never accepted: undesirable
    fim("unseen", "0")  # no event: no signal

    def edit(sid: str, counts: list[int | None]) -> None:
        prompt = {"prompts": PROMPTS[: len(counts)]}
        t.suggestion(sid, "next_edit", "file:///geo.py", "python", prompt, regions(counts), 0.9)

    # flat edits 0 | 1 2 | 3: edits 1 and 2 are region 1's; applyEdits names region 2's first edit
    edit("multi", [1, 2, 1])
    t.event("multi", "show")
    t.event("multi", "accept", 1)
    t.event("multi", "accept", 2)
    t.event("multi", "accept", 3)
    t.event("multi", "reject")
    edit("old", [None, None])  # a row without counts: the index is the region's
    t.event("old", "show")
    t.event("old", "accept", 1)
    edit("part", [1, 1])
    t.event("part", "show")
    t.event("part", "accept", 0, "word", "new")
    t.event("part", "reject")
    edit("noindex", [1, 1])  # an older server's applyEdits: the accept names no edit
    t.event("noindex", "show")
    t.event("noindex", "accept")
    edit("declined", [1])
    t.event("declined", "show")
    t.event("declined", "reject")
    t.event("gone", "accept", 0)  # a suggestion the log does not hold
    t.close()
    return path


def test_the_rule_per_region_and_partial(tmp_path):
    stats: Counter = Counter()
    got = [
        (e.kind, e.desirable, e.answer, e.source) for e in read_telemetry(write_log(tmp_path / "t"), stats)
    ]
    assert got == [
        ("fim", True, "w * h", "telemetry:accept"),
        ("fim", True, "w *", "telemetry:partial"),
        ("fim", True, "w * h", "telemetry:partial"),
        ("fim", False, "h - w", "telemetry:reject"),
        ("fim", False, "w", "telemetry:reject"),
        # multi: region 0 offered and not taken; region 1 once for its two edits; region 2 applied
        ("edit", False, "new 0", "telemetry:reject"),
        ("edit", True, "new 1", "telemetry:accept"),
        ("edit", True, "new 2", "telemetry:accept"),
        ("edit", False, "new 0", "telemetry:reject"),  # old
        ("edit", True, "new 1", "telemetry:accept"),
        ("edit", False, "new 1", "telemetry:reject"),  # part: region 0 taken in part, no example
        ("edit", False, "new 0", "telemetry:reject"),  # declined
    ]
    assert [e.prompt for e in read_telemetry(tmp_path / "t") if e.kind == "edit"][:3] == PROMPTS
    assert stats["telemetry_edit_taken_in_part"] == 1 and stats["telemetry_accept_unplaced"] == 1


def test_stats_counts_what_align_reads(tmp_path):
    log = write_log(tmp_path / "t.sqlite3")
    p = cli("telemetry", "stats", "--path", str(log), "--json")
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["exists"] is True and got["events"] == 24 and got["events_without_suggestion"] == 1
    assert got["kinds"]["fim"] == {
        "suggestions": 6,
        "shown": 4,
        "accepted": 1,
        "partially_accepted": 2,
        "rejected": 1,
        "without_prompts": 0,
        "examples": {"desirable": 3, "undesirable": 2},
    }
    assert got["kinds"]["next_edit"] == {
        "suggestions": 5,
        "shown": 5,
        "accepted": 3,
        "partially_accepted": 1,
        "rejected": 1,
        "without_prompts": 0,
        "examples": {"desirable": 3, "undesirable": 4},
    }
    text = cli("telemetry", "stats", "--path", str(log))
    assert text.returncode == 0 and "align can use 12 examples" in text.stdout
    assert (
        "fewer than 50 events" in text.stdout
        and "1 event name suggestions the log does not hold" in text.stdout
    )
    assert "keepPrompts" not in text.stdout
    # align reads the same log the same way
    dry = cli("align", "--telemetry", str(log), "--dry-run", "--min-events", "1")
    assert dry.returncode == 0, dry.stderr
    assert "  fim: 3 desirable, 2 undesirable\n" in dry.stdout
    assert "  next edit: 3 desirable, 4 undesirable\n" in dry.stdout and "nothing trained" in dry.stdout


def test_stats_says_prompts_were_not_kept_and_which_setting_keeps_them(tmp_path):
    log = write_log(tmp_path / "bare.sqlite3", keep_prompts=False)
    p = cli("telemetry", "stats", "--path", str(log), "--json")
    kinds = json.loads(p.stdout)["kinds"]
    assert kinds["fim"]["without_prompts"] == 5 and kinds["next_edit"]["without_prompts"] == 5
    assert all(k["examples"] == {"desirable": 0, "undesirable": 0} for k in kinds.values())
    text = cli("telemetry", "stats", "--path", str(log)).stdout
    assert "10 suggestions with events kept no prompt" in text
    for setting in ("telemetry.keepPrompts", "editserver.telemetry.keepPrompts", "keep_prompts = true"):
        assert setting in text, setting


@pytest.mark.parametrize("as_json", [False, True])
def test_missing_file_is_one_line_and_status_0(tmp_path, as_json):
    missing = tmp_path / "none.sqlite3"
    p = cli("telemetry", "stats", "--path", str(missing), *(["--json"] if as_json else []))
    assert p.returncode == 0
    message = p.stderr if as_json else p.stdout
    assert message == f"no telemetry file at {missing}\n"
    if as_json:
        assert json.loads(p.stdout) == {"path": str(missing), "exists": False}
    assert not missing.exists()  # stats never creates the file


def test_a_file_that_is_not_a_log_is_one_line_and_status_2(tmp_path):
    junk = tmp_path / "junk.sqlite3"
    junk.write_text("not a database\n")
    p = cli("telemetry", "stats", "--path", str(junk))
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "not an editserver telemetry file" in p.stderr
