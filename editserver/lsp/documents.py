"""Open documents: text kept in sync with the client, positions in the negotiated encoding.

Floor 0 (see lsp/__init__.py): imports nothing of the language server.

Design decisions:
- We keep our own copy of each document instead of reading pygls' workspace because every change
  must also yield the byte-level edit (start/old end/new end, as bytes and (row, byte column) points)
  that tree-sitter's incremental ``Tree.edit`` needs, and the removed/inserted text the edit history
  records. One ``apply`` computes all of it.
- Positions are (line, character) where ``character`` counts UTF-16 code units by default, UTF-8
  bytes or code points when that encoding was negotiated. Lines end at ``\\n``, ``\\r\\n`` or ``\\r``
  (the LSP definition); a character past the end of a line clamps to the line end, a line past the
  end of the document clamps to the document end, as the spec asks.
- Text is a Python ``str`` (code points); line starts are recomputed per change (O(n), which is the
  same order as the string copy a change costs anyway).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from pygls.uris import to_fs_path

UTF8, UTF16, UTF32 = "utf-8", "utf-16", "utf-32"
_NEWLINE = re.compile(r"\r\n|\r|\n")


def uri_to_path(uri: str, real: bool = False) -> str:
    """The file path a ``file:`` URI names (with ``real``: through links, as the index keys files);
    any other URI, or one that does not parse, as given (an ``untitled:`` buffer keeps its URI)."""
    try:
        path = to_fs_path(uri) or uri
        return os.path.realpath(path) if real else path
    except Exception:
        return uri


def _units(ch: str, encoding: str) -> int:
    if encoding == UTF16:
        return 2 if ord(ch) > 0xFFFF else 1
    if encoding == UTF8:
        return len(ch.encode("utf-8", "surrogatepass"))
    return 1


def encoded_len(text: str, encoding: str) -> int:
    if encoding == UTF32:
        return len(text)
    if encoding == UTF16:
        return len(text.encode("utf-16-le", "surrogatepass")) // 2
    return len(text.encode("utf-8", "surrogatepass"))


@dataclass(frozen=True)
class TextEdit:
    """One applied change, in every coordinate system its consumers need."""

    start: int  # code point offsets
    old_end: int
    new_end: int
    start_byte: int
    old_end_byte: int
    new_end_byte: int
    start_point: tuple[int, int]  # (row, byte column) for tree-sitter
    old_end_point: tuple[int, int]
    new_end_point: tuple[int, int]
    removed: str
    inserted: str


@dataclass
class Document:
    uri: str
    text: str
    version: int = 0
    language_id: str = ""
    encoding: str = UTF16
    _starts: list[int] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self._reindex()

    def _reindex(self) -> None:
        self._starts = [0] + [m.end() for m in _NEWLINE.finditer(self.text)]

    @property
    def line_count(self) -> int:
        return len(self._starts)

    def line_bounds(self, line: int) -> tuple[int, int]:
        """Code point offsets of a line's start and end (excluding its line break)."""
        line = max(0, min(line, len(self._starts) - 1))
        start = self._starts[line]
        end = self._starts[line + 1] if line + 1 < len(self._starts) else len(self.text)
        while end > start and self.text[end - 1] in "\r\n":
            end -= 1
        return start, end

    def line_text(self, line: int) -> str:
        s, e = self.line_bounds(line)
        return self.text[s:e]

    def offset_at(self, line: int, character: int) -> int:
        """Code point offset of an LSP position (clamped as the spec asks)."""
        if line >= len(self._starts):
            return len(self.text)
        if line < 0:
            return 0
        start, end = self.line_bounds(line)
        if self.encoding == UTF32:
            return min(start + max(character, 0), end)
        units = 0
        i = start
        while i < end and units < character:
            units += _units(self.text[i], self.encoding)
            i += 1
        return i

    def position_at(self, offset: int) -> tuple[int, int]:
        """LSP (line, character) of a code point offset."""
        offset = max(0, min(offset, len(self.text)))
        lo, hi = 0, len(self._starts) - 1
        while lo < hi:  # last line start <= offset
            mid = (lo + hi + 1) // 2
            if self._starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        start, end = self.line_bounds(lo)
        return lo, encoded_len(self.text[start : min(offset, end)], self.encoding)

    def point_at(self, offset: int) -> tuple[int, int]:
        """tree-sitter point (row, UTF-8 byte column) of a code point offset."""
        line, _ = self.position_at(offset)
        start = self._starts[line]
        return line, len(self.text[start:offset].encode("utf-8", "surrogatepass"))

    def byte_at(self, offset: int) -> int:
        return len(self.text[:offset].encode("utf-8", "surrogatepass"))

    def apply(self, new_text: str, range_: tuple[int, int, int, int] | None) -> TextEdit:
        """Apply one content change; ``range_`` is (start line, start char, end line, end char) or None
        for a full replacement."""
        if range_ is None:
            start, old_end = 0, len(self.text)
        else:
            start = self.offset_at(range_[0], range_[1])
            old_end = max(start, self.offset_at(range_[2], range_[3]))
        start_byte, start_point = self.byte_at(start), self.point_at(start)
        old_end_byte, old_end_point = self.byte_at(old_end), self.point_at(old_end)
        removed = self.text[start:old_end]
        self.text = self.text[:start] + new_text + self.text[old_end:]
        self._reindex()
        new_end = start + len(new_text)
        return TextEdit(
            start=start,
            old_end=old_end,
            new_end=new_end,
            start_byte=start_byte,
            old_end_byte=old_end_byte,
            new_end_byte=start_byte + len(new_text.encode("utf-8", "surrogatepass")),
            start_point=start_point,
            old_end_point=old_end_point,
            new_end_point=self.point_at(new_end),
            removed=removed,
            inserted=new_text,
        )

    def lsp_range(self, start: int, end: int) -> dict:
        sl, sc = self.position_at(start)
        el, ec = self.position_at(end)
        return {"start": {"line": sl, "character": sc}, "end": {"line": el, "character": ec}}


class DocumentStore:
    def __init__(self) -> None:
        self.docs: dict[str, Document] = {}
        self.encoding = UTF16

    def open(self, uri: str, text: str, version: int, language_id: str) -> Document:
        doc = Document(uri, text, version, language_id, self.encoding)
        self.docs[uri] = doc
        return doc

    def get(self, uri: str) -> Document | None:
        return self.docs.get(uri)

    def close(self, uri: str) -> None:
        self.docs.pop(uri, None)
