"""Label a suggestion against what the developer actually did next.

Design decisions:
- A next-edit suggestion is the model's rewrite of the editable region; applying it means replacing
  the region's lines. It is **not shown** when it equals the region (the model proposes nothing),
  moves only its layout (model/infer/scoring.py ``layout_only``: the server reports it unchanged), or
  is blank (the client shows nothing); the caller also marks suppressed and failed ones not shown.
- It is **accepted** when the file it produces equals the file with one (or several) of the
  commit's remaining hunks applied, compared line by line after whitespace normalisation (runs of
  blanks collapsed, line ends and blank lines ignored): that is ``exact``. It is also accepted, not
  exact, when it does a strict part of that work: the normalised lines lie on a shortest edit path
  (line insertions and deletions) from the current file to the file with the hunks it touches
  applied, so everything it changed the developer changed the same way, and it changed something.
  Anything else is **rejected**. Only hunks that overlap the region (or insert at its edges) can be
  reproduced; the comparison runs on the window covering the region and those hunks, since the
  rest of the file is the same in all three versions.
- The kept rate is partial credit: the longest common subsequence of the suggestion's change and
  the actual change, over the suggestion's length. A change is the sequence of its removed tokens
  (``-tok``) then added tokens (``+tok``) per changed block, tokens being identifiers, numbers and
  single punctuation characters (whitespace never counts). What is compared is what the suggestion
  writes (its added tokens against the actual added tokens), or, for a suggestion that only
  deletes, what it deletes: a suggestion that wipes the region must not earn credit because the
  developer also deleted some of those lines. The actual change is the remaining hunks the region
  overlaps, or the nearest remaining hunk when it overlaps none.
- FIM is scored on the first line of the completion against the rest of the line: exact match
  (trailing blanks ignored) and the accepted prefix, the characters a user could accept before the
  first wrong one. Its label follows next edit's, so the same utility and threshold sweep apply: a
  blank first line is ``empty`` (nothing to show), an exact one ``accepted``, anything else
  ``rejected`` (a near miss is still a wrong ghost text).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from itertools import combinations

from editserver.model.infer.scoring import layout_only
from editserver.replay.points import EditPoint

_TOKEN = re.compile(r"[A-Za-z_$][\w$]*|\d[\w.]*|\S")
MAX_LCS_TOKENS = 600  # longer changes are truncated before the quadratic LCS
MAX_PATH_LINES = 800  # windows longer than this are judged on exact matches only


@dataclass
class Verdict:
    label: str  # "accepted" | "rejected" | "unchanged" | "empty"
    exact: bool = False
    kept: float = 0.0
    window: str | None = None  # the lines covering the region and the hunks it overlaps ...
    expected: str | None = None  # ... and the same lines as the developer left them

    @property
    def candidate(self) -> bool:
        """A real proposal (shown unless the threshold suppresses it)."""
        return self.label in ("accepted", "rejected")


def normalize(lines: list[str]) -> list[str]:
    return [" ".join(x.split()) for x in lines if x.strip()]


def lcs_len(a: list, b: list) -> int:
    if not a or not b:
        return 0
    if len(a) < len(b):
        a, b = b, a
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def _edit_distance(a: list[str], b: list[str]) -> int:
    return len(a) + len(b) - 2 * lcs_len(a, b)


def _tokens(lines: list[str]) -> list[str]:
    return _TOKEN.findall("".join(lines))


def change_tokens(old: list[str], new: list[str]) -> list[str]:
    out: list[str] = []
    sm = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag != "equal":
            out += ["-" + t for t in _tokens(old[i1:i2])]
            out += ["+" + t for t in _tokens(new[j1:j2])]
    return out


def _hunk_tokens(lines: list[str], hunks: list[tuple[int, int, str]]) -> list[str]:
    out: list[str] = []
    for s, n, text in hunks:
        out += ["-" + t for t in _tokens(lines[s : s + n])]
        out += ["+" + t for t in _tokens(text.splitlines(keepends=True))]
    return out


def kept_rate(suggested: list[str], actual: list[str]) -> float:
    """LCS over the suggestion's length, on the text it adds (on what it removes if it only removes)."""
    sign = "+" if any(t[0] == "+" for t in suggested) else "-"
    s = [t for t in suggested if t[0] == sign][:MAX_LCS_TOKENS]
    a = [t for t in actual if t[0] == sign][:MAX_LCS_TOKENS]
    if not s:
        return 0.0
    return lcs_len(s, a) / len(s)


