"""Next edits, stage 1: what changed, whether to ask, and which regions to ask about, in this file and others.

Floor 5 (see lsp/__init__.py): takes the server's state (lsp/state.py); its output is a ``Plan`` of
``Ask``s, one per region, which ask.py turns into prompts.

Design decisions:
- When to ask: an automatic request (``trigger: "auto"``, what clients send after an edit) asks the
  model only when the edits since the document's previous request could propagate: an identifier
  or a literal substituted, or a definition header edited (``gate``); otherwise it answers at once
  with ``skipped``. An explicit request always asks.
- Which regions, best first: the uses of the renamed name (tree-sitter identifier nodes in code:
  inside f-string and template literal interpolations too, never in plain strings or comments;
  ``treesitter.code_identifiers``), nearest the edit first, each a few lines, the prompt's cursor
  on the first use in it (``treesitter.first_use``); then call sites of an edited definition; then,
  unless the edit was a plain rename, the cursor's own 10-25 line region. Small use regions with a
  short context (``candidate_context_lines``) and no snippets decode as one batch on the server
  (its scheduler batches equal decode plans); the cursor's region gets the full context and the
  recently viewed snippets, definitions from other open files first.
- Other files (``Plan.later``, planned once the workspace index is built, waiting for it at most
  ``INDEX_WAIT_S``, so the edited file's regions never wait): the trigger is a name the edit took
  away (a rename's old name) or whose definition header it edited, and only when another file can
  name it: a top-level or exported definition, a class, a method, a module constant of the edited
  file (``WorkspaceIndex.visible``, from the file as the index last read it, or, after a save, the
  new name's definition in the text now).
- The other files' candidates: uses resolved through their imports (``WorkspaceIndex.importers``):
  a file that defines its own same-named symbol, or imports it from another module, is never asked
  about. Files are ranked by import-graph distance (direct importers first), then by path.
- Each other file is read as it is now: the open document's text when the editor has it open, else
  the text on disk (re-indexed first if it moved). Its uses come from a parse of that text (the
  index's own walk), each snapped to the statement around it (at most ``candidate_max_lines``), as
  in-file uses are. Excluded files (``excludeFiles``) are never read into a prompt.
- A plan is bounded: ``max_candidates`` in-file use regions, and ``cross_file_max_regions`` regions
  over at most ``cross_file_max_files`` other files, so a rename of a name used everywhere costs a
  couple of batches, not thousands.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from pygls.uris import from_fs_path

from editserver.lsp.documents import Document, uri_to_path
from editserver.lsp.history import EditEvent, propagation
from editserver.lsp.privacy import match
from editserver.lsp.settings import Settings
from editserver.lsp.state import ServerState
from editserver.lsp.symbols import _uses, extract
from editserver.lsp.treesitter import (
    ParsedDocument,
    Region,
    candidate_regions,
    first_use,
    grammar_name,
    node_name,
    regions_at,
    snap_region,
)
from editserver.protocol.prompt import Snippet

INDEX_WAIT_S = 10.0  # a rename right after the editor opened waits this long for the index at most


@dataclass
class Ask:
    """One region to ask the model about."""

    doc: Document  # the edited document, another open one, or another file as read from disk
    parsed: ParsedDocument | None
    path: str  # the file as the prompt names it
    region: Region
    at: int  # the prompt's cursor (document offset)
    context_lines: int
    snippets: list[Snippet] = field(default_factory=list)
    distance: int = 0  # 0: the edited file; n: n imports away from it
    version: int | None = None  # the document version the edits apply to; None: the text on disk
    seq: int = 0  # the order it was asked in (the reply's ``regions`` keep it)


@dataclass
class Plan:
    asks: list[Ask]  # the edited file's, best first
    history: str
    later: Callable[[], Awaitable[list[Ask]]] | None = None  # other files', nearest first


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


# ---- the edited file -----------------------------------------------------------------------------
def gate(st: ServerState, doc: Document, events: list[EditEvent]) -> str | None:
    """Why an automatic request may go to the model ("identifier", "literal", "signature"), or None
    when the fresh edits cannot need edits elsewhere."""
    why = propagation(events)
    if why is not None:
        return why
    parsed = st.parsed.get(doc.uri)
    if parsed is not None:
        for e in events:
            if e.uri == doc.uri and parsed.definition_at_line(e.first_line) is not None:
                return "signature"
    return None


def plan_in_file(
    doc: Document,
    parsed: ParsedDocument | None,
    cursor: int,
    renamed: set[str],
    called: set[str],
    edit_line: int,
    include_cursor: bool,
    s: Settings,
) -> list[tuple[Region, int]]:
    """Regions best first: the uses of renamed names (tree-sitter identifiers), nearest the edit
    first; then call sites of an edited definition; then, for edits that are not renames, the
    cursor's own region. Use regions are a few lines each, so they decode as one batch."""
    here = Region(edit_line, edit_line, "edit")
    out: list[tuple[Region, int]] = []
    taken: list[Region] = [here]
    for names, reason in ((renamed, "occurrence"), (called - renamed, "call")):
        found = candidate_regions(doc, parsed, names, here, s.max_candidates, s.candidate_max_lines)
        found = [r for r in found if not any(r.overlaps(o) for o in taken)]
        for r in sorted(found, key=lambda r: (abs(r.first_line - edit_line), r.first_line)):
            if len(out) >= s.max_candidates:
                break
            taken.append(r)
            out.append((Region(r.first_line, r.last_line, reason), first_use(doc, parsed, r, names)))
    if include_cursor or not out:
        line, _ = doc.position_at(cursor)
        main = snap_region(doc, parsed, line, s.region_min_lines, s.region_max_lines)
        if not any(main.overlaps(r) for r, _ in out):
            out.append((main, cursor))
    return out


