"""editserver replay on real git repositories built in a temp dir, with scripted suggesters.

The repositories hold known edit sequences (a rename at three call sites, a parameter threaded
through a call chain, a JavaScript rename in a second repository), small enough that every editable
region covers the whole file, so each metric below is computed by hand:

    10 edit points: app.py 4 (3 with hunks left), chain.py 3 (2), util.js 3 (2); 7 with work left.
"""

from __future__ import annotations

import json
import lzma
import shutil
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest

git = pytest.importorskip("git")

from editserver.model.train.gitmine import mine_repo  # noqa: E402
from editserver.replay.harness import ReplayConfig, collect, run  # noqa: E402
from editserver.replay.points import Options  # noqa: E402
from editserver.replay.suggest import EditAnswer, FimAnswer  # noqa: E402

ME = git.Actor("Dev", "dev@example.com")

APP = """def report(cart):
    value = compute_total(cart.items)
    print("total", value)


def checkout(cart):
    return compute_total(cart.items) * 1.2


def compute_total(items):
    return sum(item.price for item in items)


def refund(cart):
    return -compute_total(cart.items)
"""
CHAIN = """def main():
    print(run(load()))


def run(data):
    return process(data)


def process(data):
    return [x * 2 for x in data]
"""
CHAIN_AFTER = """def main():
    print(run(load(), 3))


def run(data, scale):
    return process(data, scale)


def process(data, scale):
    return [x * scale for x in data]
"""
UTIL = """function fetchUser(id) {
  return db.get(id);
}

export function show(id) {
  const u = fetchUser(id);
  return u.name;
}

export function exists(id) {
  return fetchUser(id) !== null;
}
"""