def overlapping(p: EditPoint) -> list[tuple[int, int, str]]:
    out = []
    for s, n, text in p.remaining:
        if n == 0 and p.lo <= s <= p.hi:
            out.append((s, n, text))
        elif n > 0 and s < p.hi and s + n > p.lo:
            out.append((s, n, text))
    return out


def _apply(lines: list[str], hunks, offset: int) -> list[str]:
    out = list(lines)
    for s, n, text in sorted(hunks, key=lambda h: h[0], reverse=True):
        out[s - offset : s - offset + n] = text.splitlines(keepends=True)
    return out


def _subsets(hunks: list) -> list[list]:
    if len(hunks) <= 4:
        return [list(c) for r in range(1, len(hunks) + 1) for c in combinations(hunks, r)]
    return [[h] for h in hunks] + [list(hunks)]


def judge_edit(p: EditPoint, suggestion: str | None) -> Verdict:
    region_lines = p.lines[p.lo : p.hi]
    region = "".join(region_lines)
    text = suggestion or ""
    if region.endswith("\n") and text and not text.endswith("\n"):
        text += "\n"  # a fence-stripped answer may lose the region's final newline
    if text == region or layout_only(region, text):
        return Verdict("unchanged")  # the server answers a layout-only rewrite as unchanged too
    if not text.strip():
        return Verdict("empty")
    new_region = text.splitlines(keepends=True)
    touched = overlapping(p)
    window = expected = None
    if touched:
        wlo = min([p.lo] + [s for s, _, _ in touched])
        whi = max([p.hi] + [s + n for s, n, _ in touched])
        current = p.lines[wlo:whi]
        proposed = p.lines[wlo : p.lo] + new_region + p.lines[p.hi : whi]
        target = _apply(current, touched, wlo)
        window, expected = "".join(current), "".join(target)
        actual = _hunk_tokens(p.lines, touched)
    else:
        near = min(p.remaining, key=lambda h: min(abs(h[0] - p.lo), abs(h[0] - p.hi)), default=None)
        actual = _hunk_tokens(p.lines, [near]) if near else []
    kept = kept_rate(change_tokens(region_lines, new_region), actual)
    if not touched:
        return Verdict("rejected", kept=kept)
    n_prop = normalize(proposed)
    for subset in _subsets(touched):
        done = _apply(current, subset, wlo)
        if proposed == done or n_prop == normalize(done):
            return Verdict("accepted", True, kept, window, expected)
    n_cur, n_tgt = normalize(current), normalize(target)
    if n_prop != n_cur and len(n_cur) + len(n_prop) + len(n_tgt) <= 3 * MAX_PATH_LINES:
        if _edit_distance(n_cur, n_prop) + _edit_distance(n_prop, n_tgt) == _edit_distance(n_cur, n_tgt):
            return Verdict("accepted", False, kept, window, expected)
    return Verdict("rejected", False, kept, window, expected)


# ---- FIM -------------------------------------------------------------------------------------
@dataclass
class FimVerdict:
    exact: bool
    prefix_chars: int  # characters of the rest of the line accepted before the first wrong one
    prefix_fraction: float  # prefix_chars over the length of the rest of the line
    label: str = "empty"  # "accepted" (exact) | "rejected" | "empty" (a blank first line)


def judge_fim(expected: str, completion: str | None) -> FimVerdict:
    got = (completion or "").split("\n", 1)[0].rstrip()
    want = expected.rstrip()
    n = 0
    for a, b in zip(got, want):
        if a != b:
            break
        n += 1
    label = "empty" if not got.strip() else "accepted" if got == want else "rejected"
    return FimVerdict(got == want, n, n / len(want) if want else 1.0, label)
