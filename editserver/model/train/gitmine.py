"""Mine a git repository's history into commit-edit records (the ``../shared/data/edits`` format).

A record is one source file changed by one non-merge commit::

    {repo, sha, parent, date, subject, path, lang, before, hunks: [[start, length, new_text], ...]}

``before`` is the whole file in the parent commit; each hunk replaces ``length`` lines of
``before.splitlines(keepends=True)`` from 0-based line ``start`` with ``new_text`` (file order).

Design decisions:
- gitpython drives git: ``rev-list --no-merges`` picks the commits (a range, the last N, or a seeded
  sample of them), ``diff-tree -M`` (gitpython's default) names each commit's changed files, blobs are
  read through git's persistent ``cat-file`` process, and hunks come from ``git diff -U0`` so they match
  what a developer sees on GitHub.
- Hunk coordinates follow Python's ``str.splitlines``, which also breaks lines at form feeds and other
  separators git ignores; every record is verified by applying its hunks, and when git's line numbers
  disagree the hunks are recomputed with difflib on Python's lines instead. A record that still does
  not reproduce the committed file is dropped (counted as ``hunk_mismatch``).
- Nothing unusual crashes the walk: binary blobs, files over ``max_file_bytes``, non-UTF-8 text, added,
  deleted, renamed and type-changed files, submodules, root commits and commits touching more than
  ``max_files`` files are skipped and counted in ``stats`` (a ``collections.Counter`` the caller may
  pass) under the reason's name.
- Only source files of the languages the model knows are mined (``LANGS``); anything else counts as
  ``not_source``.
- The subject is the message's first line as git stores it (with its newline when the message has
  more), the date the author's, in ISO 8601 with its UTC offset: what the shared records carry.
"""

from __future__ import annotations

import difflib
import random
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

LANGS = {
    ".py": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascript",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
}
MAX_FILE_BYTES = 60_000  # the shared records leave out files over 60 kB
MAX_FILES_PER_COMMIT = 100  # more is a mass reformat or vendoring, not one developer's edit
_HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def language_of(path: str) -> str | None:
    return LANGS.get(PurePosixPath(path).suffix.lower())


def repo_name(repo) -> str:
    """``owner/name`` from the ``origin`` remote when it has one, else the directory's name."""
    try:
        url = repo.remotes.origin.url
    except (AttributeError, IndexError, ValueError):
        url = ""
    m = re.search(r"[:/]([^/:]+)/([^/]+?)(?:\.git)?/?$", url)
    if m:
        return f"{m.group(1)}/{m.group(2)}"
    return Path(repo.working_tree_dir or repo.git_dir).resolve().name


def _apply(lines: list[str], hunks: list) -> list[str]:
    out = list(lines)
    for start, length, new_text in sorted(hunks, key=lambda h: h[0], reverse=True):
        out[start : start + length] = new_text.splitlines(keepends=True)
    return out


def hunks_from_git_diff(patch: str, after_lines: list[str]) -> list[list]:
    """``git diff -U0`` output -> ``[[start, length, new_text]]`` (new text read from the file itself)."""
    hunks = []
    for line in patch.splitlines():
        m = _HUNK_HEADER.match(line)
        if not m:
            continue
        a, c = int(m.group(1)), int(m.group(3))
        b = int(m.group(2)) if m.group(2) is not None else 1
        d = int(m.group(4)) if m.group(4) is not None else 1
        # git numbers from 1; a zero-length side names the line *after which* the change sits
        start = a if b == 0 else a - 1
        new_start = c if d == 0 else c - 1
        hunks.append([start, b, "".join(after_lines[new_start : new_start + d])])
    return hunks


def hunks_from_difflib(before_lines: list[str], after_lines: list[str]) -> list[list]:
    sm = difflib.SequenceMatcher(None, before_lines, after_lines, autojunk=False)
    return [
        [i1, i2 - i1, "".join(after_lines[j1:j2])]
        for tag, i1, i2, j1, j2 in sm.get_opcodes()
        if tag != "equal"
    ]


def _decode(data: bytes, stats: Counter, max_bytes: int) -> str | None:
    if b"\0" in data[:8192]:
        stats["binary"] += 1
        return None
    if len(data) > max_bytes:
        stats["huge"] += 1
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        stats["non_utf8"] += 1
        return None


def select_commits(
    repo, max_commits: int | None, rev: str | None, sample: int | None, seed: int
) -> list[str]:
    """Non-merge commit shas, newest first: the last ``max_commits`` of ``rev``, or a seeded sample."""
    args = ["--no-merges", rev or "HEAD"]
    if sample is None and max_commits is not None:
        args.insert(0, f"--max-count={max_commits}")
    out = repo.git.rev_list(*args)
    shas = out.split()
    if sample is not None:
        pool = shas[:max_commits] if max_commits is not None else shas
        picked = set(random.Random(seed).sample(pool, min(sample, len(pool))))
        shas = [s for s in pool if s in picked]  # keep history order
    return shas


