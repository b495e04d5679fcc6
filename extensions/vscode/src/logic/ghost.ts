/**
 * Ghost text (inline completions) rules that VS Code does not enforce by itself, as pure data.
 *
 * Design decisions:
 * - Stale text: a suggestion is kept only while what the user typed since it was asked for (from
 *   its anchor to the cursor) is a prefix of it. Answers that arrive after a contradicting key are
 *   dropped before VS Code sees them, and the shown one is rejected on that key (didReject), so
 *   nothing we remember resurrects it; partial accepts count from the document, not from a
 *   counter that typing-through would put out of step.
 * - Quiet after a full accept that completes the line (nothing but blanks after the cursor): the
 *   editor's own automatic request right after the accept gets no item, as in the Neovim plugin (a
 *   suggestion nobody asked for at the end of a finished line is noise, a stray `)`). The next
 *   change to the document, or an explicit request (editor.action.inlineSuggest.trigger), ends it.
 */

import type { PartialKind } from "./protocol";
import { partialSlice } from "./partial";

/** What of `text` is still to be shown after the user typed `typed` since its anchor; undefined
 * when the typing contradicts it (or the cursor moved before the anchor: `typed` undefined). */
export function ghostRemainder(text: string, typed: string | undefined): string | undefined {
  if (typed === undefined || !text.startsWith(typed)) return undefined;
  return text.slice(typed.length);
}

/** What "accept next word/line" takes from a ghost text, given what was typed since its anchor. */
export function ghostPartial(text: string, typed: string | undefined, kind: PartialKind): string | undefined {
  const rest = ghostRemainder(text, typed);
  if (!rest) return undefined;
  return partialSlice(rest, kind) || undefined;
}

/** Inline items still worth showing: those whose text continues what was typed since the request. */
export function liveItems<T>(items: T[], textOf: (item: T) => string, typed: string | undefined): T[] {
  return items.filter((item) => ghostRemainder(textOf(item), typed) !== undefined);
}

/** Quiet period after a full accept that completed the line. */
export class GhostGate {
  private quiet: { uri: string; version: number } | undefined;

  /** A full accept ran in `uri` at `version`; `restOfLine` is the text after the cursor. */
  accepted(uri: string, version: number, restOfLine: string): void {
    this.quiet = restOfLine.trim() === "" ? { uri, version } : undefined;
  }

  /** May an item be shown for `uri` at `version`? `explicit`: the user asked for one. */
  allows(uri: string, version: number, explicit: boolean): boolean {
    const q = this.quiet;
    if (!q) return true;
    if (explicit || q.uri !== uri || q.version !== version) {
      if (explicit || q.uri === uri) this.quiet = undefined; // typed again, or asked: quiet is over
      return true;
    }
    return false;
  }

  get isQuiet(): boolean {
    return this.quiet !== undefined;
  }
}
