"""Next edits, stage 3: what must never be shown, and the ranking of what is, decided once per answer.

Floor 7 (see lsp/__init__.py): takes ``RegionResult``s (nextedit/ask.py); imports no other stage.

Design decisions:
- One place: a ``Vetter`` is ask.py's callback. Each answer is vetted as it arrives (``vet``, unless
  its text moved on since it was planned: ``stale``), and a kept one is handed on at once (the
  handler streams it as ``editserver/nextEditPartial``); at the end ``ranked`` gives every answer
  still current in the order asked, and the kept ones ranked. Nothing is vetted twice.
- Selectivity: answers the server marks below its threshold, unchanged regions, rewrites that wipe
  the region and rewrites that turn a file that parsed into one with syntax errors or an emptied
  block (one full parse per answered region, never per keystroke) are not shown.
- Ranking: the edited file's kept regions best score first, then the other files' nearest in the
  import graph first, in file order; the reply's ``score`` is the first one's.
"""

from __future__ import annotations

from collections.abc import Callable

from editserver.lsp.nextedit.ask import RegionResult
from editserver.lsp.treesitter import ParsedDocument


def vet(r: RegionResult) -> str | None:
    """Why a rewrite must not be shown, or None. Guards against what a confident but wrong model does:
    wiping the region, or breaking code that parsed (checked with a parse of the edited file)."""
    doc, parsed = r.ask.doc, r.ask.parsed
    if r.rewritten is not None and not r.rewritten.strip() and r.original.strip():
        return "deletes the whole region"
    if parsed is not None and r.edits:
        text = doc.text
        for e in sorted(r.edits, key=lambda e: -e.start):
            text = text[: e.start] + e.new_text + text[e.end :]
        before, after = (
            _damage(parsed.tree.root_node),
            _damage(ParsedDocument(parsed.grammar, text).tree.root_node),
        )
        if after[0] > before[0]:
            return "introduces a syntax error"
        if after[1] > before[1]:
            return "empties a block"  # tree-sitter-python accepts a body dedented away; we do not
    return None


def _damage(root) -> tuple[int, int]:
    """(syntax errors or missing nodes, empty blocks) in a tree."""
    errors = empty = 0
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            errors += 1
        if node.type in ("block", "statement_block") and node.named_child_count == 0:
            empty += 1
        # a string without errors holds neither errors nor blocks (an f-string's interpolation is an
        # expression), so only a damaged one is entered; uses are another walk (code_identifiers)
        if node.has_error or node.type not in ("identifier", "string", "comment"):
            stack.extend(node.children)
    return errors, empty


def stale(r: RegionResult) -> bool:
    """The text moved on since the region was planned: its offsets are stale."""
    return r.ask.version is not None and r.ask.doc.version != r.ask.version


def shown(r: RegionResult) -> bool:
    """Whether a vetted answer is shown: it cleared the threshold, changed something, passed ``vet``."""
    return r.above_threshold and bool(r.edits) and r.rejected is None


def rank(results: list[RegionResult]) -> list[RegionResult]:
    """The shown results: the edited file's best score first, then other files nearest in the import
    graph first, in file order."""
    kept = [r for r in results if shown(r)]
    here = sorted((r for r in kept if r.ask.distance == 0), key=lambda r: -r.score)
    other = sorted(
        (r for r in kept if r.ask.distance > 0),
        key=lambda r: (r.ask.distance, r.ask.path, r.region.first_line),
    )
    return here + other


class Vetter:
    """ask.py's callback: vets each answer as it arrives, hands a shown one to ``on_kept``."""

    def __init__(self, on_kept: Callable[[RegionResult], None] | None = None):
        self.on_kept = on_kept
        self.results: list[RegionResult] = []  # in arrival order

    def take(self, r: RegionResult) -> None:
        self.results.append(r)
        if stale(r):
            return  # a newer request is coming
        r.rejected = vet(r)
        if self.on_kept is not None and shown(r):
            self.on_kept(r)

    def ranked(self) -> tuple[list[RegionResult], list[RegionResult]]:
        """(every answer still current, in the order asked; the shown ones, ranked)."""
        results = sorted((r for r in self.results if not stale(r)), key=lambda r: r.ask.seq)
        return results, rank(results)
