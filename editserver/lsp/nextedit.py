"""Next-edit suggestions: one pass, plan -> ask -> vet -> reply, in the edited file and the files that import it.

Design decisions:
- ``suggest`` reads top to bottom as four functions: ``plan`` (which regions, in which files, with
  what context), ``ask`` (the model, streamed), ``vet`` (what must never be shown) and ``reply``
  (ranked, logged). Each region to ask about is an ``Ask``: its document (open, or read from disk),
  the region, the prompt's cursor and context.
- When to ask: an automatic request (``trigger: "auto"``, what clients send after an edit) asks the
  model only when the edits since the document's previous request could propagate: an identifier
  or a literal substituted, or a definition header edited (``gate``); otherwise it answers at once
  with ``skipped``. An explicit request always asks.
- Which regions, best first: the uses of the renamed name (tree-sitter identifier nodes in code:
  inside f-string and template literal interpolations too, never in plain strings or comments;
  ``treesitter.code_identifiers``), nearest the edit first, each a few lines, the prompt's cursor on
  the first use in it (``treesitter.first_use``); then call sites of an edited definition; then,
  unless the edit was a plain rename, the cursor's own 10-25 line region; then, when the name is
  visible outside the file, its uses in the files that import it (lsp/crossfile.py), direct
  importers first. Small use regions with a short context
  (``candidate_context_lines``) decode as one batch on the server (its scheduler batches equal
  decode plans), so the first one comes back quickly.
- Streaming: the best region's request goes first, alone (a 20 ms head start, so the server's
  worker decodes it as a batch of one); the other in-file regions follow together and share the
  next batch. The other files' regions come after them, so in-file edits come first and as fast as
  without them: the nearest one alone (a batch of one as soon as the server is free), the rest
  once it is answered. Each answer is vetted as it arrives and, when kept, handed to the caller (the
  server sends it as ``editserver/nextEditPartial``); the final reply holds all kept edits: in-file
  ones best score first, then the other files' in import-graph order.
- Each prompt is Inception's layout (``protocol.prompt.build_prompt``): recently viewed snippets
  (including definitions from other open files), the region's file clipped to ``context_lines``
  around the region, the region with ``<|cursor|>`` (at the cursor, or at the use for candidates)
  and the coalesced edit history as unified diffs (which is how another file's region learns of
  the rename).
- A rewritten region becomes minimal whole-token range edits (lsp/rewrite.py).
- Selectivity: answers the server marks below its threshold, unchanged regions, rewrites that wipe
  the region and rewrites that turn a file that parsed into one with syntax errors (one full parse
  per answered region, never per keystroke) are dropped. The reply's ``score`` is the best kept
  region's score (0 when nothing is kept).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from editserver.lsp.crossfile import followed_names, plan_other_files
from editserver.lsp.documents import Document
from editserver.lsp.history import propagation
from editserver.lsp.model_client import READY, ModelClient
from editserver.lsp.rewrite import (
    RangeEdit,
    _normalise,
    build_region_prompt,
    minimal_edits,
    region_too_long,
)
from editserver.lsp.treesitter import (
    ParsedDocument,
    Region,
    candidate_regions,
    definitions_for,
    first_use,
    node_name,
    snap_region,
)
from editserver.protocol.prompt import Snippet, cursor_index, drop_cursor_tags

if TYPE_CHECKING:
    from editserver.lsp.server import EditLanguageServer

FIRST_ALONE_S = 0.02  # head start of the best region's request (see ask)
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
class RegionResult:
    ask: Ask
    prompt: str
    original: str
    rewritten: str | None
    score: float
    above_threshold: bool
    edits: list[RangeEdit] = field(default_factory=list)
    rejected: str | None = None  # why the LSP will not show it (see ``vet``)

    @property
    def region(self) -> Region:
        return self.ask.region

    @property
    def uri(self) -> str:
        return self.ask.doc.uri


@dataclass
class Suggestion:
    id: str
    doc: Document
    version: int  # the edited document's version the in-file edits apply to
    kept: list[RegionResult] = field(default_factory=list)  # shown: in-file best first, then other files
    results: list[RegionResult] = field(default_factory=list)  # every region asked about
    skipped: str | None = None  # why no model was asked (an automatic request after a plain edit)


@dataclass
class Plan:
    asks: list[Ask]  # the edited file's, best first
    history: str
    later: Callable[[], Awaitable[list[Ask]]] | None = None  # other files', nearest first


def rank(results: list[RegionResult]) -> list[RegionResult]:
    """Kept results (cleared the threshold, changed something, passed ``vet``): the edited file's
    best score first, then other files nearest in the import graph first, in file order."""
    kept = [r for r in results if r.above_threshold and r.edits and r.rejected is None]
    here = sorted((r for r in kept if r.ask.distance == 0), key=lambda r: -r.score)
    other = sorted(
        (r for r in kept if r.ask.distance > 0),
        key=lambda r: (r.ask.distance, r.ask.path, r.region.first_line),
    )
    return here + other


# ---- vet -----------------------------------------------------------------------------------------
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


def _stale(r: RegionResult) -> bool:
    """The text moved on since the region was planned: its offsets are stale."""
    return r.ask.version is not None and r.ask.doc.version != r.ask.version


# ---- plan ----------------------------------------------------------------------------------------
def gate(ls: EditLanguageServer, doc: Document, events) -> str | None:
    """Why an automatic request may go to the model ("identifier", "literal", "signature"), or None
    when the fresh edits cannot need edits elsewhere."""
    why = propagation(events)
    if why is not None:
        return why
    parsed = ls.parsed.get(doc.uri)
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
    s,
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


def _snippets(ls: EditLanguageServer, doc: Document, parsed, region: Region) -> list[Snippet]:
    snippets = ls.viewed.snippets(doc.uri, ls.settings.recent_snippets)
    if parsed is not None:
        near = {
            n.text.decode("utf-8", "replace")
            for n in parsed.identifiers(region.first_line, region.last_line)
            if n.text
        }
        snippets = [Snippet(p, c) for p, c in definitions_for(near, ls.others(doc.uri))][:3] + snippets
    return snippets


def plan(ls: EditLanguageServer, doc: Document, cursor: int, auto: bool) -> Plan | str:
    """The regions to ask about, or why nothing is asked (an automatic request after a plain edit)."""
    s = ls.settings
    parsed = ls.parsed.get(doc.uri)
    fresh = ls.history.since(ls.next_marker.get(doc.uri), doc.uri)
    ls.next_marker[doc.uri] = ls.history.marker()
    why = gate(ls, doc, fresh)
    if why is None and auto:
        return "no identifier, signature or literal changed"
    removed, added = ls.history.changed_identifiers(2)
    called: set[str] = set()
    newest = ls.history.recent(1)
    if parsed is not None and newest and newest[0].uri == doc.uri:
        d = parsed.definition_at_line(newest[0].first_line)
        if d is not None and node_name(d):
            called.add(node_name(d))  # its call sites must follow a signature change
    events = fresh or newest
    edit_line = events[-1].first_line if events and events[-1].uri == doc.uri else doc.position_at(cursor)[0]
    regions = plan_in_file(doc, parsed, cursor, set(removed), called, edit_line, why != "identifier", s)
    path, version = ls.path_of(doc.uri), doc.version
    asks = []
    for r, at in regions:
        # use regions need the rename (history) and the code around them, not other files: short prompts
        cursor_region = r.reason == "cursor"
        asks.append(
            Ask(
                doc,
                parsed,
                path,
                r,
                at,
                s.context_lines if cursor_region else s.candidate_context_lines,
                _snippets(ls, doc, parsed, r) if cursor_region else [],
                version=version,
            )
        )
    return Plan(
        asks, ls.history.render(s.history_prompt_events), _other_files(ls, doc, removed, added, called)
    )


def _other_files(ls: EditLanguageServer, doc: Document, removed: set[str], added: set[str], called: set[str]):
    """The other files' asks, planned once the workspace index is built (waiting for it at most
    ``INDEX_WAIT_S``), so the edited file's regions never wait for them."""
    version = doc.version

    async def later() -> list[Ask]:
        task = ls.index_task
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), INDEX_WAIT_S)
            except (asyncio.TimeoutError, Exception):
                return []
        if doc.version != version:
            return []  # the text moved on: a newer request plans again
        out = []
        for f in plan_other_files(ls, doc, followed_names(ls, doc, set(removed), set(added), called)):
            for r in f.regions:
                at = first_use(f.doc, f.parsed, r, f.keys)
                ctx = ls.settings.candidate_context_lines
                out.append(Ask(f.doc, f.parsed, f.path, r, at, ctx, [], f.distance, f.version))
        return out

    return later


