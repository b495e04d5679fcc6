"""Next-edit suggestions: prompts from history and syntax, minimal edits, multi-location ranking.

Design decisions:
- Regions asked about: the syntax-snapped region at the cursor, plus candidate regions elsewhere in
  the file (lsp/context.py): occurrences of identifiers the latest edits removed (the old name of a
  rename) and call sites of the function whose definition header was just edited (a dependent
  change). All prompts go to ``/v1/edit/completions`` concurrently, so the server can batch them.
- Each prompt is Inception's layout (``protocol.prompt.build_prompt``): recently viewed snippets
  (including definitions from other open files), the current file clipped to ``context_lines`` around
  the region, the region with ``<|cursor|>`` (at the cursor, or at the occurrence for candidates) and
  the coalesced edit history as unified diffs.
- A rewritten region becomes minimal range edits: a line diff (difflib) first, then each changed
  block trimmed to the characters that really differ, so clients show small, precise edits and an
  unchanged line is never touched.
- Selectivity: answers the server marks below its threshold, unchanged regions, rewrites that wipe
  the region and rewrites that turn a file that parsed into one with syntax errors (one full parse
  per answered region, never per keystroke) are dropped; the rest are ranked by score, best first. The reply's
  ``score`` is the best kept region's score (0 when nothing is kept).
"""

from __future__ import annotations

import asyncio
import difflib
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lsp.client import READY, EditAnswer, ModelClient
from lsp.context import ParsedDocument, Region, candidate_regions, definitions_for, node_name, snap_region
from lsp.documents import Document
from protocol.prompt import CURSOR, EditPrompt, Snippet, build_prompt

if TYPE_CHECKING:
    from lsp.server import EditLanguageServer


@dataclass
class RangeEdit:
    start: int  # code point offsets in the document
    end: int
    new_text: str


@dataclass
class RegionResult:
    region: Region
    prompt: str
    original: str
    rewritten: str | None
    score: float
    above_threshold: bool
    edits: list[RangeEdit] = field(default_factory=list)
    rejected: str | None = None  # why the LSP will not show it (see ``vet``)


@dataclass
class Suggestion:
    id: str
    doc: Document
    version: int  # the document version the edits apply to
    kept: list[RegionResult] = field(default_factory=list)  # shown, best score first
    results: list[RegionResult] = field(default_factory=list)  # every region asked about


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
) -> tuple[str, int, str]:
    """(prompt, region start offset, region text) for one region; ``cursor`` is a document offset."""
    start, end = region_offsets(doc, region)
    above_start, _ = doc.line_bounds(max(0, region.first_line - context_lines))
    below_last = min(doc.line_count - 1, region.last_line + context_lines)
    _, below_end = doc.line_bounds(below_last)
    region_text = doc.text[start:end]
    p = EditPrompt(
        file_path=path,
        above=doc.text[above_start:start],
        region=region_text,
        cursor=max(0, min(cursor - start, len(region_text))),
        below=doc.text[end:below_end],
        snippets=snippets,
        history=history,
    )
    return build_prompt(p), start, region_text


def minimal_edits(original: str, rewritten: str, base: int = 0) -> list[RangeEdit]:
    """The smallest range edits that turn ``original`` into ``rewritten`` (offsets shifted by base)."""
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
        s = 0
        while s < len(old) - p and s < len(new) - p and old[len(old) - 1 - s] == new[len(new) - 1 - s]:
            s += 1
        out.append(RangeEdit(base + offs[i1] + p, base + offs[i2] - s, new[p : len(new) - s]))
    return out


def _normalise(rewritten: str, original: str) -> str:
    """Match the original's trailing newline so a missing final newline is not an edit."""
    if original.endswith("\n") and not rewritten.endswith("\n"):
        return rewritten + "\n"
    if not original.endswith("\n") and rewritten.endswith("\n"):
        return rewritten[:-1]
    return rewritten


def plan_regions(
    doc: Document,
    parsed: ParsedDocument | None,
    cursor: int,
    names: set[str],
    min_lines: int,
    max_lines: int,
    max_candidates: int,
) -> list[tuple[Region, int]]:
    """(region, cursor offset for its prompt): the cursor's region first, then candidates."""
    line, _ = doc.position_at(cursor)
    main = snap_region(doc, parsed, line, min_lines, max_lines)
    out = [(main, cursor)]
    for r in candidate_regions(doc, parsed, names, main, max_candidates):
        at = _first_occurrence(doc, r, names)
        out.append((r, at))
    return out


