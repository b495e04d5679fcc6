/**
 * Next edits in other files: a reply's edits grouped by file, and what the editor says about them.
 *
 * Design decisions:
 * - Each edit of a nextEdit reply names its file; the edited file's are drawn (logic/nextEdit.ts),
 *   the others are kept here in the server's order (files that import the edited one first, then
 *   by distance in the import graph), one group per file, and announced as "N more in M files".
 * - Tab past the last in-file edit asks the language server to apply the next file's edits
 *   (`editserver/applyEdits`, which refuses them if the file changed since they were computed) and
 *   opens it at the first one; the list command shows them all.
 */

import type { NextEditResult, Range } from "./protocol";

export const APPLY_EDITS_METHOD = "editserver/applyEdits";

export interface OtherFile {
  uri: string;
  edits: { range: Range; newText: string }[];
}

export interface OtherFiles {
  id: string;
  files: OtherFile[];
}

/** The reply's edits outside `uri`, grouped by file in the reply's order. */
export function otherFiles(result: NextEditResult, uri: string): OtherFile[] {
  const out: OtherFile[] = [];
  for (const e of result.edits) {
    const u = e.textDocument?.uri;
    if (!u || u === uri) continue;
    let f = out.find((x) => x.uri === u);
    if (!f) {
      f = { uri: u, edits: [] };
      out.push(f);
    }
    if (!f.edits.some((x) => JSON.stringify(x.range) === JSON.stringify(e.range))) {
      f.edits.push({ range: e.range, newText: e.newText });
    }
  }
  return out;
}

/** Merge a partial or final reply into what is kept: a new id replaces it, a reply with no other
 * file's edits leaves it as it is. */
export function mergeOthers(kept: OtherFiles | undefined, result: NextEditResult, uri: string): OtherFiles | undefined {
  const files = otherFiles(result, uri);
  if (files.length === 0) return kept;
  if (!kept || kept.id !== result.id) return { id: result.id, files };
  for (const f of files) {
    const have = kept.files.find((x) => x.uri === f.uri);
    if (!have) kept.files.push(f);
    else for (const e of f.edits) if (!have.edits.some((x) => JSON.stringify(x.range) === JSON.stringify(e.range))) have.edits.push(e);
  }
  const rank = new Map(files.map((f, i) => [f.uri, i] as const));
  kept.files.sort((a, b) => (rank.get(a.uri) ?? Infinity) - (rank.get(b.uri) ?? Infinity));
  return kept;
}

/** "7 more in 4 files", or "" when nothing is kept. */
export function moreText(kept: OtherFiles | undefined): string {
  if (!kept || kept.files.length === 0) return "";
  const n = kept.files.reduce((s, f) => s + f.edits.length, 0);
  return `${n} more in ${kept.files.length} file${kept.files.length === 1 ? "" : "s"}`;
}
