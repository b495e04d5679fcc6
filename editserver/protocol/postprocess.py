"""Fill-in-the-middle post-processing shared by the HTTP API and the language server (stdlib only).

Design decisions:
- One module, two callers: ``editserver serve`` applies it to every ``/v1/fim/completions`` answer (so
  Zed, Continue and curl get what the LSP shows) and the LSP applies it again with what only it knows
  (the file's indentation style). Every rule only shortens or re-indents, so applying it twice gives
  the same text as once (tested).
- ``trim`` returns the text and the names of the rules that changed it (``Trim.trimmed``), in the
  order they fired; the server reports them in its ``editserver`` field, the benchmarks count them.
- Rules, in order: broken characters (U+FFFD, control bytes) dropped; a hole whose suffix continues
  the same line ends at the end of that line (``same_line``); a multi-line answer stops where it
  dedents out of the cursor's block (``dedent``), at a line the suffix already has next
  (``suffix_line``), at the second copy of a line it already wrote (``repeated_line``) or after
  ``MAX_LINES``; runaway repetition inside a line (the same run of 3+ characters, several times in a row,
  ``X * a * a * a``) is cut after its first copy (``runaway``); with code on both sides of the
  cursor, an answer that opens by re-typing the rest of the line (``(items):`` before ``(items,
  tax):``) is dropped whole (``rewrites_rest``): the model rewrote that text rather than inserting
  before it, so any of it would double it; text that re-types the start of the suffix is cut
  (``suffix_overlap``); closing brackets that would unbalance the line against what the suffix
  already closes are dropped (``brackets``). After a prefix that ends in a space (past
  the line's indentation), an answer's own leading spaces before a word are dropped
  (``double_space``): BPE tokenizers glue a space to the following word, so a model asked to go on
  after ``width + `` often writes `` width``.
- A request's own ``stop`` is applied by the engine before any of this and always wins: these rules
  never lengthen an answer, so nothing past a stop sequence can come back.
- Short overlaps with the suffix count only when they are punctuation: a shared letter or two is
  more often a coincidence (``x + y`` before ``y + 1``) than a repeat.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_LINES = 12
OPENERS = {"(": ")", "[": "]", "{": "}"}
CLOSERS = {v: k for k, v in OPENERS.items()}
# "": the language is unknown (an HTTP request): a line ending in any of these may open a block
_BLOCK_OPENERS = {"python": (":", "(", "[", "{", ","), "": (":", "{", "(", "[", "=>", ",")}
_C_BLOCK = ("{", "(", "[", "=>", ",")
# a run of 3+ characters repeated at least 3 times back to back (``* x * x * x``)
_RUNAWAY = re.compile(r"(.{3,40}?)\1{2,}")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]+")
# spaces then a word character: after a prefix that ends in a space, the model's own space before a
# word doubles it (BPE glues a space to the word that follows); a comment's ``  #`` is left alone
_SPACED_WORD = re.compile(r" +\w")


def _word_char(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


BRACKET_LINES = 40  # prefix lines whose brackets count when balancing the answer's closers


@dataclass
class Trim:
    text: str
    trimmed: list[str] = field(default_factory=list)  # rule names that shortened the text, in order

    def note(self, rule: str, before: str) -> None:
        if self.text != before and rule not in self.trimmed:
            self.trimmed.append(rule)


def indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def indent_style(text: str) -> tuple[str, int]:
    """("\\t", 0) for tab-indented files, (" ", width) for spaces (width of the smallest indent step)."""
    tabs = spaces = 0
    widths: dict[int, int] = {}
    for line in text.splitlines()[:2000]:
        ind = indent_of(line)
        if not ind or not line.strip():
            continue
        if ind.startswith("\t"):
            tabs += 1
        else:
            spaces += 1
            widths[len(ind)] = widths.get(len(ind), 0) + 1
    if tabs > spaces:
        return "\t", 0
    width = min(widths) if widths else 4
    return " ", width if width in (2, 3, 4, 8) else 4


def convert_indent(line: str, style: tuple[str, int]) -> str:
    ind = indent_of(line)
    if not ind:
        return line
    char, width = style
    width = width or 4
    if char == "\t" and " " in ind:
        cols = sum(width if c == "\t" else 1 for c in ind)
        ind = "\t" * (cols // width) + " " * (cols % width)
    elif char == " " and "\t" in ind:
        ind = ind.replace("\t", " " * width)
    return ind + line[len(indent_of(line)) :]


def clean(text: str) -> str:
    """Drop broken characters: U+FFFD (tokens that do not decode to whole UTF-8 characters) and control
    characters other than tab/newline. Inserting them would corrupt the user's file."""
    return "".join(ch for ch in text if ch != "\ufffd" and (ord(ch) >= 32 or ch in "\t\n") and ord(ch) != 127)


