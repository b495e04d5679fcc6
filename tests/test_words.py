"""Tracked text files speak of the product, not of how it was made.

Design decisions:
- The file list is ``git ls-files`` in the repository root, so anything committed is checked and
  nothing ignored (virtual environments, build output) is; a tracked file already deleted from
  the working tree is skipped. Outside a git checkout the test skips: there is nothing to list.
- Code, docs and configuration are checked: ``.py .lua .ts .json .md .toml .sh``. Generated files
  are not: ``package-lock.json`` and the checkpoints' ``tokenizer.json`` (vocabulary, not prose).
- A figure names its date, machine and command; working-note vocabulary (the word for a working
  sitting, a machine that was borrowed, a tracker number) says nothing to a reader of the product.
  The patterns are built from pieces so that this file does not match itself.
- Third-party names that contain the word are allowed, and only those: pytest's fixture scope and
  tmux's subcommands. They are removed from a line before it is matched.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SUFFIXES = (".py", ".lua", ".ts", ".json", ".md", ".toml", ".sh")
GENERATED = re.compile(r"(^|/)package-lock\.json$|^editserver/model/checkpoints/[^/]+/tokenizer\.json$")

_WORD = "ses" + "sion"
PATTERNS = (
    re.compile(rf"\b{_WORD}s?\b", re.IGNORECASE),
    re.compile(r"\b" + "le" + r"nt\b", re.IGNORECASE),
    re.compile(r"\b" + "iss" + r"ue\s*#?\d+", re.IGNORECASE),
    re.compile(rf"\b{_WORD}-\d+", re.IGNORECASE),
)
# third-party API names: pytest's fixture scope, tmux's subcommands
ALLOWED = re.compile(rf"""scope\s*=\s*["']{_WORD}["']|\b(?:new|kill|has)-{_WORD}\b""")


def tracked_files() -> list[str]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: no tracked files to check")
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    return [p for p in out.split("\0") if p.endswith(SUFFIXES) and not GENERATED.search(p)]


def offending_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) for each line holding a banned word once allowed names are removed."""
    hits = []
    for n, line in enumerate(text.splitlines(), 1):
        rest = ALLOWED.sub("", line)
        if any(p.search(rest) for p in PATTERNS):
            hits.append((n, line.strip()))
    return hits


def test_patterns_catch_what_they_should() -> None:
    bad = [
        f"measured in {_WORD} 24",
        f"the {_WORD}-21 default",
        f"earlier {_WORD.capitalize()}s",
        "on a " + "le" + "nt GPU",
        "see " + "iss" + "ue #2",
        "Iss" + "ue 12 asks",
    ]
    good = [
        f'@pytest.fixture(scope="{_WORD}")',
        f'["tmux", "new-{_WORD}", "-d"]',
        f"initialize_{_WORD}(params)",
        "lenticular, silent, relentless",
        "the issue is the canvas",
    ]
    assert [offending_lines(t) != [] for t in bad] == [True] * len(bad)
    assert [offending_lines(t) for t in good] == [[]] * len(good)


def test_tracked_files_use_product_words() -> None:
    hits = []
    for rel in tracked_files():
        path = REPO / rel
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        hits += [f"{rel}:{n}: {line[:120]}" for n, line in offending_lines(text)]
    assert not hits, (
        "working-note words in tracked files (name the date, machine and command):\n" + "\n".join(hits)
    )
