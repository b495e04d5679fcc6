/** How next edits read: inline tokens for a rename, `→ new line` previews for multi-line edits and rewrites. */

import { test } from "node:test";
import assert from "node:assert/strict";
import { hunks } from "../src/logic/hunks";
import type { PlannedEdit } from "../src/logic/nextEdit";
import { MAX_LABEL, isLinePreview, linePreview } from "../src/logic/preview";
import type { Range } from "../src/logic/protocol";

function r(sl: number, sc: number, el: number, ec: number): Range {
  return { start: { line: sl, character: sc }, end: { line: el, character: ec } };
}

const DOC = ["def f(arg):", "    out = []", "        out.append(arg)", "    return out"];
const lineText = (n: number) => DOC[n]!;

function planned(range: Range, oldText: string, newText: string): PlannedEdit {
  return { index: 0, range, oldText, newText };
}

test("a rename on one line is inline; a rewrite of most of the line is a preview", () => {
  const rename = planned(r(2, 8, 2, 23), "out.append(arg)", "out.append(item)");
  assert.equal(isLinePreview(rename, hunks(rename.range, rename.oldText, rename.newText)), false);
  const rewrite = planned(r(1, 4, 1, 12), "out = []", "res = {}");
  assert.equal(isLinePreview(rewrite, hunks(rewrite.range, rewrite.oldText, rewrite.newText)), true);
  assert.deepEqual(linePreview(rewrite, lineText).labels, [{ line: 1, text: "→ res = {}" }]);
});

test("a multi-line edit: the changed line shows its new version, the added line follows it", () => {
  const e = planned(r(2, 0, 3, 14), "        out.append(arg)\n    return out", "        out.append(item)\n        out.sort()\n    return out");
  assert.equal(isLinePreview(e, hunks(e.range, e.oldText, e.newText)), true);
  const p = linePreview(e, lineText);
  assert.deepEqual(p.newLines, ["        out.append(item)", "        out.sort()", "    return out"]);
  assert.deepEqual(p.labels, [{ line: 2, text: "→ out.append(item)  ＋ out.sort()" }]);
  assert.deepEqual(p.removed, []);
});

test("an edit that starts mid-line previews whole lines; removed lines are listed", () => {
  const e = planned(r(0, 6, 2, 23), "arg):\n    out = []\n        out.append(arg)", "item):\n    out = [item]");
  const p = linePreview(e, lineText);
  assert.deepEqual(p.newLines, ["def f(item):", "    out = [item]"]);
  assert.deepEqual(p.labels, [
    { line: 0, text: "→ def f(item):" },
    { line: 1, text: "→ out = [item]" },
  ]);
  assert.deepEqual(p.removed, [2]);
});

test("an insertion before the first line hangs on that line; long labels are cut", () => {
  const long = "x".repeat(300);
  const e = planned(r(0, 0, 0, 0), "", `${long}\n`);
  const p = linePreview(e, lineText);
  assert.equal(p.labels.length, 1);
  assert.equal(p.labels[0]!.line, 0);
  assert.ok(p.labels[0]!.text.startsWith("＋ x"));
  assert.ok(p.labels[0]!.text.length <= MAX_LABEL + 2);
});
