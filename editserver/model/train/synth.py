"""Synthetic next-edit examples: a rename made at one place, to be carried to the others.

Real commit histories hold few renames, yet "the other call sites of a rename" is the next edit users
expect first. So renames are made up from any source file: pick an identifier used on several lines,
rename it on one line (the user's edit, shown as history), and ask for another line's region, whose
answer has every whole-word occurrence renamed.

Design decisions:
- The example matches what the LSP asks at inference (lsp/nextedit.py, lsp/context.py): a small
  region (1-8 lines) around another occurrence of the old name, the cursor at that occurrence, the
  file around it, and the rename as a unified diff in the history. Sometimes an earlier occurrence
  was already renamed too (two history entries), as when a user fixes call sites one by one.
- New names are plausible: an identifier part swapped for a part seen elsewhere in the file, a part
  added, or a case-style change; never a name already used in the window (the answer is unambiguous).
- Identifiers are found with regular expressions, not a parser, so any language in the corpus works.
  Only names in code count (string literals and comments are blanked first), and only names used
  bare at least once (never only after a dot): a library's method such as ``str.join`` is not the
  user's to rename. Keywords and names shorter than three characters are never renamed.
- Pure: text and a ``random.Random`` in, an ``EditPrompt`` and its answer out (or None).
"""

from __future__ import annotations

import builtins
import keyword
import random
import re

from editserver.protocol.prompt import EditPrompt, unified_diff

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PARTS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_SKIP = set(keyword.kwlist) | {
    "self",
    "cls",
    "None",
    "True",
    "False",
    "print",
    "len",
    "range",
    "func",
    "var",
    "let",
}
_SKIP |= {"const", "return", "import", "from", "def", "class", "this", "string", "int", "str"}


_NOT_CODE = re.compile(
    r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|#.*|//.*'
)
_NOT_BREAK = re.compile("[^\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")  # what str.splitlines keeps
_BARE = re.compile(r"(?<![.\w])[A-Za-z_]\w*")


def code_mask(text: str) -> str:
    """``text`` with string literals (triple-quoted ones too) and comments blanked to spaces; same
    length and same line breaks, so offsets and lines in the mask are offsets and lines in ``text``."""
    return _NOT_CODE.sub(lambda m: _NOT_BREAK.sub(" ", m.group()), text)


def _rename(line: str, code: str, pat: re.Pattern[str], new: str) -> str:
    """``line`` with the whole-word matches of ``pat`` in its code (``code`` is its mask) renamed."""
    for m in reversed(list(pat.finditer(code))):
        line = line[: m.start()] + new + line[m.end() :]
    return line


_RESERVED = _SKIP | set(dir(builtins))


def _word(name: str, bare_only: bool) -> re.Pattern[str]:
    """Whole-word ``name``; with ``bare_only``, not right after a dot (``err.value`` is another name)."""
    return re.compile(r"(?<![A-Za-z0-9_" + ("." if bare_only else "") + r"])" + re.escape(name) + r"(?!\w)")


def _parts(name: str) -> list[str]:
    return [p.lower() for p in _PARTS.findall(name)]


def _join(parts: list[str], like: str) -> str:
    """Parts joined in the case style of ``like`` (snake, camel, Pascal or UPPER)."""
    if like.isupper():
        return "_".join(parts).upper()
    if "_" in like.strip("_") or len(_parts(like)) < 2 and like[:1].islower():
        lead = "_" * (len(like) - len(like.lstrip("_")))
        return lead + "_".join(parts)
    words = [p.capitalize() for p in parts]
    if like[:1].islower():
        words[0] = parts[0]
    return "".join(words)


def new_name(old: str, vocab: list[str], taken: set[str], rng: random.Random) -> str | None:
    """A plausible replacement for ``old`` built from identifier parts in ``vocab``."""
    parts = _parts(old) or [old.lower()]
    pool = sorted({p for v in vocab for p in _parts(v) if len(p) >= 3} - set(parts)) or [
        "value",
        "item",
        "data",
    ]
    for _ in range(8):
        r = rng.random()
        p = list(parts)
        if r < 0.45:
            p[rng.randrange(len(p))] = rng.choice(pool)
        elif r < 0.75:
            p.insert(rng.choice([0, len(p)]), rng.choice(pool))
        elif r < 0.85 and len(p) > 1:
            del p[rng.randrange(len(p))]
        else:
            p = [rng.choice(pool)] + ([rng.choice(pool)] if rng.random() < 0.5 else [])
        cand = _join(p, old)
        if cand != old and cand not in taken and cand not in _RESERVED and IDENT.fullmatch(cand):
            return cand
    return None


def rename_example(path: str, text: str, rng: random.Random) -> tuple[EditPrompt, str] | None:
    """(prompt, rewritten region) for a rename of one identifier, or None when the text has none."""
    lines = text.splitlines(keepends=True)
    if len(lines) < 4:
        return None
    s = rng.randrange(max(1, len(lines) - 60))
    masked = code_mask(text).splitlines(keepends=True)
    if len(masked) != len(lines):
        return None
    where: dict[str, list[int]] = {}
    bare: set[str] = set()
    for i, code in enumerate(masked[s : s + 60]):
        bare |= set(_BARE.findall(code))
        for name in set(IDENT.findall(code)):
            if len(name) >= 3 and name not in _SKIP:
                where.setdefault(name, []).append(i)
    names = sorted(n for n, rows in where.items() if len(rows) >= 2 and n in bare)
    if not names:
        return None
    old = rng.choice(names)
    taken = set(where)
    new = new_name(old, names, taken, rng)
    if new is None:
        return None
    # a method or class defined here is renamed at attribute uses too; any other name only where bare
    defined = re.search(
        r"\b(?:def|class|func|fn|function)\s+" + re.escape(old) + r"\b", "".join(masked[s : s + 60])
    )
    pat = _word(old, bare_only=defined is None)
    rows = [s + i for i in where[old]]
    # the user renamed the first occurrence (often the definition) or any other one
    edited = rows[0] if rng.random() < 0.5 else rng.choice(rows)
    others = [r for r in rows if r != edited]
    done = [edited] + ([rng.choice(others)] if len(others) > 1 and rng.random() < 0.25 else [])
    todo = [r for r in others if r not in done]
    target = rng.choice(todo)
    state, history = list(lines), []
    for r in done:
        before = "".join(state)
        state[r] = _rename(state[r], masked[r], pat, new)
        history.append(unified_diff(path, before, "".join(state)))
    lo = max(0, target - rng.randint(0, 3))
    hi = min(len(state), target + 1 + rng.randint(0, 3))
    region = "".join(state[lo:hi])
    if len(region) > 1500 or not region.strip():
        return None
    m = pat.search(masked[target])
    cursor = sum(len(x) for x in state[lo:target]) + (m.start() if m else 0)
    answer = "".join(
        r if i in done else _rename(r, masked[i], pat, new) for i, r in zip(range(lo, hi), state[lo:hi])
    )
    above = "".join(state[max(0, lo - 40) : lo])
    below = "".join(state[hi : hi + 40])
    return EditPrompt(path, above, region, cursor, below, [], "".join(history)), answer
