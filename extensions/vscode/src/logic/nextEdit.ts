/**
 * Next edits, as pure data: how a `editserver/nextEdit` result is shown (one decoration per edit,
 * gutter markers for edits outside the viewport), the order Tab visits edits in, what Tab does at
 * a given cursor, and how the remaining edits move once one is applied.
 *
 * Design decisions:
 * - No `vscode` import: the controller converts to VS Code types at the edge, tests drive this.
 * - Tab visits edits in document order starting at the cursor and wrapping around (the server
 *   ranks by score, but jumping back and forth across the file by score is disorienting).
 * - Tab applies the edit when the cursor is on one of its lines (after a jump the cursor sits at
 *   its start), otherwise it jumps; so "Tab, Tab" = go there, apply.
 * - Edits overlapping an applied edit are dropped (their text no longer exists); the others are
 *   shifted by the applied edit's line/column delta, so several edits can be applied in a row
 *   without asking the server again.
 * - An edit partly accepted (logic/acceptSpan.ts) carries its remaining token spans, which move with
 *   the text like its range does.
 * - Off-viewport edits get a gutter marker on the first/last visible line pointing towards them.
 */

import { hunks, type Hunk } from "./hunks";
import type { NextEditResult, Position, Range } from "./protocol";

export interface PlannedEdit {
  /** Index into the server's `edits` array (what didAccept's editIndex refers to). */
  index: number;
  range: Range;
  newText: string;
  oldText: string;
  /** Token spans still to accept, once a partial accept took some (else diffed from old/new). */
  hunks?: Hunk[];
}

/** The token spans of `e` that remain to be accepted, in document order. */
export function editHunks(e: PlannedEdit): Hunk[] {
  return e.hunks ?? hunks(e.range, e.oldText, e.newText);
}

export type EditKind = "insert" | "delete" | "replace";

export interface EditDecoration {
  index: number;
  kind: EditKind;
  /** Text the decoration spans (the text being replaced or deleted; empty range for inserts). */
  range: Range;
  /** One-line label drawn after the range: the first line of the new text (+ "+N lines"). */
  label: string;
  /** Full new text for the hover. */
  hover: string;
  inViewport: boolean;
}

export interface GutterMarker {
  line: number;
  direction: "up" | "down";
  /** Edits this marker points at, in document order. */
  indices: number[];
}

export interface DecorationPlan {
  edits: EditDecoration[];
  gutter: GutterMarker[];
}

export interface LineSpan {
  start: number;
  end: number; // inclusive
}

export function comparePos(a: Position, b: Position): number {
  return a.line !== b.line ? a.line - b.line : a.character - b.character;
}

/** Edits of a result for one document, with the text each one replaces (read via `getText`). */
export function planEdits(result: NextEditResult, uri: string, getText: (r: Range) => string): PlannedEdit[] {
  const out: PlannedEdit[] = [];
  result.edits.forEach((e, index) => {
    if (e.textDocument.uri !== uri) return;
    const range = comparePos(e.range.start, e.range.end) <= 0 ? e.range : { start: e.range.end, end: e.range.start };
    const oldText = getText(range);
    if (oldText === e.newText) return; // a no-op is nothing to show
    out.push({ index, range, newText: e.newText, oldText });
  });
  return out;
}

export function editKind(e: PlannedEdit): EditKind {
  if (e.oldText.length === 0) return "insert";
  if (e.newText.length === 0) return "delete";
  return "replace";
}

export function labelFor(newText: string): string {
  const lines = newText.split(/\r?\n/);
  const first = lines[0] === "" && lines.length > 1 ? `⏎${lines[1]}` : lines[0];
  const rest = lines.length - (lines[0] === "" && lines.length > 1 ? 2 : 1);
  return rest > 0 ? `${first} … (+${rest} line${rest === 1 ? "" : "s"})` : first;
}

function inSpans(line: number, visible: LineSpan[]): boolean {
  return visible.some((v) => line >= v.start && line <= v.end);
}

