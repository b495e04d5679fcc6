/**
 * Partial accept: which prefix of a suggestion "accept next word" / "accept next line" takes.
 *
 * Design decisions:
 * - A word is any leading whitespace (newlines included, so accepting a word can move to the next
 *   line) followed by one run of word characters or one run of punctuation; this matches how
 *   VS Code's own accept-next-word steps through ghost text closely enough for telemetry.
 * - A line is the text up to (not including) the first line break; when the suggestion starts with
 *   a line break, the break plus the following line, so repeated "accept line" walks down the
 *   suggestion one line at a time instead of getting stuck on an empty first line.
 * - Word characters are Unicode letters, digits and underscore.
 * - The Neovim plugin implements the same rules (lua/editserver/partial.lua); both are tested.
 */

import type { PartialKind } from "./protocol";

const WORD = /^\s*(?:[\p{L}\p{N}_]+|[^\p{L}\p{N}_\s]+)/u;

export function nextWordSlice(text: string): string {
  const m = WORD.exec(text);
  return m ? m[0] : text; // only whitespace left: take it all
}

export function nextLineSlice(text: string): string {
  const m = /^(\r?\n)?[^\r\n]*/.exec(text);
  return m ? m[0] : text;
}

export function partialSlice(text: string, kind: PartialKind): string {
  return kind === "word" ? nextWordSlice(text) : nextLineSlice(text);
}
