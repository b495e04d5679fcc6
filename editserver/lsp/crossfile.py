"""Cross-file next edits: which names an edit changed that other files use, and where those uses are.

Design decisions:
- The trigger: a name the edit took away (a rename's old name) or whose definition header it
  edited, and only when another file can name it: a top-level or exported definition, a class, a
  method, a module constant of the edited file (``WorkspaceIndex.visible``, from the file as the
  index last read it, or, after a save, the new name's definition in the text now).
- The candidates: uses in other files resolved through their imports (``WorkspaceIndex.importers``):
  a file that defines its own same-named symbol, or imports it from another module, is never asked
  about. Files are ranked by import-graph distance (direct importers first), then by path.
- Each file is read as it is now: the open document's text when the editor has it open, else the
  text on disk (re-indexed first if it moved). Its uses come from a parse of that text (the index's
  own walk: interpolations in f-strings and template literals count, plain strings and comments
  never), each snapped to the statement around it (at most ``candidate_max_lines``), as in-file
  uses are; the prompt's cursor is the first use in the region (``treesitter.first_use``).
- A plan is bounded: ``cross_file_max_regions`` regions over at most ``cross_file_max_files``
  files, so a rename of a name used everywhere costs a couple of batches, not thousands.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pygls.uris import from_fs_path

from editserver.lsp.documents import Document, uri_to_path
from editserver.lsp.privacy import match
from editserver.lsp.symbols import _uses, extract
from editserver.lsp.treesitter import ParsedDocument, Region, grammar_name, regions_at

if TYPE_CHECKING:
    from editserver.lsp.server import EditLanguageServer


@dataclass
class OtherFile:
    """A file other than the edited one, as the plan read it."""

    uri: str
    path: str  # as the prompt names it (relative to the workspace)
    doc: Document
    parsed: ParsedDocument
    distance: int  # import-graph distance from the edited file (1: imports it directly)
    version: int | None  # the open document's version; None: read from disk
    regions: list[Region]
    keys: set[str]  # what its uses are named: the local name, or "ns.name" for a module imported whole


def followed_names(
    ls: EditLanguageServer, doc: Document, removed: set[str], added: set[str], called: set[str]
) -> set[str]:
    """The names whose uses in other files must follow this edit (see the module notes)."""
    index = ls.index
    if index is None or not ls.settings.cross_file or not (removed or called):
        return set()
    path = uri_to_path(doc.uri, real=True)
    grammar = grammar_name(doc.language_id, doc.uri)
    if not index.within(path) or grammar is None:
        return set()
    now = {d[0] for d in extract(grammar, doc.text)["defs"] if d[3]}
    out = {n for n in removed if index.visible(path, n) or (added & now)}
    out |= {n for n in called if n in now or index.visible(path, n)}
    return out


def _read(ls: EditLanguageServer, path: str) -> tuple[str, Document, int | None] | None:
    """(uri, document, open version or None) of a file as it is now."""
    uri = from_fs_path(path) or path
    open_doc = ls.docs.get(uri)
    if open_doc is not None:
        return uri, open_doc, open_doc.version
    if ls.index is not None:
        ls.index.fresh(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return uri, Document(uri, text, 0, "", ls.docs.encoding), None


def plan_other_files(ls: EditLanguageServer, doc: Document, names: set[str]) -> list[OtherFile]:
    """The other files' regions to ask about, nearest in the import graph first."""
    s, index = ls.settings, ls.index
    if index is None or not names:
        return []
    path = uri_to_path(doc.uri, real=True)
    found: dict[str, tuple[int, set[str]]] = {}  # importing file -> (distance, keys its uses are under)
    for name in sorted(names):
        for imp in index.importers(path, name):
            d, keys = found.get(imp.path, (imp.distance, set()))
            found[imp.path] = (min(d, imp.distance), keys | {imp.key})
    out: list[OtherFile] = []
    budget = s.cross_file_max_regions
    for p, (distance, keys) in sorted(found.items(), key=lambda kv: (kv[1][0], kv[0])):
        if budget <= 0 or len(out) >= s.cross_file_max_files:
            break
        if match(p, s.excluded_patterns):
            continue  # excludeFiles: never read into a prompt, even as another file's use
        got = _read(ls, p)
        grammar = grammar_name("", p)
        if got is None or grammar is None:
            continue
        uri, other, version = got
        parsed = ls.parsed.get(uri) or ParsedDocument(grammar, other.text)
        uses = _uses(parsed.tree.root_node)
        rows = [at[0] for k in keys for at in uses.get(k, [])]
        if not rows:
            continue  # the file changed since it was indexed and no longer uses the name
        regions = regions_at(other, parsed, rows, Region(-1, -1), budget, s.candidate_max_lines, "import")
        budget -= len(regions)
        out.append(OtherFile(uri, ls.path_of(uri), other, parsed, distance, version, regions, keys))
    return out
