"""A region's text as the model's prompt, and a rewritten region as the smallest whole-token edits.

Floor 2 (see lsp/__init__.py): over lsp/budget.py, lsp/treesitter.py and lsp/documents.py;
nextedit/ask.py uses it.

Design decisions:
- A rewritten region becomes minimal range edits: a line diff (difflib) first, then each changed
  block trimmed to what really differs, widened to whole identifier and word tokens, so a rename
  ``host_header`` -> ``header_host`` is one replaced word, never ``h`` + ``ost_header``, in every
  client (they draw the edits they get).
- Regions are whole lines (the prompt's ``<|code_to_edit|>`` is line-based); the prompt carries
  ``context_lines`` of the file above and below, bounded in characters as well (``CONTEXT_CHARS``
  each side, the part nearest the region kept): a file of very long lines would otherwise send a
  prompt far past any model's window and past the server's body limit. A region longer than
  ``REGION_CHARS`` is not asked about at all: its rewrite could not fit an answer either.
- Characters do not bound tokens (an emoji costs 3, and the history and snippets are text too), so
  the prompt is then held to the model's own limits in its tokens (lsp/budget.py: bytes first, the
  served tokenizer when bytes are over): cut to its window as the server cuts, always within its
  context, the farthest parts dropped first. A region over the context on its own is not asked about
  (``build_region_prompt`` returns None), as the server would refuse it.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from editserver.lsp.budget import DEFAULT_LIMITS, Limits, fit_edit_prompt, head_chars, tail_chars
from editserver.lsp.documents import Document
from editserver.lsp.treesitter import Region
from editserver.protocol.prompt import EditPrompt, Snippet, build_prompt

_WORD = re.compile(r"\w")
CONTEXT_CHARS = 6000  # of the file above and below the region, each
REGION_CHARS = 6000  # longest region asked about


@dataclass
class RangeEdit:
    start: int  # code point offsets in the document
    end: int
    new_text: str


def region_offsets(doc: Document, region: Region) -> tuple[int, int]:
    """Code point [start, end) of a whole-line region, including its last line break."""
    start, _ = doc.line_bounds(region.first_line)
    if region.last_line + 1 < doc.line_count:
        end, _ = doc.line_bounds(region.last_line + 1)
    else:
        end = len(doc.text)
    return start, end


def build_region_prompt(
    doc: Document,
    path: str,
    region: Region,
    cursor: int,
    snippets: list[Snippet],
    history: str,
    context_lines: int,
    limits: Limits = DEFAULT_LIMITS,
) -> tuple[str, int, str] | None:
    """(prompt, region start offset, region text) for one region, the prompt within the model's
    ``limits`` (lsp/budget.py); None when even the region alone is over them. ``cursor`` is a
    document offset."""
    start, end = region_offsets(doc, region)
    above_start, _ = doc.line_bounds(max(0, region.first_line - context_lines))
    below_last = min(doc.line_count - 1, region.last_line + context_lines)
    _, below_end = doc.line_bounds(below_last)
    region_text = doc.text[start:end]
    p = EditPrompt(
        file_path=path,
        above=tail_chars(doc.text[above_start:start], CONTEXT_CHARS),
        region=region_text,
        cursor=max(0, min(cursor - start, len(region_text))),
        below=head_chars(doc.text[end:below_end], CONTEXT_CHARS),
        snippets=snippets,
        history=history,
    )
    fitted = fit_edit_prompt(p, limits)
    return None if fitted is None else (build_prompt(fitted), start, region_text)


def region_too_long(doc: Document, region: Region) -> bool:
    start, end = region_offsets(doc, region)
    return end - start > REGION_CHARS


def _splits_word(a: str, i: int, b: str, j: int) -> bool:
    """Whether a cut before a[i] (and b[j]) falls inside a word of either side."""

    def word(t: str, k: int) -> bool:
        return 0 <= k < len(t) and _WORD.match(t[k]) is not None

    return (word(a, i - 1) or word(b, j - 1)) and (word(a, i) or word(b, j))


def minimal_edits(original: str, rewritten: str, base: int = 0) -> list[RangeEdit]:
    """The smallest whole-token range edits that turn ``original`` into ``rewritten`` (offsets
    shifted by base): changed lines, trimmed to what differs, never cutting an identifier or word."""
    if original == rewritten:
        return []
    a = original.splitlines(keepends=True)
    b = rewritten.splitlines(keepends=True)
    offs = [0]
    for line in a:
        offs.append(offs[-1] + len(line))
    out = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        old, new = "".join(a[i1:i2]), "".join(b[j1:j2])
        p = 0
        while p < len(old) and p < len(new) and old[p] == new[p]:
            p += 1
        while p > 0 and _splits_word(old, p, new, p):
            p -= 1
        s = 0
        while s < len(old) - p and s < len(new) - p and old[len(old) - 1 - s] == new[len(new) - 1 - s]:
            s += 1
        while s > 0 and _splits_word(old, len(old) - s, new, len(new) - s):
            s -= 1
        out.append(RangeEdit(base + offs[i1] + p, base + offs[i2] - s, new[p : len(new) - s]))
    return out


def normalise(rewritten: str, original: str) -> str:
    """Match the original's trailing newline so a missing final newline is not an edit."""
    if original.endswith("\n") and not rewritten.endswith("\n"):
        return rewritten + "\n"
    if not original.endswith("\n") and rewritten.endswith("\n"):
        return rewritten[:-1]
    return rewritten
