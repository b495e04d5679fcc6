"""Inception's next-edit prompt layout: build it, and parse it back with clear errors.

Design decisions:
- One module owns the layout, so training (model/train/data.py), the HTTP server (parsing what clients send)
  and the LSP server (building what it sends) cannot drift apart. Pure Python: no torch import.
- Parsing is tolerant where clients differ (missing optional sections, CRLF, surrounding whitespace)
  and strict where the request cannot be served: a missing ``<|code_to_edit|>`` region or more than one
  ``<|cursor|>`` raises ``PromptError`` naming the problem.
- Section bodies keep their exact text; the region's text is what the model rewrites, so the newline
  conventions around tags are fixed here: each tag sits on its own line.
- A tag is told from user text that spells it by where it stands: a section tag counts where it is
  alone on its line, as ``build_prompt`` writes it (a client that writes tags inline still parses, by
  first occurrence, when no line holds the tag alone); ``<|cursor|>`` counts only inside the
  ``<|code_to_edit|>`` region. So code that mentions a tag inside a line (``s = '<|cursor|>'``,
  ``if "<|code_to_edit|>" in text``) is text, wherever it sits. Tokenizers then insert the tags as
  ids and encode the text as text (``prompt_parts``, ``encode_prompt``).
- A region whose own text spells ``<|cursor|>`` cannot say by its text alone which spelling is the
  cursor, so a request may name it: ``cursor_index``, the cursor tag's place among the region's
  ``<|cursor|>`` spellings counting from 0 (``cursor_index`` below; the tag cannot overlap a
  spelling, so counting them before the cursor is exact, and CRLF cannot change the count). The
  LSP always sends it. Without it a region holds exactly one. Answers keep the user's spellings:
  ``drop_cursor_tags`` removes only the tags an answer holds beyond what its region spells.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

RV_OPEN, RV_CLOSE = "<|recently_viewed_code_snippets|>", "<|/recently_viewed_code_snippets|>"
SNIP_OPEN, SNIP_CLOSE = "<|recently_viewed_code_snippet|>", "<|/recently_viewed_code_snippet|>"
CUR_OPEN, CUR_CLOSE = "<|current_file_content|>", "<|/current_file_content|>"
EDIT_OPEN, EDIT_CLOSE = "<|code_to_edit|>", "<|/code_to_edit|>"
CURSOR = "<|cursor|>"
HIST_OPEN, HIST_CLOSE = "<|edit_diff_history|>", "<|/edit_diff_history|>"
SNIPPET_PATH = "code_snippet_file_path: "
CURRENT_PATH = "current_file_path: "


def fim_window(n_prefix: int, n_suffix: int, budget: int) -> tuple[int, int]:
    """FIM context within ``budget`` tokens: how many prefix tokens (those nearest the cursor) and
    suffix tokens (likewise) to keep. The suffix gets what the prefix leaves, and at least a quarter.
    Training (model/train/data.py) and inference (model/infer/engine.py) both cut with this, so they agree."""
    n_suf = min(n_suffix, max(budget // 4, budget - n_prefix))
    n_pre = min(n_prefix, budget - n_suf)
    return max(0, n_pre), max(0, n_suf)


class PromptError(ValueError):
    """A next-edit prompt that cannot be served; the message names the problem."""


@dataclass
class Snippet:
    path: str
    code: str


@dataclass
class EditPrompt:
    file_path: str
    above: str  # file text before the editable region (ends with a newline or is empty)
    region: str  # editable region *without* the cursor tag
    cursor: int  # character offset of the cursor inside ``region``
    below: str  # file text after the region
    snippets: list[Snippet] = field(default_factory=list)
    history: str = ""  # unified diffs, oldest first

    @property
    def region_with_cursor(self) -> str:
        return self.region[: self.cursor] + CURSOR + self.region[self.cursor :]


def _block(text: str) -> str:
    """A section body on its own lines: empty stays empty, otherwise ends with exactly one newline."""
    if not text:
        return ""
    return text if text.endswith("\n") else text + "\n"


def prompt_parts(p: EditPrompt) -> list[tuple[str, bool]]:
    """The built prompt as ``(text, is_tag)`` pieces in order: the layout's own tags apart from the
    user's text (file content, snippets, paths, diffs), so a tokenizer can insert the tags as ids and
    encode the text as text (``encode_prompt``)."""
    out: list[tuple[str, bool]] = [(RV_OPEN, True), ("\n", False)]
    for s in p.snippets:
        out += [(SNIP_OPEN, True), (f"\n{SNIPPET_PATH}{s.path}\n{_block(s.code)}", False), (SNIP_CLOSE, True)]
        out.append(("\n", False))
    out += [(RV_CLOSE, True), ("\n\n", False), (CUR_OPEN, True)]
    out += [(f"\n{CURRENT_PATH}{p.file_path}\n{_block(p.above)}", False), (EDIT_OPEN, True), ("\n", False)]
    region = _block(p.region_with_cursor)
    cut = p.cursor  # the cursor tag sits at ``cursor``, whatever the region's text spells
    before, after = region[:cut], region[cut + len(CURSOR) :]
    out += [(before, False), (CURSOR, True), (after, False), (EDIT_CLOSE, True)]
    out += [(f"\n{_block(p.below)}", False), (CUR_CLOSE, True), ("\n\n", False), (HIST_OPEN, True)]
    out += [(f"\n{_block(p.history)}", False), (HIST_CLOSE, True)]
    return out


def build_prompt(p: EditPrompt) -> str:
    return "".join(text for text, _ in prompt_parts(p))


def encode_prompt(
    p: EditPrompt, encode_text: Callable[[str], list[int]], tag_id: Callable[[str], int]
) -> list[int]:
    """The built prompt's ids: each tag as its id (``tag_id``), each run of text between tags through
    ``encode_text``, which reads a string that spells a tag as text."""
    ids: list[int] = []
    run = ""  # text between two tags, encoded as one string
    for text, is_tag in prompt_parts(p):
        if not is_tag:
            run += text
            continue
        if run:
            ids += encode_text(run)
        ids.append(tag_id(text))
        run = ""
    return ids + (encode_text(run) if run else [])


def _alone(text: str, i: int, tag: str) -> bool:
    end = i + len(tag)
    return (i == 0 or text[i - 1] == "\n") and (end == len(text) or text[end] == "\n")


def _tag_at(text: str, tag: str, start: int = 0) -> int:
    """The first ``tag`` at or after ``start`` alone on its line, else the first anywhere; -1: none."""
    first = i = text.find(tag, start)
    while i >= 0:
        if _alone(text, i, tag):
            return i
        i = text.find(tag, i + 1)
    return first


def _tag_count(text: str, tag: str) -> int:
    """How many ``tag`` the text holds as tags: those alone on their lines, else every occurrence."""
    at, i = [], text.find(tag)
    while i >= 0:
        at.append(i)
        i = text.find(tag, i + 1)
    alone = [i for i in at if _alone(text, i, tag)]
    return len(alone) if alone else len(at)


def _between(text: str, open_tag: str, close_tag: str, *, required: bool) -> str | None:
    start = _tag_at(text, open_tag)
    if start < 0:
        if required:
            raise PromptError(f"prompt is missing the {open_tag} section")
        return None
    if _tag_count(text, open_tag) > 1:
        raise PromptError(f"prompt has more than one {open_tag} tag")
    end = _tag_at(text, close_tag, start)
    if end < 0:
        raise PromptError(f"prompt has {open_tag} without its closing {close_tag}")
    return text[start + len(open_tag) : end]


def strip_one_newline(s: str) -> str:
    return s[1:] if s.startswith("\n") else s


def cursor_index(region: str, cursor: int) -> int:
    """Which ``<|cursor|>`` of the built region (the tag inserted at ``cursor``) is the cursor: the
    number of the region's own spellings before it."""
    return region[: max(0, min(cursor, len(region)))].count(CURSOR)


