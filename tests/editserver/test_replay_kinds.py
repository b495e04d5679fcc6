"""Next-edit thresholds per kind (editserver/replay/kinds.py), on hand-made commit records.

Each commit renames ``computeN`` in libN.py (three hunks) and in useN_1..3.py (two hunks each), so
one commit gives 9 in-file points (5 with the next hunk in the region, 4 with the file done: quiet)
and 3 cross-file points (every use file, its region the whole file). The scripted source answers
the developer's next hunk where there is one and a wrong rewrite where there is none, with scores
that depend on the kind: in-file right 0.9, wrong 0.6; cross-file right 0.5. So the in-file points
want a threshold in (0.6, 0.9] and the cross-file points one at or below 0.5, and the joint one
(over all points) sits where the cross-file points are shown, which shows the in-file wrong ones.
"""

from __future__ import annotations

import json
import lzma
import shutil

import pytest

from editserver.cli.replay import print_summary
from editserver.replay import kinds
from editserver.replay.harness import ReplayConfig, run
from editserver.replay.points import Options
from editserver.replay.report import markdown, render
from editserver.replay.suggest import EditAnswer
from tests.editserver.test_replay import WRONG, Scripted, right_region
from tests.editserver.test_replay_crossfile import RECORDS

pytest.importorskip("git")  # test_replay's module needs gitpython

SCORES = {
    ("in_file", True): 0.9,
    ("in_file", False): 0.6,
    ("cross_file", True): 0.5,
    ("cross_file", False): 0.2,
}


def commit_records(repo: str, n: int) -> list[dict]:
    sha = f"{n:x}" * 40
    name, new = f"compute{n}", f"total{n}"
    lib = f"def {name}(items):\n    return sum(items)\n\n\ndef twice(items):\n    return 2 * {name}(items)\n"
    lib += f"\n\ndef thrice(items):\n    return 3 * {name}(items)\n"
    out = [
        {
            "repo": repo,
            "sha": sha,
            "path": f"lib{n}.py",
            "lang": "python",
            "before": lib,
            "hunks": [
                [0, 1, f"def {new}(items):\n"],
                [5, 1, f"    return 2 * {new}(items)\n"],
                [9, 1, f"    return 3 * {new}(items)\n"],
            ],
        }
    ]
    for j in (1, 2, 3):
        use = f"from lib{n} import {name}\n\n\ndef a{j}(x):\n    return {name}(x) + {j}\n"
        hunks = [[0, 1, f"from lib{n} import {new}\n"], [4, 1, f"    return {new}(x) + {j}\n"]]
        out.append(
            {
                "repo": repo,
                "sha": sha,
                "path": f"use{n}_{j}.py",
                "lang": "python",
                "before": use,
                "hunks": hunks,
            }
        )
    return out


