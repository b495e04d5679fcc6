/** Other files' next edits: grouping, merging partials into the final order, the announcement. */

import { test } from "node:test";
import assert from "node:assert/strict";
import { mergeOthers, moreText, otherFiles } from "../src/logic/crossFile";
import type { NextEdit, NextEditResult } from "../src/logic/protocol";

const HERE = "file:///w/shop/pricing.py";
const edit = (uri: string, line: number, text = "compute_total"): NextEdit => ({
  textDocument: { uri, version: null },
  range: { start: { line, character: 0 }, end: { line, character: 7 } },
  newText: text,
});

test("edits outside the edited file are grouped by file, in the reply's order", () => {
  const r: NextEditResult = {
    id: "a",
    score: 1,
    edits: [edit(HERE, 9), edit("file:///w/app/cart.py", 8), edit("file:///w/app/orders.py", 0), edit("file:///w/app/cart.py", 3)],
  };
  const files = otherFiles(r, HERE);
  assert.deepEqual(files.map((f) => [f.uri, f.edits.length]), [["file:///w/app/cart.py", 2], ["file:///w/app/orders.py", 1]]);
  assert.equal(moreText({ id: "a", files }), "3 more in 2 files");
  assert.equal(moreText(undefined), "");
});

test("partials merge without duplicates; the final reply sets the order; a reply without other files keeps them", () => {
  let kept = mergeOthers(undefined, { id: "a", score: 1, edits: [edit("file:///w/b.py", 1)] }, HERE);
  kept = mergeOthers(kept, { id: "a", score: 1, edits: [edit("file:///w/c.py", 2)] }, HERE);
  kept = mergeOthers(kept, { id: "a", score: 1, edits: [edit("file:///w/c.py", 2), edit("file:///w/b.py", 1)] }, HERE);
  assert.deepEqual(kept?.files.map((f) => [f.uri, f.edits.length]), [["file:///w/c.py", 1], ["file:///w/b.py", 1]]);
  assert.equal(mergeOthers(kept, { id: "b", score: 1, edits: [edit(HERE, 3)] }, HERE), kept);
  assert.equal(mergeOthers(kept, { id: "b", score: 1, edits: [edit("file:///w/d.py", 1)] }, HERE)?.id, "b");
});