def commit(repo: git.Repo, msg: str, files: dict, when: int) -> None:
    root = Path(repo.working_tree_dir)
    for name, data in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data if isinstance(data, bytes) else data.encode())
    repo.index.add(list(files))
    date = datetime(2024, 3, 1, 9, 0, when, tzinfo=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S +0000")
    repo.index.commit(msg, author=ME, committer=ME, author_date=date, commit_date=date)


def build_repos(root: Path) -> tuple[Path, Path]:
    shop = git.Repo.init(root / "shop")
    shop.create_remote("origin", "https://example.com/acme/shop.git")
    commit(shop, "initial", {"app.py": APP, "chain.py": CHAIN}, 1)
    commit(
        shop, "Rename compute_total to sum_prices", {"app.py": APP.replace("compute_total", "sum_prices")}, 2
    )
    commit(shop, "Thread a scale parameter through the chain", {"chain.py": CHAIN_AFTER}, 3)
    # history that must be skipped and counted, never crash the replay
    commit(shop, "vendored blobs", {"blob.py": b"\x00\x01binary\n", "huge.py": "x = 1\n" * 15_000}, 4)
    commit(shop, "mass reformat", {f"gen/m{i}.py": f"v = {i}\n" for i in range(120)}, 5)
    commit(shop, "touch blobs", {"blob.py": b"\x00\x02binary\n", "huge.py": "x = 2\n" * 15_000}, 6)
    web = git.Repo.init(root / "web")
    web.create_remote("origin", "git@example.com:acme/web.git")
    commit(web, "initial", {"util.js": UTIL}, 1)
    commit(web, "Rename fetchUser to loadUser", {"util.js": UTIL.replace("fetchUser", "loadUser")}, 2)
    return Path(shop.working_tree_dir), Path(web.working_tree_dir)


def write_records(repo: Path, out: Path) -> Path:
    with lzma.open(out, "wt", encoding="utf-8") as fh:
        for rec in mine_repo(repo, max_commits=None):
            fh.write(json.dumps(rec) + "\n")
    return out


@pytest.fixture(scope="module")
def repos(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("replay-repos")
    shop, web = build_repos(root)
    return {
        "shop": shop,
        "web": web,
        "shop_records": write_records(shop, root / "acme+shop.jsonl.xz"),
        "web_records": write_records(web, root / "acme+web.jsonl.xz"),
    }


# ---- scripted suggesters ---------------------------------------------------------------------
def right_region(p) -> str:
    """The region with the first remaining hunk inside it applied (what the developer did next)."""
    for s, n, text in p.remaining:
        if p.lo <= s and s + n <= p.hi:
            lines = p.lines[p.lo : p.hi]
            lines[s - p.lo : s - p.lo + n] = text.splitlines(keepends=True)
            return "".join(lines)
    return p.region


WRONG = "~~~ not what anyone wrote ~~~\n"


class Scripted:
    """``mode``: right | wrong | silent | mixed (right where work is left, wrong elsewhere).

    ``fim_mode``: right | half | empty | mixed (right at a line's start, wrong mid-line; "min"
    separates them, 0.9 against 0.6, "mean" does not)."""

    name = "scripted"
    score_aggregate = "mean"
    threshold = 0.0
    fim_threshold = 0.0

    def __init__(self, mode: str, fim_mode: str = "right", interrupt_after: int | None = None):
        self.mode, self.fim_mode, self.interrupt_after = mode, fim_mode, interrupt_after
        self.edit_calls = self.fim_calls = 0

    def edit(self, points):
        out = []
        for p in points:
            if self.interrupt_after is not None and self.edit_calls >= self.interrupt_after:
                raise KeyboardInterrupt
            self.edit_calls += 1
            right = right_region(p)
            if self.mode == "silent":
                out.append(EditAnswer(p.region, 0.5, {"mean": 0.5}, False, 1.0))
            elif self.mode == "right":
                out.append(EditAnswer(right, 0.9, {"mean": 0.9}, True, 2.0))
            elif self.mode == "wrong":
                out.append(EditAnswer(p.region + WRONG, 0.9, {"mean": 0.9}, True, 3.0))
            else:  # mixed: "min" separates right from wrong, "mean" does not
                good = right != p.region
                text = right if good else p.region + WRONG
                score = {"mean": 0.5, "min": 0.8 if good else 0.3}
                out.append(EditAnswer(text, 0.5, score, True, 4.0))
        return out

    def fim(self, points):
        self.fim_calls += len(points)
        if self.fim_mode == "right":
            return [FimAnswer(p.expected + "\nmore()", 1.0) for p in points]
        if self.fim_mode == "half":
            return [FimAnswer(p.expected[: len(p.expected) // 2] + "\u00a7", 1.0) for p in points]
        if self.fim_mode == "mixed":
            out = []
            for p in points:
                good = p.position == "start"
                text = p.expected if good else p.expected + "\u00a7"
                out.append(FimAnswer(text, 1.0, None, 0.5, {"mean": 0.5, "min": 0.9 if good else 0.6}, True))
            return out
        return [FimAnswer("", 1.0) for p in points]


def config(r, **kw) -> ReplayConfig:
    base = dict(
        repos=[str(r["shop"]), str(r["web"])],
        max_commits=None,
        max_points=100,
        max_fim=100,
        progress=False,
        points=Options(seed=0),
    )
    base.update(kw)
    return ReplayConfig(**base)


# ---- the walk --------------------------------------------------------------------------------
def test_walk_orders_hunks_like_a_developer_and_counts_skips(repos):
    stats = Counter()
    edits, fims, _, _ = collect(config(repos), stats)
    by_file = {}
    for p in edits:
        by_file.setdefault(p.path, []).append(p)
    assert {k: len(v) for k, v in by_file.items()} == {"app.py": 4, "chain.py": 3, "util.js": 3}
    # the parameter is added to the callee first, then each caller up the chain
    chain = by_file["chain.py"]
    assert [p.last_edit[0] for p in chain] == [9, 5, 1]
    assert "def process(data, scale):" in chain[0].prompt.split("<|edit_diff_history|>")[1]
    # the rename starts at the definition (third in the file), then the call sites in file order
    assert [p.last_edit[0] for p in by_file["app.py"]] == [9, 1, 6, 14]
    assert [len(p.remaining) for p in by_file["app.py"]] == [3, 2, 1, 0]
    # the history is the LSP's diff format, oldest first, and the cursor sits at the last edit
    p = by_file["app.py"][2]
    hist = p.prompt.split("<|edit_diff_history|>\n")[1]
    assert hist.startswith("--- app.py\n+++ app.py\n@@ ") and hist.count("--- app.py") == 3
    assert "<|cursor|>" in p.prompt and p.region[p.cursor - 1 : p.cursor] == "2"  # end of "* 1.2"
    assert {p.repo for p in edits} == {"acme/shop", "acme/web"}
    assert len(fims) == 6 and {f.position for f in fims} == {"start", "mid"}
    assert stats["binary"] == 1 and stats["huge"] == 1 and stats["commit_too_many_files"] == 1
    assert stats["root_commit"] == 2


def test_records_files_replay_the_same_walk_as_the_repositories(repos):
    a, fa, _, _ = collect(config(repos), Counter())
    b, fb, _, _ = collect(
        config(repos, repos=[], records=[str(repos["shop_records"]), str(repos["web_records"])]), Counter()
    )
    key = lambda ps: sorted((p.id, p.prompt) for p in ps)  # noqa: E731
    assert key(a) == key(b)
    assert sorted(f.id for f in fa) == sorted(f.id for f in fb)


def test_walk_is_deterministic_with_a_seed_and_last_n_walks_the_newest(repos):
    one, _, _, _ = collect(config(repos, sample=1, points=Options(seed=3)), Counter())
    two, _, _, _ = collect(config(repos, sample=1, points=Options(seed=3)), Counter())
    assert [p.prompt for p in one] == [p.prompt for p in two]
    last, _, _, _ = collect(config(repos, repos=[str(repos["shop"])], max_commits=1), Counter())
    assert last == []  # the newest commit only touches skipped files


# ---- metrics on hand-computable cases ---------------------------------------------------------
def test_always_right_is_fully_accepted(repos):
    r = run(config(repos), Scripted("right"))
    s = r["summary"]
    assert s["requests"] == 10 and s["shown"] == 7 and s["accepted"] == 7 and s["reachable"] == 7
    assert s["acceptance_rate"] == 1.0 and s["shown_rate"] == pytest.approx(0.7)
    assert s["exact_match_rate"] == pytest.approx(0.7) and s["kept_rate"] == 1.0
    assert s["utility"] == pytest.approx(0.75 * 7 / 10)
    assert s["latency_ms"] == {"p50": 2.0, "p95": 2.0}
    assert r["by_language"]["python"]["requests"] == 7 and r["by_language"]["javascript"]["requests"] == 3
    assert (
        r["by_repository"]["acme/web"]["accepted"] == 2 and r["by_repository"]["acme/shop"]["accepted"] == 5
    )
    f = r["fim"]["summary"]
    assert f["requests"] == 6 and f["exact_match_rate"] == 1.0 and f["accepted_prefix_fraction"] == 1.0
    assert f["shown_rate"] == 1.0 and f["exact_among_shown"] == 1.0 and f["utility"] == 0.75
    assert {x["label"] for x in r["fim_completions"]} == {"accepted"}


def test_always_wrong_is_never_accepted(repos):
    r = run(config(repos), Scripted("wrong", fim_mode="empty"))
    s = r["summary"]
    assert s["shown_rate"] == 1.0 and s["acceptance_rate"] == 0.0 and s["exact_match_rate"] == 0.0
    assert s["kept_rate"] == 0.0 and s["utility"] == pytest.approx(-0.25)
    assert {x["label"] for x in r["suggestions"]} == {"rejected"}
    f = r["fim"]["summary"]
    assert f["exact_match_rate"] == 0.0 and f["accepted_prefix_chars"] == 0.0
    # a blank completion is nothing shown, not a wrong one: it costs nothing
    assert f["shown_rate"] == 0.0 and f["exact_among_shown"] is None and f["utility"] == 0.0


def test_silent_is_never_shown(repos):
    r = run(config(repos), Scripted("silent", fim_mode="half"))
    s = r["summary"]
    assert s["shown_rate"] == 0.0 and s["acceptance_rate"] is None and s["utility"] == 0.0
    assert s["kept_rate"] is None and {x["label"] for x in r["suggestions"]} == {"unchanged"}
    f = r["fim"]
    expect = sum(len(x["expected"].rstrip()) // 2 for x in r["fim_completions"]) / 6
    assert f["summary"]["accepted_prefix_chars"] == pytest.approx(expect)
    assert f["summary"]["exact_match_rate"] == 0.0 and set(f["by_position"]) == {"mid", "start"}
    assert f["summary"]["shown_rate"] == 1.0 and f["summary"]["utility"] == pytest.approx(-0.25)


def test_threshold_in_force_suppresses_and_sweep_matches(repos):
    r = run(config(repos, threshold=0.95), Scripted("right"))
    assert r["summary"]["shown"] == 0 and r["summary"]["threshold"] == 0.95
    curve = {c["threshold"]: c for c in r["sweep"]}
    assert curve[0.9]["shown_rate"] == pytest.approx(0.7) and curve[0.91]["shown_rate"] == 0.0


def tuning_config(repos, tmp_path, tiny_checkpoint, **extra):
    """A copy of the tiny checkpoint, and a config that tunes on acme/web, replays acme/shop and
    writes the tuned thresholds into that copy."""
    ck = tmp_path / "ck"
    shutil.copytree(tiny_checkpoint, ck)
    cfg = config(
        repos,
        repos=[str(repos["shop"])],
        tune_records=[str(repos["web_records"])],
        model=str(ck),
        write_config=True,
        **extra,
    )
    return ck, cfg


def test_tuning_chooses_aggregate_and_threshold_on_training_repos_and_writes_config(
    repos, tmp_path, tiny_checkpoint
):
    ck, cfg = tuning_config(repos, tmp_path, tiny_checkpoint)
    r = run(cfg, Scripted("mixed"))
    t = r["tuning"]
    # web: 2 right (min 0.8), 1 wrong (min 0.3); "mean" is 0.5 for all and cannot separate them
    assert t["aggregates"]["min"]["auc"] == 1.0 and t["aggregates"]["mean"]["auc"] == 0.5
    assert t["aggregates"]["mean"]["best_utility"] == pytest.approx((0.75 * 2 - 0.25) / 3)
    assert t["chosen"] == {
        "score_aggregate": "min",
        "selectivity_threshold": 0.55,
        "utility": pytest.approx(0.5),
    }
    # validated on the other repository with the tuned threshold: the 2 wrong finals are suppressed
    s = r["summary"]
    assert (s["requests"], s["shown"], s["accepted"], s["threshold"]) == (7, 5, 5, 0.55)
    assert len(r["tune_suggestions"]) == 3 and {x["phase"] for x in r["tune_suggestions"]} == {"tune"}
    saved = json.loads((ck / "config.json").read_text())["inference"]
    assert saved["selectivity_threshold"] == 0.55 and saved["score_aggregate"] == "min"
    from editserver.model.infer.loader import load_checkpoint

    assert load_checkpoint(ck).inference.selectivity_threshold == 0.55


def test_fim_threshold_is_tuned_on_training_repos_applied_to_held_out_and_written(
    repos, tmp_path, tiny_checkpoint
):
    md = tmp_path / "r.md"
    ck, cfg = tuning_config(
        repos, tmp_path, tiny_checkpoint, json_out=str(tmp_path / "r.json"), markdown_out=str(md)
    )
    r = run(cfg, Scripted("mixed", fim_mode="mixed"))
    ft = r["tuning"]["fim"]
    # web: one right completion (min 0.9) and one wrong (min 0.6), swept on the aggregate the edits
    # chose ("min"; "mean" is 0.5 for both); best utility on 0.61-0.90, whose middle is 0.75
    assert ft["score_aggregate"] == r["tuning"]["chosen"]["score_aggregate"] == "min"
    assert ft["auc"] == 1.0 and ft["chosen"] == {"fim_threshold": 0.75, "utility": pytest.approx(0.375)}
    assert ft["summary_untuned"]["requests"] == 2 and ft["summary_untuned"]["utility"] == pytest.approx(0.25)
    tuned_on = r["tune_fim_completions"]
    assert len(tuned_on) == 2 and {(x["phase"], x["repo"]) for x in tuned_on} == {("tune", "acme/web")}
    # held out (shop, never tuned on): two right at a line's start, two wrong mid-line
    f = r["fim"]["summary"]
    assert (f["requests"], f["shown"], f["threshold"], f["score_aggregate"]) == (4, 2, 0.75, "min")
    assert f["exact_match_rate"] == 0.5 and f["exact_among_shown"] == 1.0
    assert f["utility"] == pytest.approx(0.75 * 2 / 4)
    assert all(x["shown"] == (x["position"] == "start") for x in r["fim_completions"])
    assert {x["repo"] for x in r["fim_completions"]} == {"acme/shop"}
    saved = json.loads((ck / "config.json").read_text())["inference"]
    assert saved["fim_threshold"] == 0.75 and saved["selectivity_threshold"] == 0.55
    from editserver.model.infer.loader import load_checkpoint

    assert load_checkpoint(ck).inference.fim_threshold == 0.75
    assert "**FIM tuning**" in md.read_text() and "min >= 0.75" in md.read_text()
    html = (tmp_path / "r.html").read_text()
    assert "FIM threshold" in html and "exact among shown" in html


def test_fim_threshold_flag_else_the_sources_own(repos):
    r = run(config(repos, fim_threshold=0.7, aggregate="min"), Scripted("right", fim_mode="mixed"))
    f = r["fim"]
    assert (f["summary"]["shown"], f["summary"]["threshold"], f["summary"]["exact_among_shown"]) == (
        3,
        0.7,
        1.0,
    )
    curve = {c["threshold"]: c for c in f["sweep"]}
    assert curve[0.6]["shown_rate"] == 1.0 and curve[0.61]["shown_rate"] == 0.5
    assert curve[0.91]["shown_rate"] == 0.0 and curve[0.61]["utility"] == pytest.approx(0.375)
    r = run(config(repos), Scripted("right", fim_mode="mixed"))
    assert (r["fim"]["summary"]["threshold"], r["fim"]["summary"]["shown"]) == (0.0, 6)
    assert r["tuning"] is None


def test_json_output_report_and_resume_after_interrupt(repos, tmp_path):
    out = tmp_path / "run" / "replay.json"
    first = Scripted("right", interrupt_after=4)
    partial = run(config(repos, json_out=str(out)), first)
    assert partial["complete"] is False and partial["summary"]["requests"] == 4
    assert json.loads(out.read_text())["complete"] is False
    log_rows = out.with_suffix(".log.jsonl").read_text().splitlines()
    assert len(log_rows) == 1 + 4  # header + every finished request
    again = Scripted("right")
    done = run(config(repos, json_out=str(out), resume=True, markdown_out=str(tmp_path / "r.md")), again)
    assert again.edit_calls == 6 and done["complete"] is True
    fresh = run(config(repos), Scripted("right"))
    assert done["summary"] == fresh["summary"] and done["fim"] == fresh["fim"]
    doc = json.loads(out.read_text())
    for key in (
        "requests",
        "shown_rate",
        "acceptance_rate",
        "exact_match_rate",
        "kept_rate",
        "utility",
        "latency_ms",
        "threshold",
    ):
        assert key in doc["summary"]
    assert set(doc["summary"]["latency_ms"]) == {"p50", "p95"}
    assert len(doc["suggestions"]) == 10 and all("label" in x and "prompt" in x for x in doc["suggestions"])
    md = (tmp_path / "r.md").read_text()
    assert "| all | 10 | 7 | 70.0% | 100.0% |" in md and "| acme/web | 3 |" in md
    html = out.with_suffix(".html").read_text()
    assert html == doc["report_html"]
    assert "<svg" in html and "Per language" in html and "app.py" in html
    assert "src=" not in html and "href=" not in html  # self-contained: nothing to fetch
    with pytest.raises(ValueError, match="different settings"):
        run(config(repos, json_out=str(out), resume=True, points=Options(seed=9)), Scripted("right"))