export function planDecorations(edits: PlannedEdit[], visible: LineSpan[]): DecorationPlan {
  const decorations: EditDecoration[] = edits.map((e) => ({
    index: e.index,
    kind: editKind(e),
    range: e.range,
    label: labelFor(e.newText),
    hover: e.newText,
    inViewport: visible.length === 0 || inSpans(e.range.start.line, visible) || inSpans(e.range.end.line, visible),
  }));
  const gutter: GutterMarker[] = [];
  if (visible.length > 0) {
    const top = Math.min(...visible.map((v) => v.start));
    const bottom = Math.max(...visible.map((v) => v.end));
    const sorted = [...edits].sort((a, b) => comparePos(a.range.start, b.range.start));
    const above = sorted.filter((e) => e.range.end.line < top && !inSpans(e.range.start.line, visible));
    const below = sorted.filter((e) => e.range.start.line > bottom && !inSpans(e.range.end.line, visible));
    if (above.length) gutter.push({ line: top, direction: "up", indices: above.map((e) => e.index) });
    if (below.length) gutter.push({ line: bottom, direction: "down", indices: below.map((e) => e.index) });
  }
  return { edits: decorations, gutter };
}

/** Document order starting at the first edit that ends at or after the cursor, wrapping around. */
export function jumpOrder(edits: PlannedEdit[], cursor: Position): number[] {
  const sorted = [...edits].sort((a, b) => comparePos(a.range.start, b.range.start));
  const first = sorted.findIndex((e) => comparePos(e.range.end, cursor) >= 0);
  const pivot = first === -1 ? 0 : first;
  return [...sorted.slice(pivot), ...sorted.slice(0, pivot)].map((e) => e.index);
}

export type TabAction =
  | { kind: "none" }
  | { kind: "jump"; index: number; position: Position }
  | { kind: "apply"; index: number };

export function cursorOnEdit(e: PlannedEdit, cursor: Position): boolean {
  return cursor.line >= e.range.start.line && cursor.line <= e.range.end.line;
}

export function tabAction(edits: PlannedEdit[], cursor: Position): TabAction {
  if (edits.length === 0) return { kind: "none" };
  const here = edits.find((e) => cursorOnEdit(e, cursor));
  if (here) return { kind: "apply", index: here.index };
  const target = edits.find((e) => e.index === jumpOrder(edits, cursor)[0]);
  return target ? { kind: "jump", index: target.index, position: target.range.start } : { kind: "none" };
}

/** Where `p` ends up after `applied` replaced its range with its new text (p after the range). */
function shiftPos(p: Position, applied: PlannedEdit): Position {
  const newLines = applied.newText.split("\n");
  const end = applied.range.end;
  const lineDelta = applied.range.start.line + newLines.length - 1 - end.line;
  if (p.line !== end.line) return { line: p.line + lineDelta, character: p.character };
  const newEndChar =
    newLines.length === 1 ? applied.range.start.character + newLines[0]!.length : newLines[newLines.length - 1]!.length;
  return { line: p.line + lineDelta, character: newEndChar + (p.character - end.character) };
}

/** The cursor position right after the applied text. */
export function endOfApplied(applied: PlannedEdit): Position {
  return shiftPos(applied.range.end, applied);
}

function shiftRange(r: Range, applied: PlannedEdit): Range {
  return { start: shiftPos(r.start, applied), end: shiftPos(r.end, applied) };
}

/** `e` (wholly after `applied`) moved with the text, its remaining token spans too. */
function shifted(e: PlannedEdit, applied: PlannedEdit): PlannedEdit {
  const out: PlannedEdit = { ...e, range: shiftRange(e.range, applied) };
  if (e.hunks) out.hunks = e.hunks.map((h) => ({ range: shiftRange(h.range, applied), newText: h.newText }));
  return out;
}

/** The edits left after applying `applied`: overlapping ones dropped, later ones shifted. */
export function remainingAfter(edits: PlannedEdit[], applied: PlannedEdit): PlannedEdit[] {
  const out: PlannedEdit[] = [];
  for (const e of edits) {
    if (e.index === applied.index) continue;
    const before = comparePos(e.range.end, applied.range.start) <= 0;
    const after = comparePos(e.range.start, applied.range.end) >= 0;
    if (before && after) continue; // two insertions at the same point: the applied one won
    if (before) out.push(e);
    else if (after) out.push(shifted(e, applied));
    // else: overlaps the applied edit, its text is gone
  }
  return out;
}