def _nth(text: str, sub: str, n: int) -> int:
    i = text.find(sub)
    for _ in range(n):
        i = text.find(sub, i + 1) if i >= 0 else -1
    return i


def drop_cursor_tags(answer: str, region: str) -> str:
    """``answer`` without the cursor tags it holds beyond those the ``region`` as sent spells (a model
    may echo the tag); of several, the one whose removal leaves the longest common start and end
    with the region goes first, so the user's own spellings stay where they were."""
    while answer.count(CURSOR) > region.count(CURSOR):
        best, best_score = answer, -1
        i = answer.find(CURSOR)
        while i >= 0:
            cand = answer[:i] + answer[i + len(CURSOR) :]
            score = len(_common(cand, region)) + len(_common(cand[::-1], region[::-1]))
            if score > best_score:
                best, best_score = cand, score
            i = answer.find(CURSOR, i + 1)
        answer = best
    return answer


def _common(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def parse_prompt(text: str, cursor_at: int | None = None) -> EditPrompt:
    """The prompt's parts; ``cursor_at``: which ``<|cursor|>`` of the region marks the cursor (0: the
    first; the others are text), None: the region holds at most one. PromptError names a problem."""
    if not isinstance(text, str) or not text.strip():
        raise PromptError("prompt is empty")
    text = text.replace("\r\n", "\n")
    current = _between(text, CUR_OPEN, CUR_CLOSE, required=False)
    body = current if current is not None else text
    if EDIT_OPEN not in body:
        raise PromptError(f"prompt is missing the {EDIT_OPEN} region")
    body = strip_one_newline(body)
    file_path = ""
    if body.startswith(CURRENT_PATH):
        line_end = body.find("\n")
        line_end = len(body) if line_end < 0 else line_end
        file_path = body[len(CURRENT_PATH) : line_end].strip()
        body = body[line_end + 1 :]
    region_raw = _between(body, EDIT_OPEN, EDIT_CLOSE, required=True)
    assert region_raw is not None
    open_at = _tag_at(body, EDIT_OPEN)
    above = body[:open_at]
    below = strip_one_newline(body[_tag_at(body, EDIT_CLOSE, open_at) + len(EDIT_CLOSE) :])
    region_raw = strip_one_newline(region_raw)
    if cursor_at is not None:
        at = _nth(region_raw, CURSOR, cursor_at) if cursor_at >= 0 else -1
        if at < 0:
            n = region_raw.count(CURSOR)
            raise PromptError(f"cursor_index {cursor_at} names no {CURSOR} tag: the region holds {n}")
        region = region_raw[:at] + region_raw[at + len(CURSOR) :]
        return _finish(text, file_path, above, region, at, below)
    n_cursors = region_raw.count(CURSOR) or (above + below).count(CURSOR)
    if n_cursors > 1:
        raise PromptError(f"prompt has {n_cursors} {CURSOR} tags; exactly one is allowed")
    if CURSOR in region_raw:
        cursor = region_raw.find(CURSOR)
        region = region_raw.replace(CURSOR, "", 1)
    elif n_cursors == 1:
        raise PromptError(f"the {CURSOR} tag must lie inside the {EDIT_OPEN} region")
    else:
        cursor, region = 0, region_raw
    return _finish(text, file_path, above, region, cursor, below)


def _finish(text: str, file_path: str, above: str, region: str, cursor: int, below: str) -> EditPrompt:
    """The prompt with its snippets and history read from ``text``."""
    snippets = []
    rv = _between(text, RV_OPEN, RV_CLOSE, required=False) or ""
    at = _tag_at(rv, SNIP_OPEN)
    while at >= 0:
        end = _tag_at(rv, SNIP_CLOSE, at)
        if end < 0:
            raise PromptError(f"{SNIP_OPEN} without its closing {SNIP_CLOSE}")
        chunk = strip_one_newline(rv[at + len(SNIP_OPEN) : end])
        at = _tag_at(rv, SNIP_OPEN, end)
        path = ""
        if chunk.startswith(SNIPPET_PATH):
            nl = chunk.find("\n")
            nl = len(chunk) if nl < 0 else nl
            path, chunk = chunk[len(SNIPPET_PATH) : nl].strip(), chunk[nl + 1 :]
        snippets.append(Snippet(path, chunk))
    history = strip_one_newline(_between(text, HIST_OPEN, HIST_CLOSE, required=False) or "")
    return EditPrompt(file_path, above, region, cursor, below, snippets, history)


def unified_diff(path: str, before: str, after: str, context: int = 3) -> str:
    """One edit-history entry in the ``--- PATH / +++ PATH / @@`` form the prompt carries."""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=path,
        tofile=path,
        n=context,
    )
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n")
    return "".join(out)


