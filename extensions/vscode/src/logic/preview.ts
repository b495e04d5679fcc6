/**
 * How a proposed next edit reads in VS Code, as pure data: inline tokens for a small one-line
 * change, a line-by-line preview for a multi-line change or a rewrite of most of a line.
 *
 * Design decisions:
 * - VS Code's stable API has no virtual lines (Neovim's preview below the text), and a CodeLens or
 *   any other view zone pushes the text below it down whenever a suggestion appears or goes. So the
 *   preview stays on the lines it changes: each old line that has a counterpart in the new text
 *   gets `→ new line` after it (its changed tokens struck through in the text), lines the edit adds
 *   are listed after the line above them (`＋ line ⏎ line`), lines it removes are struck whole. The
 *   hover on any of those lines shows the whole new region as code. Nothing is drawn in the gutter.
 * - An inline completion item with a replacement range was not used: VS Code requires that range to
 *   start and end on the cursor's line, so it cannot show a multi-line rewrite.
 * - Small one-line changes (a rename: one or two words) read best inline: the old tokens struck,
 *   the new tokens right after them. A one-line edit that replaces most of its line's text reads
 *   as a jumble of alternating tokens that way, so it gets the `→ new line` preview too.
 * - Labels are trimmed of leading blanks (the old line's indentation already shows where they go)
 *   and cut at MAX_LABEL characters; the hover has the full text.
 */

import { blocks, type Hunk } from "./hunks";
import type { PlannedEdit } from "./nextEdit";

export const MAX_LABEL = 120;

export interface LineLabel {
  line: number;
  /** Text drawn after the line's end. */
  text: string;
}

export interface Preview {
  /** The region's lines as they will read after the edit (the hover's code block). */
  newLines: string[];
  labels: LineLabel[];
  /** Old lines the edit removes whole. */
  removed: number[];
}

/** True when `e` is shown as a line preview rather than as inline tokens. */
export function isLinePreview(e: PlannedEdit, hs: Hunk[]): boolean {
  if (e.oldText.includes("\n") || e.newText.includes("\n")) return true;
  if (hs.length < 2) return false;
  const replaced = hs.reduce((n, h) => n + (h.range.end.character - h.range.start.character), 0);
  return replaced * 2 > e.oldText.trim().length;
}

function clip(s: string): string {
  const t = s.trim();
  return t.length > MAX_LABEL ? `${t.slice(0, MAX_LABEL - 1)}…` : t;
}

/** Preview of `e`, given the document's text of its lines (`lineText(n)`). */
export function linePreview(e: PlannedEdit, lineText: (line: number) => string): Preview {
  const first = e.range.start.line;
  const last = e.range.end.line;
  const oldLines: string[] = [];
  for (let l = first; l <= last; l++) oldLines.push(lineText(l));
  const prefix = oldLines[0]!.slice(0, e.range.start.character);
  const suffix = oldLines[oldLines.length - 1]!.slice(e.range.end.character);
  const newLines = (prefix + e.newText + suffix).split("\n");
  const text = new Map<number, string[]>();
  const put = (line: number, s: string) => text.set(line, [...(text.get(line) ?? []), s]);
  const removed: number[] = [];
  for (const [i1, i2, j1, j2] of blocks(oldLines, newLines)) {
    const paired = Math.min(i2 - i1, j2 - j1);
    for (let k = 0; k < paired; k++) put(first + i1 + k, `→ ${clip(newLines[j1 + k]!)}`);
    for (let i = i1 + paired; i < i2; i++) removed.push(first + i);
    if (j2 - j1 > paired) {
      const added = newLines.slice(j1 + paired, j2).map(clip).join(" ⏎ ");
      // after the block's last old line, else the line above the insertion, else the first line
      const at = i2 > i1 ? first + i2 - 1 : i1 > 0 ? first + i1 - 1 : first;
      put(at, `＋ ${added}`);
    }
  }
  const labels = [...text.entries()].sort((a, b) => a[0] - b[0]).map(([line, parts]) => ({ line, text: parts.join("  ") }));
  return { newLines, labels, removed };
}
