"""Next edits, stage 2: a prompt per planned region, the model calls, and each answer as minimal edits.

Floor 6 (see lsp/__init__.py): takes a ``Plan`` (nextedit/plan.py) and the server's state (for the
model client and the timeout); hands each ``RegionResult`` to its caller's callback the moment it
arrives. Nothing is vetted or ranked here: that is vet.py's, once.

Design decisions:
- Each prompt is Inception's layout (``protocol.prompt.build_prompt``): recently viewed snippets
  (including definitions from other open files), the region's file clipped to ``context_lines``
  around the region, the region with ``<|cursor|>`` (at the cursor, or at the use for candidates)
  and the coalesced edit history as unified diffs (which is how another file's region learns of
  the rename); held within the model's limits (lsp/rewrite.py, lsp/budget.py). A region too long
  for any answer, or over the context on its own, is not asked about.
- A rewritten region becomes minimal whole-token range edits (lsp/rewrite.py).
- The edit kind: another file's region is sent as ``edit_kind: cross_file``, so the server holds it
  to the checkpoint's cross-file threshold; the edited file's as ``in_file``.
- Streaming order: every region is asked at once (the server batches equal decode plans). When the
  caller streams, the best region's request goes first, alone (a ``FIRST_ALONE_S`` head start, so
  the server's worker decodes it as a batch of one); the other in-file regions follow together and
  share the next batch. The other files' regions come once they are planned: the nearest one alone
  (a batch of one as soon as the server is free), the rest once it is answered; so in-file edits
  come first and as fast as without them.
- The model client is looked up on the state as each request starts, never held from before: a
  settings change may have replaced it meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from editserver.lsp.model_client import ModelClient
from editserver.lsp.nextedit.plan import Ask, Plan
from editserver.lsp.rewrite import RangeEdit, build_region_prompt, minimal_edits, normalise, region_too_long
from editserver.lsp.state import ServerState
from editserver.lsp.treesitter import Region
from editserver.protocol.prompt import cursor_index, drop_cursor_tags

FIRST_ALONE_S = 0.02  # head start of the best region's request (see the module notes)


@dataclass
class RegionResult:
    ask: Ask
    prompt: str
    original: str
    rewritten: str | None
    score: float
    above_threshold: bool
    edits: list[RangeEdit] = field(default_factory=list)
    rejected: str | None = None  # why the LSP will not show it (nextedit/vet.py)

    @property
    def region(self) -> Region:
        return self.ask.region

    @property
    def uri(self) -> str:
        return self.ask.doc.uri


async def ask_region(model: ModelClient, ask: Ask, history: str, timeout_s: float) -> RegionResult | None:
    """One region's prompt, model call and minimal edits; None when it is not asked or not answered."""
    if region_too_long(ask.doc, ask.region):
        return None  # no answer could hold its rewrite (rewrite.REGION_CHARS)
    built = build_region_prompt(
        ask.doc, ask.path, ask.region, ask.at, ask.snippets, history, ask.context_lines, model.limits
    )
    if built is None:
        return None  # the region alone is over the model's context: the server would refuse it
    prompt, start, original = built
    # another file's region is held to the server's cross-file threshold
    ans = await model.edit(prompt, timeout_s, cursor_index(original, ask.at - start), ask.distance > 0)
    if ans is None:
        return None
    rewritten = None if ans.region is None else normalise(drop_cursor_tags(ans.region, original), original)
    edits = minimal_edits(original, rewritten, start) if rewritten is not None else []
    return RegionResult(ask, prompt, original, rewritten, ans.score, ans.above_threshold, edits)


async def ask(
    st: ServerState, p: Plan, on_answer: Callable[[RegionResult], None], head_start: bool = False
) -> None:
    """Every region of ``p`` asked at once, the other files' once they are planned; each answer is
    handed to ``on_answer`` as it arrives. ``head_start``: the best region goes first, alone (for a
    caller that shows answers as they come)."""
    timeout = st.settings.next_edit_timeout_ms / 1000
    asked = [0]

    def start(a: Ask) -> asyncio.Future:
        a.seq, asked[0] = asked[0], asked[0] + 1
        return asyncio.ensure_future(ask_region(st.model, a, p.history, timeout))

    first, rest = p.asks[:1], p.asks[1:]
    pending = {start(a) for a in first}
    if head_start and rest:
        # the best region alone first: the server's worker takes it before the rest arrive, so it
        # decodes as a batch of one and is shown at once; the rest share the next batch
        await asyncio.sleep(FIRST_ALONE_S)
    pending |= {start(a) for a in rest}
    later = asyncio.ensure_future(p.later()) if p.later is not None else None
    lead: asyncio.Future | None = None  # the nearest other file's region, asked alone
    held: list[Ask] = []  # the other files' rest, asked once the lead is answered
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
                if r is not None:
                    on_answer(r)
    finally:
        for t in [*pending, *([later] if later is not None else [])]:
            t.cancel()