def edit_canvas_pos(context: Sequence[int], rewrite_id: int, region_open_id: int) -> int:
    """Rotary position where a row's canvas starts (see model/infer/transformer.py): for a next-edit row
    (its context ends with ``<|rewrite|>``) the first token after ``<|code_to_edit|>``, so the
    rewrite lines up with the region it rewrites; for any other row right after the context."""
    n = len(context)
    if n and context[n - 1] == rewrite_id:
        ids = list(context)
        if region_open_id in ids:
            return ids.index(region_open_id) + 1
    return n


def split_history(history: str) -> list[str]:
    """The history's unified diffs, oldest first (each opens with a ``--- `` / ``+++ `` pair)."""
    lines = history.splitlines(keepends=True)
    starts = [
        i
        for i, line in enumerate(lines)
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")
    ]
    if not starts:
        return [history] if history.strip() else []
    starts[0] = 0  # anything before the first header belongs to the first entry
    return ["".join(lines[a:b]) for a, b in zip(starts, [*starts[1:], len(lines)])]


def _last_lines(text: str, n: int) -> str:
    return "".join(text.splitlines(keepends=True)[-n:]) if n else ""


def _first_lines(text: str, n: int) -> str:
    return "".join(text.splitlines(keepends=True)[:n])


def _cuts(p: EditPrompt) -> Iterator[EditPrompt]:
    """``p``, then ``fit_prompt``'s cuts of it, made only as they are asked for (a prompt that fits
    needs none)."""
    yield p
    diffs = split_history(p.history)
    for keep in (40, 16, 6, 0):
        yield dataclasses.replace(
            p,
            snippets=[],
            above=_last_lines(p.above, keep),
            below=_first_lines(p.below, keep),
            history="".join(diffs[-3:] if keep >= 16 else diffs[-1:]),
        )