def multiline_allowed(line_prefix: str, line_suffix: str, language: str) -> bool:
    """Multi-line only at the end of a line that is empty so far or that opens a block."""
    if line_suffix.strip():
        return False
    stripped = line_prefix.rstrip()
    if not stripped:
        return True
    return stripped.endswith(_BLOCK_OPENERS.get(language, _C_BLOCK))


def overlap(text: str, suffix: str) -> int:
    """Length of the longest tail of ``text`` equal to a head of ``suffix`` (see the module notes)."""
    best = 0
    for k in range(1, min(len(text), len(suffix), 400) + 1):
        head = suffix[:k]
        if text.endswith(head) and head.strip():
            if k >= 3 or not any(_word_char(ch) for ch in head):
                best = k
    return best


def cut_runaway(line: str) -> str:
    """The line up to the end of the first copy of a run repeated 3+ times back to back."""
    for m in _RUNAWAY.finditer(line):
        if _WORD.search(m.group(1)):  # a word repeated, not ``====`` or ``0, 0, 0``
            return line[: m.start() + len(m.group(1))].rstrip()
    return line


def rewrites_rest(text: str, line_suffix: str) -> bool:
    """Whether ``text`` opens with the start of the rest of the line: a common head of 3+ characters,
    cut back to whole words, that starts with punctuation or a space and holds a word (``(items`` of
    ``(items):`` and ``(items, tax):``). A word only begun (`` + ba`` of `` + baz`` and `` + bar``) does
    not count, nor does a head led by a word (``bar_baz, `` before ``bar)`` is a new argument).
    Decided by ``text``'s first characters, so more text never undoes it (``settled``)."""
    n = 0
    for a, b in zip(text, line_suffix):
        if a != b or a == "\n":
            break
        n += 1

    def word(s: str, i: int) -> bool:  # where text ends, the word may go on
        return i >= len(s) or _word_char(s[i])

    if n and (word(text, n) or word(line_suffix, n)):
        while n and _word_char(text[n - 1]):
            n -= 1
    head = text[:n]
    return n >= 3 and not _word_char(head[0]) and _WORD.search(head) is not None


def cut_suffix_overlap(text: str, suffix: str, line_suffix: str) -> str:
    """Cut text that re-types the start of the suffix: a tail equal to its head, or, mid-line, the
    rest of the line written out in full inside the answer (``x) -> int:`` before ``) -> int:``)."""
    ahead = line_suffix.strip()
    if ahead and len(ahead) >= 2 and not ahead.isidentifier():
        at = text.find(ahead)
        if at > 0:
            text = text[:at].rstrip(" \t")
    k = overlap(text, suffix.lstrip(" \t") if not ahead else line_suffix)
    return text[:-k].rstrip(" \t") if k else text


def _keep_lines(
    lines: list[str], line_prefix: str, suffix: str, style: tuple[str, int], t: Trim
) -> list[str]:
    """Multi-line answers: stop at a dedent, a line the suffix has next, a repeated line, MAX_LINES."""
    opens_block = bool(line_prefix.strip())  # multi-line after text only when the line opens a block
    tab = style[1] or 4
    base = len(indent_of(line_prefix).expandtabs(tab)) if opens_block else len(line_prefix.expandtabs(tab))
    next_line = next((ln.strip() for ln in suffix.split("\n")[1:] if ln.strip()), "")
    kept = [lines[0]]
    seen = {lines[0].strip()} if lines[0].strip() else set()
    for ln in lines[1:]:
        if ln.strip():
            depth = len(indent_of(ln).expandtabs(tab))
            if depth < base or (opens_block and depth <= base):
                t.trimmed.append("dedent")  # the rest belongs elsewhere
                break
            if next_line and ln.strip() == next_line:
                t.trimmed.append("suffix_line")  # the suffix already has this line
                break
            if ln.strip() in seen and len(ln.strip()) > 2:
                t.trimmed.append("repeated_line")
                break
            seen.add(ln.strip())
        kept.append(ln)
        if len(kept) >= MAX_LINES:
            t.trimmed.append("max_lines")
            break
    return kept