# ---- ask -----------------------------------------------------------------------------------------
async def _ask_one(client: ModelClient, ask: Ask, history: str, timeout_s: float) -> RegionResult | None:
    if region_too_long(ask.doc, ask.region):
        return None  # no answer could hold its rewrite (rewrite.REGION_CHARS)
    built = build_region_prompt(
        ask.doc, ask.path, ask.region, ask.at, ask.snippets, history, ask.context_lines, client.limits
    )
    if built is None:
        return None  # the region alone is over the model's context: the server would refuse it
    prompt, start, original = built
    # another file's region is held to the server's cross-file threshold
    ans = await client.edit(prompt, timeout_s, cursor_index(original, ask.at - start), ask.distance > 0)
    if ans is None:
        return None
    rewritten = None if ans.region is None else _normalise(drop_cursor_tags(ans.region, original), original)
    edits = minimal_edits(original, rewritten, start) if rewritten is not None else []
    return RegionResult(ask, prompt, original, rewritten, ans.score, ans.above_threshold, edits)


async def ask(
    ls: EditLanguageServer, p: Plan, on_kept: Callable[[RegionResult], None] | None
) -> list[RegionResult]:
    """Every region asked at once (the server batches equal decode plans), the best one first with a
    head start, the other files' once they are planned; each answer is vetted as it arrives and,
    when kept, handed to ``on_kept`` right away. Results in arrival order."""
    timeout = ls.settings.next_edit_timeout_ms / 1000

    asked = [0]

    def start(a: Ask) -> asyncio.Future:
        a.seq, asked[0] = asked[0], asked[0] + 1
        return asyncio.ensure_future(_ask_one(ls.model, a, p.history, timeout))

    first, rest = p.asks[:1], p.asks[1:]
    pending = {start(a) for a in first}
    if on_kept is not None and rest:
        # the best region alone first: the server's worker takes it before the rest arrive, so it
        # decodes as a batch of one and is shown at once; the rest share the next batch
        await asyncio.sleep(FIRST_ALONE_S)
    pending |= {start(a) for a in rest}
    later = asyncio.ensure_future(p.later()) if p.later is not None else None
    lead: asyncio.Future | None = None  # the nearest other file's region, asked alone
    held: list[Ask] = []  # the other files' rest, asked once the lead is answered
    results: list[RegionResult] = []
    try:
        while pending or later is not None:
            done, _ = await asyncio.wait(
                pending | ({later} if later is not None else set()), return_when=asyncio.FIRST_COMPLETED
            )
            for fut in done:
                if fut is later:
                    later = None
                    others = fut.result()
                    if others:
                        # alone, it decodes as a batch of one as soon as the server is free, so the
                        # first edit in another file shows quickly; the rest share the next batch
                        lead, held = start(others[0]), others[1:]
                        pending.add(lead)
                    continue
                pending.discard(fut)
                if fut is lead:
                    pending |= {start(a) for a in held}
                    lead, held = None, []
                r = fut.result()
                if r is None:
                    continue
                results.append(r)
                if _stale(r):
                    continue  # a newer request is coming
                r.rejected = vet(r)
                if on_kept is not None and rank([r]):
                    on_kept(r)
    finally:
        for t in [*pending, *([later] if later is not None else [])]:
            t.cancel()
    return results


