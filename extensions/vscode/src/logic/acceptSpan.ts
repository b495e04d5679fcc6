/**
 * Partial accept of a proposed next edit, by token span: "word" takes the edit's next changed
 * token span, "line" every span starting on that span's line (the same rule as the Neovim plugin).
 *
 * Design decisions:
 * - The unit is a hunk of the edit's token diff (logic/hunks.ts), never a character count: the
 *   document then only ever holds whole old tokens or whole new tokens, so a line never shows a
 *   state that neither the old nor the new text has inside a token (`itemg = ...`).
 * - The spans not taken are carried over, moved with the text, instead of diffing the half-applied
 *   text again: what is drawn next is exactly what the next accept takes, and an LCS re-diff cannot
 *   re-pair tokens differently halfway through.
 * - Arithmetic on offsets inside the edit's old text (one dimension), converted back to positions
 *   at the end: no line/column shifting across several spans on the same line.
 * - The edits the editor applies are the taken spans in the document's current coordinates, all
 *   at once (VS Code's edit builder applies a set of non-overlapping ranges atomically).
 */

import { endOf, partialHunks, type Hunk } from "./hunks";
import { editHunks, type PlannedEdit } from "./nextEdit";
import type { PartialKind, Position } from "./protocol";

export interface SpanAccept {
  /** Replacements to apply, in the document's coordinates before the accept. */
  changes: Hunk[];
  /** What the taken spans insert, joined (didAccept's acceptedText). */
  acceptedText: string;
  /** Where the cursor goes: right after the first taken span's new text. */
  cursor: Position;
  /** The edit with its remaining spans (undefined once none is left). */
  remaining: PlannedEdit | undefined;
  /** The edit's text after the accept, as one replacement of its range (to shift other edits). */
  asApplied: PlannedEdit;
}

/** Offset of `p` inside `text`, which starts at `start` in the document. */
export function offsetIn(start: Position, text: string, p: Position): number {
  if (p.line === start.line) return p.character - start.character;
  let off = 0;
  let line = start.line;
  while (line < p.line) {
    const nl = text.indexOf("\n", off);
    if (nl === -1) return text.length;
    off = nl + 1;
    line++;
  }
  return off + p.character;
}

interface Span {
  from: number;
  to: number;
  newText: string;
}

/** Accept the next word ("word") or line ("line") of token spans of `e`. */
export function acceptSpans(e: PlannedEdit, kind: PartialKind): SpanAccept | undefined {
  const all = editHunks(e);
  const take = new Set(partialHunks(all, kind));
  if (take.size === 0) return undefined;
  const start = e.range.start;
  const spans = all
    .map((h) => ({ h, s: { from: offsetIn(start, e.oldText, h.range.start), to: offsetIn(start, e.oldText, h.range.end), newText: h.newText } }))
    .sort((a, b) => a.s.from - b.s.from);
  let text = e.oldText;
  let delta = 0; // how far the taken spans so far moved the text after them
  const kept: Span[] = [];
  let cursorOff: number | undefined;
  for (const { h, s } of spans) {
    const from = s.from + delta;
    if (!take.has(h)) {
      kept.push({ from, to: s.to + delta, newText: s.newText });
      continue;
    }
    text = text.slice(0, from) + s.newText + text.slice(s.to + delta);
    cursorOff ??= from + s.newText.length;
    delta += s.newText.length - (s.to - s.from);
  }
  const at = (off: number) => endOf(start, text.slice(0, off));
  const changes = spans.filter(({ h }) => take.has(h)).map(({ h }) => h);
  const range = { start, end: endOf(start, text) };
  const remaining: PlannedEdit | undefined = kept.length
    ? {
        index: e.index,
        range,
        oldText: text,
        newText: e.newText,
        hunks: kept.map((k) => ({ range: { start: at(k.from), end: at(k.to) }, newText: k.newText })),
      }
    : undefined;
  return {
    changes,
    acceptedText: changes.map((h) => h.newText).join(""),
    cursor: at(cursorOff ?? 0),
    remaining,
    asApplied: { index: e.index, range: e.range, oldText: e.oldText, newText: text },
  };
}