def write(path, records: list[dict]):
    with lzma.open(path, "wt", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")
    return path


class ByKind(Scripted):
    """Right where the developer's next hunk is in the region, wrong elsewhere; scored by kind."""

    def __init__(self):
        super().__init__("mixed")

    def edit(self, points):
        out = []
        for p in points:
            right = right_region(p)
            good = right != p.region
            score = SCORES[(p.where, good)]
            out.append(EditAnswer(right if good else p.region + WRONG, score, {"mean": score}, True, 1.0))
        return out


@pytest.fixture
def records(tmp_path):
    train = write(
        tmp_path / "acme+train.jsonl.xz", commit_records("acme/train", 1) + commit_records("acme/train", 2)
    )
    held = write(tmp_path / "acme+held.jsonl.xz", commit_records("acme/held", 3))
    return train, held


def cfg(records, tune, **kw) -> ReplayConfig:
    return ReplayConfig(
        records=[str(records)],
        tune_records=[str(tune)],
        max_fim=0,
        tune_fim=0,
        progress=False,
        points=Options(),
        **kw,
    )


def test_kinds_with_different_scores_get_different_thresholds(records, tmp_path, tiny_checkpoint, capsys):
    train, held = records
    ck = tmp_path / "ck"
    shutil.copytree(tiny_checkpoint, ck)
    md = tmp_path / "r.md"
    r = run(
        cfg(
            held,
            train,
            model=str(ck),
            write_config=True,
            json_out=str(tmp_path / "r.json"),
            markdown_out=str(md),
        ),
        ByKind(),
    )
    t = r["tuning"]
    # joint over 24 training points (10 in-file right, 8 in-file wrong, 6 cross-file right): showing
    # everything at or above the cross-file 0.5 pays best, plateau 0.00-0.50, middle 0.25
    assert t["chosen"]["selectivity_threshold"] == 0.25 and t["chosen"]["score_aggregate"] == "mean"
    inf, cross = t["per_kind"]["in_file"], t["per_kind"]["cross_file"]
    assert (inf["requests"], inf["accepted"], inf["quiet"], inf["tuned"]) == (18, 10, 8, True)
    assert (cross["requests"], cross["accepted"], cross["tuned"]) == (6, 6, True)
    # in-file: only the right ones shown on 0.61-0.90 (middle 0.75); cross-file: 0.00-0.50 (0.25)
    assert inf["threshold"] == 0.75 and cross["threshold"] == 0.25
    assert inf["utility"] == pytest.approx(0.75 * 10 / 18) and inf["joint_utility"] == pytest.approx(
        (7.5 - 2) / 18
    )
    saved = json.loads((ck / "config.json").read_text())["inference"]
    assert (saved["selectivity_threshold"], saved["in_file_threshold"], saved["cross_file_threshold"]) == (
        0.25,
        0.75,
        0.25,
    )
    from editserver.model.infer.loader import load_checkpoint

    inference = load_checkpoint(ck).inference
    assert (
        inference.edit_threshold(cross_file=False) == 0.75
        and inference.edit_threshold(cross_file=True) == 0.25
    )

    # held out (acme/held, never tuned on): 5 in-file right, 4 in-file wrong, 3 cross-file right
    assert r["summary"]["threshold"] == {"in_file": 0.75, "cross_file": 0.25}
    pk = r["per_kind"]
    assert [pk["in_file"]["joint"][k] for k in ("requests", "shown", "accepted")] == [9, 9, 5]
    assert [pk["in_file"]["per_kind"][k] for k in ("requests", "shown", "accepted")] == [9, 5, 5]
    assert pk["in_file"]["joint"]["utility"] == pytest.approx((0.75 * 5 - 0.25 * 4) / 9)
    assert pk["in_file"]["per_kind"]["utility"] == pytest.approx(0.75 * 5 / 9)
    assert [pk["cross_file"]["per_kind"][k] for k in ("requests", "shown", "accepted")] == [3, 3, 3]
    assert r["summary"]["shown"] == 8 and r["in_file"]["shown"] == 5  # the per-kind rule is in force

    # the same rows in every output: Markdown, HTML, the CLI summary
    text = md.read_text()
    assert "| in-file, joint 0.25 | 9 | 9 | 5 | 55.6% | +0.306 |" in text
    assert "| in-file, per kind 0.75 | 9 | 5 | 5 | 100.0% | +0.417 |" in text
    assert "| cross-file, per kind 0.25 | 3 | 3 | 3 | 100.0% | +0.750 |" in text
    assert "in-file (18 points, 8 quiet, 10 accepted): mean >= 0.75" in text
    html = (tmp_path / "r.html").read_text()
    assert "<td>in-file, per kind 0.75</td><td>9</td><td>5</td><td>5</td>" in html
    assert "in-file 0.75 · cross-file 0.25" in html  # the threshold in force
    print_summary(r)
    out = capsys.readouterr().out
    assert "  in-file, joint 0.25: 9 points · shown 9 · accepted 5 · acceptance 55.6% · utility +0.306" in out
    assert (
        "  in-file, per kind 0.75: 9 points · shown 5 · accepted 5 · acceptance 100.0% · utility +0.417"
        in out
    )


def test_a_kind_with_too_few_acceptances_keeps_the_joint_threshold_and_says_so(records, tmp_path, capsys):
    """Tuned on the cross-file test's records: 2 cross-file points and 4 in-file ones, 2 accepted each."""
    _, held = records
    tune = write(tmp_path / "acme+few.jsonl.xz", RECORDS)
    md = tmp_path / "r.md"
    r = run(cfg(held, tune, json_out=str(tmp_path / "r.json"), markdown_out=str(md)), ByKind())
    t = r["tuning"]
    joint = t["chosen"]["selectivity_threshold"]
    for kind in kinds.KINDS:
        k = t["per_kind"][kind]
        assert k["accepted"] < kinds.MIN_ACCEPTED and k["tuned"] is False and k["threshold"] == joint
        assert k["fallback"] == f"{k['accepted']} accepted among {k['requests']} tuning points, fewer than 5"
    assert r["summary"]["threshold"] == joint  # both kinds keep it: one number, as before
    said = f"cross-file (2 points, 0 quiet, 2 accepted): keeps the joint threshold {joint:.2f}: 2 accepted"
    assert said in md.read_text() and said in render(r)
    print_summary(r)
    assert said in capsys.readouterr().out


def test_rule_collapses_equal_thresholds_and_rows_take_their_kinds():
    assert kinds.rule({"in_file": 0.5, "cross_file": 0.5}) == 0.5
    rows = [
        {"label": "accepted", "score": 0.6, "where": "in_file"},
        {"label": "accepted", "score": 0.6, "where": "cross_file"},
        {"label": "rejected", "score": 0.6},  # logged before kinds: in-file
    ]
    s = kinds.compare(rows, 0.5, kinds.rule({"in_file": 0.7, "cross_file": 0.5}), None)
    assert (s["in_file"]["joint"]["shown"], s["in_file"]["per_kind"]["shown"]) == (2, 0)
    assert (s["cross_file"]["joint"]["shown"], s["cross_file"]["per_kind"]["shown"]) == (1, 1)
    assert kinds.compare(rows, None, None, None)["in_file"]["joint"] is None
    assert markdown({"summary": {"threshold": None}, "per_kind": {}}).startswith(
        "Threshold in force: server decides"
    )