def _snippets(st: ServerState, doc: Document, region: Region) -> list[Snippet]:
    """The cursor region's snippets: definitions of names it uses (other open files), then the
    recently viewed files."""
    defs = st.definitions_near(doc.uri, region.first_line, region.last_line)
    return [Snippet(p, c) for p, c in defs][:3] + st.viewed.snippets(doc.uri, st.settings.recent_snippets)


def plan(st: ServerState, doc: Document, cursor: int, auto: bool) -> Plan | str:
    """The regions to ask about, or why nothing is asked (an automatic request after a plain edit)."""
    s = st.settings
    parsed = st.parsed.get(doc.uri)
    fresh = st.fresh_edits(doc.uri)
    why = gate(st, doc, fresh)
    if why is None and auto:
        return "no identifier, signature or literal changed"
    removed, added = st.history.changed_identifiers(2)
    called: set[str] = set()
    newest = st.history.recent(1)
    if parsed is not None and newest and newest[0].uri == doc.uri:
        d = parsed.definition_at_line(newest[0].first_line)
        if d is not None and node_name(d):
            called.add(node_name(d))  # its call sites must follow a signature change
    events = fresh or newest
    edit_line = events[-1].first_line if events and events[-1].uri == doc.uri else doc.position_at(cursor)[0]
    regions = plan_in_file(doc, parsed, cursor, set(removed), called, edit_line, why != "identifier", s)
    path, version = st.path_of(doc.uri), doc.version
    asks = []
    for r, at in regions:
        # use regions need the rename (history) and the code around them, not other files: short prompts
        if r.reason == "cursor":
            asks.append(
                Ask(doc, parsed, path, r, at, s.context_lines, _snippets(st, doc, r), version=version)
            )
        else:
            asks.append(Ask(doc, parsed, path, r, at, s.candidate_context_lines, [], version=version))
    history = st.history.render(s.history_prompt_events)
    return Plan(asks, history, _other_files(st, doc, removed, added, called))


def _other_files(
    st: ServerState, doc: Document, removed: set[str], added: set[str], called: set[str]
) -> Callable[[], Awaitable[list[Ask]]]:
    """The other files' asks, planned once the workspace index is built (waiting for it at most
    ``INDEX_WAIT_S``), so the edited file's regions never wait for them."""
    version = doc.version

    async def later() -> list[Ask]:
        task = st.index_task
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), INDEX_WAIT_S)
            except (asyncio.TimeoutError, Exception):
                return []
        if doc.version != version:
            return []  # the text moved on: a newer request plans again
        out = []
        for f in plan_other_files(st, doc, followed_names(st, doc, set(removed), set(added), called)):
            for r in f.regions:
                at = first_use(f.doc, f.parsed, r, f.keys)
                ctx = st.settings.candidate_context_lines
                out.append(Ask(f.doc, f.parsed, f.path, r, at, ctx, [], f.distance, f.version))
        return out

    return later


# ---- other files ---------------------------------------------------------------------------------
def followed_names(
    st: ServerState, doc: Document, removed: set[str], added: set[str], called: set[str]
) -> set[str]:
    """The names whose uses in other files must follow this edit (see the module notes)."""
    index = st.index
    if index is None or not st.settings.cross_file or not (removed or called):
        return set()
    path = uri_to_path(doc.uri, real=True)
    grammar = grammar_name(doc.language_id, doc.uri)
    if not index.within(path) or grammar is None:
        return set()
    now = {d[0] for d in extract(grammar, doc.text)["defs"] if d[3]}
    out = {n for n in removed if index.visible(path, n) or (added & now)}
    out |= {n for n in called if n in now or index.visible(path, n)}
    return out


def _read(st: ServerState, path: str) -> tuple[str, Document, int | None] | None:
    """(uri, document, open version or None) of a file as it is now."""
    uri = from_fs_path(path) or path
    open_doc = st.docs.get(uri)
    if open_doc is not None:
        return uri, open_doc, open_doc.version
    if st.index is not None:
        st.index.fresh(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return uri, Document(uri, text, 0, "", st.docs.encoding), None


def plan_other_files(st: ServerState, doc: Document, names: set[str]) -> list[OtherFile]:
    """The other files' regions to ask about, nearest in the import graph first."""
    s, index = st.settings, st.index
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
        got = _read(st, p)
        grammar = grammar_name("", p)
        if got is None or grammar is None:
            continue
        uri, other, version = got
        parsed = st.parsed.get(uri) or ParsedDocument(grammar, other.text)
        uses = _uses(parsed.tree.root_node)
        rows = [at[0] for k in keys for at in uses.get(k, [])]
        if not rows:
            continue  # the file changed since it was indexed and no longer uses the name
        regions = regions_at(other, parsed, rows, Region(-1, -1), budget, s.candidate_max_lines, "import")
        budget -= len(regions)
        out.append(OtherFile(uri, st.path_of(uri), other, parsed, distance, version, regions, keys))
    return out