def _first_occurrence(doc: Document, region: Region, names: set[str]) -> int:
    start, end = region_offsets(doc, region)
    text = doc.text[start:end]
    hits = [text.find(n) for n in names if text.find(n) >= 0]
    return start + (min(hits) if hits else 0)


async def ask_regions(
    client: ModelClient,
    doc: Document,
    path: str,
    plans: list[tuple[Region, int]],
    snippets: list[Snippet],
    history: str,
    context_lines: int,
    timeout_s: float,
) -> list[RegionResult]:
    """Ask the model about every region concurrently; results in the order of ``plans``."""
    prompts = [build_region_prompt(doc, path, r, at, snippets, history, context_lines) for r, at in plans]
    answers: list[EditAnswer | None] = await asyncio.gather(
        *(client.edit(p, timeout_s) for p, _, _ in prompts)
    )
    results = []
    for (region, _), (prompt, start, original), ans in zip(plans, prompts, answers):
        if ans is None:
            continue
        rewritten = None if ans.region is None else _normalise(ans.region.replace(CURSOR, ""), original)
        edits = minimal_edits(original, rewritten, start) if rewritten is not None else []
        results.append(
            RegionResult(region, prompt, original, rewritten, ans.score, ans.above_threshold, edits)
        )
    return results


def rank(results: list[RegionResult]) -> list[RegionResult]:
    """Kept results (cleared the threshold and changed something), best score first."""
    kept = [r for r in results if r.above_threshold and r.edits and r.rejected is None]
    return sorted(kept, key=lambda r: -r.score)


def vet(doc: Document, parsed: ParsedDocument | None, r: RegionResult) -> str | None:
    """Why a rewrite must not be shown, or None. Guards against what a confident but wrong model does:
    wiping the region, or breaking code that parsed (checked with a parse of the edited file)."""
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
        if node.has_error or node.type not in ("identifier", "string", "comment"):
            stack.extend(node.children)
    return errors, empty


async def suggest(ls: EditLanguageServer, doc: Document, line: int, char: int) -> Suggestion:
    """Next edits for a cursor position (all regions asked concurrently, vetted, ranked)."""
    sid = uuid.uuid4().hex
    if not ls.active(ls.settings.enable_next_edit, doc):
        if ls.client is not None and ls.client.state != READY:
            ls.client.nudge()
        return Suggestion(sid, doc, doc.version)
    s = ls.settings
    version = doc.version
    cursor = doc.offset_at(line, char)
    ls.viewed.view(doc.uri, ls.path_of(doc.uri), doc.text, line)
    parsed = ls.parsed.get(doc.uri)
    removed, _added = ls.history.changed_identifiers(2)
    names = set(removed)
    newest = ls.history.recent(1)
    if parsed is not None and newest and newest[0].uri == doc.uri:
        d = parsed.definition_at_line(newest[0].first_line)
        if d is not None and node_name(d):
            names.add(node_name(d))  # its call sites must follow a signature change
    plans = plan_regions(doc, parsed, cursor, names, s.region_min_lines, s.region_max_lines, s.max_candidates)
    snippets = ls.viewed.snippets(doc.uri, s.recent_snippets)
    if parsed is not None:
        r0 = plans[0][0]
        near = {
            n.text.decode("utf-8", "replace")
            for n in parsed.identifiers(r0.first_line, r0.last_line)
            if n.text
        }
        snippets = [Snippet(p, c) for p, c in definitions_for(near, ls.others(doc.uri))][:3] + snippets
    results = await ask_regions(
        ls.client,
        doc,
        ls.path_of(doc.uri),
        plans,
        snippets,
        ls.history.render(s.history_prompt_events),
        s.context_lines,
        s.next_edit_timeout_ms / 1000,
    )
    ls.send_status()
    if doc.version != version:
        return Suggestion(sid, doc, version, [], results)  # the text moved on: offsets are stale
    for r in results:
        r.rejected = vet(doc, parsed, r)
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
                    "region": [r.region.first_line, r.region.last_line],
                    "rewritten": r.rewritten,
                    "score": r.score,
                }
                for r in kept
            ],
            kept[0].score,
        )
    return Suggestion(sid, doc, version, kept, results)


def region_info(r: RegionResult, kept: list[RegionResult]) -> dict:
    """Diagnostic summary of one asked region (the nextEdit reply's ``regions``)."""
    return {
        "range": {
            "start": {"line": r.region.first_line, "character": 0},
            "end": {"line": r.region.last_line + 1, "character": 0},
        },
        "reason": r.region.reason,
        "score": r.score,
        "aboveThreshold": r.above_threshold,
        "kept": r in kept,
        "rejected": r.rejected,
    }
