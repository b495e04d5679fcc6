"""editserver.model.train.gitmine: a real git repository (built with gitpython in a temp dir) mined into records."""

from __future__ import annotations

import json
import lzma
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest

git = pytest.importorskip("git")

from editserver.model.train.data import apply_hunks  # noqa: E402
from editserver.model.train.gitmine import mine_repo  # noqa: E402

ME = git.Actor("Dev", "dev@example.com")
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "edits"


def commit(repo: git.Repo, msg: str, write: dict | None = None, delete=(), move=(), when: int = 0) -> str:
    root = Path(repo.working_tree_dir)
    for name, data in (write or {}).items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data if isinstance(data, bytes) else data.encode())
        repo.index.add([name])
    for name in delete:
        repo.index.remove([name], working_tree=True)
    for a, b in move:
        repo.index.move([a, b])
    date = datetime(2024, 1, 1, 12, 0, when, tzinfo=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S +0000")
    return repo.index.commit(msg, author=ME, committer=ME, author_date=date, commit_date=date).hexsha


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> git.Repo:
    r = git.Repo.init(tmp_path_factory.mktemp("mine"))
    base = "def f(a):\n    return a\n\n\ndef g(b):\n    return b\n"
    commit(
        r,
        "initial",
        {
            "m.py": base,
            "gone.py": "x = 1\n",
            "old.py": "y = 2\n",
            "README.md": "hi\n",
            "bin.py": "a = 1\n",
            "big.py": "z = 0\n",
            "enc.py": "s = 'a'\n",
        },
        when=1,
    )
    commit(
        r,
        "edit m\n\nlonger body\n",
        {
            "m.py": base.replace("return a", "return a + 1").replace("return b", "return b * 2"),
            "README.md": "hello\n",
        },
        when=2,
    )
    commit(
        r,
        "skips",
        {
            "bin.py": b"a = 1\0\n",
            "big.py": "z = 0\n" * 20_000,
            "enc.py": "s = '\xe9'\n".encode("latin-1"),
            "new.py": "n = 1\n",
        },
        delete=["gone.py"],
        move=[("old.py", "renamed.py")],
        when=3,
    )
    commit(r, "mass reformat", {f"pkg/f{i}.py": f"v = {i}\n" for i in range(120)}, when=4)
    main = r.active_branch
    side = r.create_head("side")
    side.checkout()
    edited = base.replace("return a", "return a + 1").replace("return b", "return b * 2")
    commit(r, "side change", {"m.py": edited.replace("def g(b)", "def g(b, c=0)")}, when=5)
    main.checkout()
    commit(r, "main change", {"m.py": edited.replace("def f(a)", "def f(a, k=1)")}, when=6)
    r.git.merge(
        "side",
        "-m",
        "merge side",
        "--no-ff",
        env={
            "GIT_AUTHOR_NAME": "Dev",
            "GIT_AUTHOR_EMAIL": "d@e",
            "GIT_COMMITTER_NAME": "Dev",
            "GIT_COMMITTER_EMAIL": "d@e",
        },
    )
    return r


def test_records_match_the_shared_format_and_reproduce_the_commit(repo):
    stats = Counter()
    recs = list(mine_repo(repo.working_tree_dir, max_commits=None, stats=stats))
    by_subject = {r["subject"]: r for r in recs}
    assert set(by_subject) == {"edit m\n", "main change", "side change"}  # merge commit not walked
    r = by_subject["edit m\n"]
    assert set(r) == {"repo", "sha", "parent", "date", "subject", "path", "lang", "before", "hunks"}
    assert r["path"] == "m.py" and r["lang"] == "python"
    assert r["hunks"] == [[1, 1, "    return a + 1\n"], [5, 1, "    return b * 2\n"]]
    assert r["date"] == "2024-01-01T12:00:02+00:00"
    assert r["parent"] == repo.commit(r["sha"]).parents[0].hexsha
    for rec in recs:
        after = repo.commit(rec["sha"]).tree[rec["path"]].data_stream.read().decode()
        assert "".join(apply_hunks(rec["before"].splitlines(keepends=True), rec["hunks"])) == after
    if SHARED.is_dir():
        shared = json.loads(next(iter(lzma.open(next(SHARED.glob("*.jsonl.xz")), "rt"))))
        assert set(shared) == set(r)
    # every unusual file is skipped and counted, never a crash
    assert stats["binary"] == 1 and stats["huge"] == 1 and stats["non_utf8"] == 1
    assert stats["deleted"] == 1 and stats["renamed"] == 1 and stats["added"] >= 1
    assert stats["commit_too_many_files"] == 1 and stats["root_commit"] == 1
    assert stats["not_source"] == 1  # README.md


def test_last_n_range_and_seeded_sample(repo):
    newest = list(mine_repo(repo.working_tree_dir, max_commits=1))
    assert {r["subject"] for r in newest} in ({"main change"}, {"side change"})  # newest non-merge commit
    first_two = repo.git.rev_list("--no-merges", "--reverse", "HEAD").split()[:2]
    ranged = list(mine_repo(repo.working_tree_dir, max_commits=None, rev=f"{first_two[0]}..{first_two[1]}"))
    assert [r["subject"] for r in ranged] == ["edit m\n"]
    a = [r["sha"] for r in mine_repo(repo.working_tree_dir, max_commits=None, sample=3, seed=7)]
    b = [r["sha"] for r in mine_repo(repo.working_tree_dir, max_commits=None, sample=3, seed=7)]
    assert a == b  # deterministic with a seed
    stats = Counter()
    list(mine_repo(repo.working_tree_dir, max_commits=None, sample=3, seed=7, stats=stats))
    assert stats["commits"] == 3


def test_bad_paths_and_revisions_are_clear_errors(tmp_path, repo):
    with pytest.raises(ValueError, match="not a git repository"):
        list(mine_repo(tmp_path))
    with pytest.raises(ValueError, match="cannot list commits"):
        list(mine_repo(repo.working_tree_dir, rev="no-such-branch"))