def fit_prompt(
    p: EditPrompt,
    encode: Callable[[EditPrompt], list[int]],
    budget: int,
    min_tokens: Callable[[str], int] | None = None,
) -> tuple[EditPrompt, list[int]] | None:
    """``p`` cut until its prompt is at most ``budget`` tokens, with that prompt's tokens
    (``encode(cut)``, so callers never encode it twice), or None when even the region with the newest
    diff is too long. Cuts, in order: the recently viewed snippets; the file context to 40, 16, 6 and 0
    lines on each side; the history to its 3 newest diffs, then the newest. Training rows
    (model/train/data.py) and inference (model/infer/engine.py) both cut with this, so they agree.

    ``min_tokens(text)``, a cheap lower bound on the built prompt's token count
    (``Tokenizer.min_tokens``), skips encoding a cut that cannot fit: most training rows' first cuts
    are far over a 256-token budget, and encoding them was half of building a next-edit row. The
    result is unchanged."""
    tried = None
    for q in _cuts(p):
        if q == tried:  # this cut changes nothing: encoding it again would only cost time
            continue
        tried = q
        if min_tokens is not None and min_tokens(build_prompt(q)) > budget:
            continue  # cannot fit: skip the encode
        ids = encode(q)
        if len(ids) <= budget:
            return q, ids
    return None


def format_edit_response(region: str) -> str:
    """The assistant message content Inception clients expect: the region inside a code fence."""
    return "```\n" + region + ("" if region.endswith("\n") or not region else "\n") + "```"


def parse_edit_response(content: str) -> str | None:
    """The region inside an edit answer's code fence (the inverse of ``format_edit_response``);
    None when the content holds no fence."""
    start = content.find("```")
    if start < 0:
        return None
    nl = content.find("\n", start)
    if nl < 0:
        return None
    end = content.rfind("```")
    return content[nl + 1 :] if end <= nl else content[nl + 1 : end]