# ---- reply ---------------------------------------------------------------------------------------
def reply(
    ls: EditLanguageServer, sid: str, doc: Document, version: int, results: list[RegionResult]
) -> Suggestion:
    """The kept edits, ranked (``rank``), logged to local telemetry."""
    results = sorted(
        (r for r in results if not _stale(r)), key=lambda r: r.ask.seq
    )  # as asked; stale dropped
    for r in results:
        r.rejected = vet(r) if r.rejected is None else r.rejected
    kept = rank(results)
    if kept:
        ls.telemetry.suggestion(
            sid,
            "next_edit",
            doc.uri,
            doc.language_id,
            {"prompts": [r.prompt for r in kept]},
            [
                {
                    "uri": r.uri,
                    "region": [r.region.first_line, r.region.last_line],
                    "rewritten": r.rewritten,
                    "score": r.score,
                    "edits": len(r.edits),  # maps a didAccept's editIndex to its region (telemetry_log)
                }
                for r in kept
            ],
            kept[0].score,
        )
    return Suggestion(sid, doc, version, kept, results)


async def suggest(
    ls: EditLanguageServer,
    sid: str,
    doc: Document,
    line: int,
    char: int,
    auto: bool = False,
    on_kept: Callable[[RegionResult], None] | None = None,
) -> Suggestion:
    """Next edits for a cursor position: plan -> ask -> vet (as answers arrive) -> reply. ``auto``
    requests (the client's own, after an edit) ask the model only when the edits since the last
    request could propagate (``gate``). ``sid`` is the request's one id (made by its handler): the
    telemetry row, the partial notifications, the reply and ``applyEdits`` all carry it."""
    if not ls.active(ls.settings.enable_next_edit, doc):
        if ls.model is not None and ls.model.state != READY:
            ls.model.nudge()
        return Suggestion(sid, doc, doc.version, skipped="not ready")
    version = doc.version
    ls.viewed.view(doc.uri, ls.path_of(doc.uri), doc.text, line)
    p = plan(ls, doc, doc.offset_at(line, char), auto)
    if isinstance(p, str):
        return Suggestion(sid, doc, version, skipped=p)
    results = await ask(ls, p, on_kept)
    ls.send_status()
    return reply(ls, sid, doc, version, results)


def region_info(r: RegionResult, kept: list[RegionResult]) -> dict:
    """Diagnostic summary of one asked region (the nextEdit reply's ``regions``); ``cursor`` is where
    its prompt put ``<|cursor|>`` (for a use region: the use)."""
    line, character = r.ask.doc.position_at(r.ask.at)
    return {
        "uri": r.uri,
        "range": {
            "start": {"line": r.region.first_line, "character": 0},
            "end": {"line": r.region.last_line + 1, "character": 0},
        },
        "cursor": {"line": line, "character": character},
        "reason": r.region.reason,
        "distance": r.ask.distance,
        "score": r.score,
        "aboveThreshold": r.above_threshold,
        "kept": r in kept,
        "rejected": r.rejected,
    }
