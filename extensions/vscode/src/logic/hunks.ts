/**
 * Token hunks of a proposed edit, as pure data: what is drawn inline, what is previewed, and what
 * "accept next word/line" applies (the same rules as the Neovim plugin's diff.lua).
 *
 * Design decisions:
 * - Tokens are runs of word characters (letters, digits, `_`, any non-ASCII), runs of blanks, a
 *   line break, or one other character, so a rename is one replaced word, never a few letters.
 * - Lines first, then tokens (longest common subsequences): an inserted line stays a line, never
 *   glued to a neighbour's tokens; blocks too long for that are one hunk.
 * - A one-line edit is drawn inline (old tokens struck, new tokens after them); an edit whose old
 *   or new text spans lines, or a one-line edit that rewrites most of its line, is previewed line
 *   by line (logic/preview.ts).
 * - Partial accept applies whole hunks: "word" the next one, "line" all hunks starting on its line,
 *   so the document only ever holds old or new tokens, never half of one.
 */

import type { Position, Range } from "./protocol";

export interface Hunk {
  /** The old tokens' range in the document. */
  range: Range;
  newText: string;
}

const MAX_CELLS = 250_000;

export function tokens(s: string): string[] {
  return s.match(/[\p{L}\p{N}_\u0080-\uffff]+|[ \t]+|\r?\n|[^]/gu) ?? [];
}

/** Position after `text` inserted at `p`. */
export function endOf(p: Position, text: string): Position {
  const lines = text.split("\n");
  if (lines.length === 1) return { line: p.line, character: p.character + text.length };
  return { line: p.line + lines.length - 1, character: lines[lines.length - 1]!.length };
}

/** Matching index pairs of a longest common subsequence of `x` and `y`. */
function lcsPairs<T>(x: T[], y: T[]): [number, number][] {
  const n = x.length;
  const m = y.length;
  const lcs: number[][] = Array.from({ length: n + 1 }, () => new Array<number>(m + 1).fill(0));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lcs[i]![j] = x[i] === y[j] ? lcs[i + 1]![j + 1]! + 1 : Math.max(lcs[i + 1]![j]!, lcs[i]![j + 1]!);
    }
  }
  const out: [number, number][] = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) {
      out.push([i, j]);
      i++;
      j++;
    } else if (lcs[i + 1]![j]! >= lcs[i]![j + 1]!) i++;
    else j++;
  }
  return out;
}

/** Changed blocks [xFrom, xTo, yFrom, yTo) between the LCS matches, in order. */
export function blocks<T>(x: T[], y: T[]): [number, number, number, number][] {
  const out: [number, number, number, number][] = [];
  let pi = 0;
  let pj = 0;
  for (const [i, j] of [...lcsPairs(x, y), [x.length, y.length] as [number, number]]) {
    if (i > pi || j > pj) out.push([pi, i, pj, j]);
    pi = i + 1;
    pj = j + 1;
  }
  return out;
}

function linesOf(s: string): string[] {
  return s.match(/[^\n]*\n|[^\n]+$/g) ?? [];
}

/** Hunks turning `oldText` (at `range`) into `newText`: changed line blocks first, then the
 * changed tokens inside each (whole lines inserted or removed stay whole). */
export function hunks(range: Range, oldText: string, newText: string): Hunk[] {
  if (oldText === newText) return [];
  const xl = linesOf(oldText);
  const yl = linesOf(newText);
  if (xl.length * yl.length > MAX_CELLS) return [{ range, newText }];
  const out: Hunk[] = [];
  const at = (k: number) => endOf(range.start, xl.slice(0, k).join(""));
  for (const [i1, i2, j1, j2] of blocks(xl, yl)) {
    const old = xl.slice(i1, i2).join("");
    const neu = yl.slice(j1, j2).join("");
    const start = at(i1);
    if (!old || !neu) {
      out.push({ range: { start, end: endOf(start, old) }, newText: neu });
      continue;
    }
    const x = tokens(old);
    const y = tokens(neu);
    if (x.length * y.length > MAX_CELLS) {
      out.push({ range: { start, end: endOf(start, old) }, newText: neu });
      continue;
    }
    for (const [a1, a2, b1, b2] of blocks(x, y)) {
      const s = endOf(start, x.slice(0, a1).join(""));
      out.push({ range: { start: s, end: endOf(s, x.slice(a1, a2).join("")) }, newText: y.slice(b1, b2).join("") });
    }
  }
  return out;
}

export function isPreview(oldText: string, newText: string): boolean {
  return oldText.includes("\n") || newText.includes("\n");
}

/** The hunks "accept next word/line" applies, in document order (the first hunk, or its line's). */
export function partialHunks(all: Hunk[], kind: "word" | "line"): Hunk[] {
  const sorted = [...all].sort((a, b) =>
    a.range.start.line !== b.range.start.line
      ? a.range.start.line - b.range.start.line
      : a.range.start.character - b.range.start.character,
  );
  if (sorted.length === 0) return [];
  if (kind === "word") return [sorted[0]!];
  return sorted.filter((h) => h.range.start.line === sorted[0]!.range.start.line);
}