def trim(
    completion: str,
    prefix: str,
    suffix: str,
    language: str = "",
    style: tuple[str, int] | None = None,
) -> Trim:
    """Clean a raw FIM completion for the hole between ``prefix`` and ``suffix``.

    ``style`` (the file's indentation) re-indents later lines when given; the server, which does not
    know the whole file, leaves it None. An empty ``text`` means nothing worth showing."""
    t = Trim(completion)
    before = t.text
    t.text = clean(completion.replace("\r\n", "\n"))
    t.note("broken_characters", before)
    line_prefix = prefix.rsplit("\n", 1)[-1]
    line_suffix = suffix.split("\n", 1)[0]
    if not multiline_allowed(line_prefix, line_suffix, language):
        before = t.text
        t.text = t.text.split("\n", 1)[0]
        t.note("same_line", before)
    else:
        lines = t.text.split("\n")
        kept = _keep_lines(lines, line_prefix, suffix, style or (" ", 4), t)
        if style is not None:
            kept = kept[:1] + [convert_indent(ln, style) for ln in kept[1:]]
        t.text = "\n".join(kept)
    if line_prefix and not line_prefix.strip():
        t.text = t.text.lstrip(" \t")  # the cursor already stands at the line's indentation
    elif line_prefix.endswith(" ") and _SPACED_WORD.match(t.text):
        before = t.text
        t.text = t.text.lstrip(" ")  # ``(width + `` then `` width``: the space is typed already
        t.note("double_space", before)
    t.text = "\n".join(ln.rstrip() for ln in t.text.split("\n")).rstrip("\n")
    before = t.text
    t.text = "\n".join(cut_runaway(ln) for ln in t.text.split("\n"))
    t.note("runaway", before)
    # only with code on both sides of the cursor: a hole at a line's start (a whole new line before
    # the next one, as HumanEval's single-line holes) may well open like the next line
    if line_prefix.strip() and line_suffix.strip() and rewrites_rest(t.text, line_suffix):
        t.trimmed.append("rewrites_rest")
        t.text = ""
        return t
    before = t.text
    t.text = cut_suffix_overlap(t.text, suffix, line_suffix)
    t.note("suffix_overlap", before)
    before = t.text
    t.text = balance_closers(prefix, t.text, line_suffix)
    t.note("brackets", before)
    if not t.text.strip():
        t.text = ""
    return t


# rules that cut a committed answer for good: nothing written after the cut can come back
_FINAL = {"same_line", "dedent", "suffix_line", "repeated_line", "max_lines", "runaway", "rewrites_rest"}


def settled(text: str, prefix: str, suffix: str) -> bool:
    """Whether the trimming already cuts ``text`` (an answer's committed start) for good, so more
    text cannot change what is shown: a line rule fired (a one-line hole's newline, a dedent, a line
    the suffix has next, a repeated line, the line limit), or a line repeats itself (runaway). The
    engine ends such a FIM row there, so a runaway answer costs what its trimmed text costs."""
    return bool(_FINAL.intersection(trim(text, prefix, suffix).trimmed))


def postprocess(
    completion: str, line_prefix: str, suffix: str, language: str, style: tuple[str, int] = (" ", 4)
) -> str:
    """``trim``'s text (the LSP's entry point, with the file's indentation style)."""
    return trim(completion, line_prefix, suffix, language, style).text


def _net_open(text: str) -> dict[str, int]:
    """Open brackets per kind over ``text``, skipping string literals and comments line by line
    (crudely: quotes toggle, ``#`` and ``//`` end the line) so ``"("`` does not count."""
    depth = {c: 0 for c in OPENERS}
    for line in text.split("\n"):
        quote = ""
        i = 0
        while i < len(line):
            ch = line[i]
            if quote:
                if ch == "\\":
                    i += 1
                elif ch == quote:
                    quote = ""
            elif ch in "\"'`":
                quote = ch
            elif ch == "#" or line.startswith("//", i):
                break
            elif ch in OPENERS:
                depth[ch] += 1
            elif ch in CLOSERS:
                depth[CLOSERS[ch]] -= 1
            i += 1
    return depth


def balance_closers(prefix: str, text: str, line_suffix: str) -> str:
    """Drop trailing closing brackets the prefix and text never opened, when the rest of the line
    already brings that closer or the line ends there (a dangling ``)`` after a balanced line).
    ``prefix`` counts from its last ``BRACKET_LINES`` lines, so a call opened lines above still
    accepts its closer."""
    depth = _net_open("\n".join(prefix.split("\n")[-BRACKET_LINES:]) + text)
    ahead = line_suffix.strip()
    stripped = text.rstrip()
    while stripped and stripped[-1] in CLOSERS:
        opener = CLOSERS[stripped[-1]]
        if depth[opener] >= 0 or (ahead and ahead[0] != stripped[-1]):
            break
        depth[opener] += 1
        stripped = stripped[:-1].rstrip()
    return stripped if stripped != text.rstrip() else text