def mine_commit(
    repo,
    commit,
    stats: Counter,
    *,
    max_file_bytes: int = MAX_FILE_BYTES,
    max_files: int = MAX_FILES_PER_COMMIT,
    name: str | None = None,
) -> Iterator[dict]:
    if not commit.parents:
        stats["root_commit"] += 1
        return
    parent = commit.parents[0]
    diffs = parent.diff(commit)
    if len(diffs) > max_files:
        stats["commit_too_many_files"] += 1
        return
    date = commit.authored_datetime.isoformat()
    message = commit.message if isinstance(commit.message, str) else commit.message.decode("utf-8", "replace")
    subject = message.splitlines(keepends=True)[0] if message else ""
    for d in diffs:
        path = d.b_path or d.a_path
        if language_of(path) is None:
            stats["not_source"] += 1
            continue
        if d.deleted_file:
            stats["deleted"] += 1
            continue
        if d.new_file:
            stats["added"] += 1
            continue
        if d.renamed_file or d.a_path != d.b_path:
            stats["renamed"] += 1
            continue
        if d.a_blob is None or d.b_blob is None or d.a_blob.type != "blob" or d.b_blob.type != "blob":
            stats["not_a_file"] += 1
            continue
        if d.change_type == "T" or (d.a_mode or 0) >> 12 != 0o10 or (d.b_mode or 0) >> 12 != 0o10:
            stats["not_a_file"] += 1  # symlinks, submodules, type changes
            continue
        before = _decode(d.a_blob.data_stream.read(), stats, max_file_bytes)
        if before is None:
            continue
        after = _decode(d.b_blob.data_stream.read(), stats, max_file_bytes)
        if after is None:
            continue
        if before == after:
            stats["mode_only"] += 1
            continue
        b_lines, a_lines = before.splitlines(keepends=True), after.splitlines(keepends=True)
        patch = repo.git.diff(
            parent.hexsha, commit.hexsha, "-U0", "--no-color", "--no-ext-diff", "--no-renames", "--", path
        )
        hunks = hunks_from_git_diff(patch, a_lines)
        if _apply(b_lines, hunks) != a_lines:
            hunks = hunks_from_difflib(b_lines, a_lines)
            stats["difflib_hunks"] += 1
            if _apply(b_lines, hunks) != a_lines:
                stats["hunk_mismatch"] += 1
                continue
        if not hunks:
            stats["mode_only"] += 1
            continue
        stats["records"] += 1
        yield {
            "repo": name or repo_name(repo),
            "sha": commit.hexsha,
            "parent": parent.hexsha,
            "date": date,
            "subject": subject,
            "path": path,
            "lang": language_of(path),
            "before": before,
            "hunks": hunks,
        }


def mine_repo(
    path: str | Path,
    max_commits: int | None = 2000,
    rev: str | None = None,
    sample: int | None = None,
    seed: int = 0,
    *,
    stats: Counter | None = None,
    max_file_bytes: int = MAX_FILE_BYTES,
    max_files: int = MAX_FILES_PER_COMMIT,
) -> Iterator[dict]:
    """Yield commit-edit records of the repository at ``path``, newest commit first.

    ``rev`` is any ``git rev-list`` revision or range (``main``, ``v1.0..v2.0``; default HEAD);
    ``max_commits`` bounds the walk to the newest N non-merge commits (None: all of them);
    ``sample`` picks that many of those commits at random with ``seed``. Skipped files and commits are
    counted in ``stats`` by reason (see the module docstring).
    """
    import git

    stats = stats if stats is not None else Counter()
    try:
        repo = git.Repo(str(path))
    except (git.InvalidGitRepositoryError, git.NoSuchPathError) as e:
        raise ValueError(f"{path} is not a git repository") from e
    name = repo_name(repo)
    try:
        shas = select_commits(repo, max_commits, rev, sample, seed)
    except git.GitCommandError as e:
        raise ValueError(f"cannot list commits of {path} at {rev or 'HEAD'}: {e.stderr.strip()}") from e
    try:
        for sha in shas:
            stats["commits"] += 1
            try:
                yield from mine_commit(
                    repo,
                    repo.commit(sha),
                    stats,
                    max_file_bytes=max_file_bytes,
                    max_files=max_files,
                    name=name,
                )
            except (git.GitCommandError, ValueError):
                stats["commit_error"] += 1  # an unreadable object must not end the walk
    finally:
        repo.close()
