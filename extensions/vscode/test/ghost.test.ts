/** Ghost text rules: stale items dropped on the first contradicting key, quiet after a full accept. */

import { test } from "node:test";
import assert from "node:assert/strict";
import { GhostGate, ghostPartial, ghostRemainder, liveItems } from "../src/logic/ghost";

test("typing through the ghost keeps it; the first contradicting key makes it stale", () => {
  assert.equal(ghostRemainder("width, height)", ""), "width, height)");
  assert.equal(ghostRemainder("width, height)", "wid"), "th, height)");
  assert.equal(ghostRemainder("width, height)", "wix"), undefined);
  assert.equal(ghostRemainder("width, height)", undefined), undefined); // cursor moved before the anchor
  assert.equal(ghostRemainder("width", "width"), "");
});

test("answers that arrive after a contradicting key are dropped, not resurrected", () => {
  const items = [{ t: "width, height)" }, { t: "x)" }];
  assert.deepEqual(liveItems(items, (i) => i.t, "w").map((i) => i.t), ["width, height)"]);
  assert.deepEqual(liveItems(items, (i) => i.t, "q"), []);
  assert.deepEqual(liveItems(items, (i) => i.t, "").length, 2);
});

test("partial accepts count from what the document holds", () => {
  assert.equal(ghostPartial("width, height)", "", "word"), "width");
  assert.equal(ghostPartial("width, height)", "width", "word"), ",");
  assert.equal(ghostPartial("a)\n    return a", "a)", "line"), "\n    return a");
  assert.equal(ghostPartial("width", "wx", "word"), undefined);
  assert.equal(ghostPartial("width", "width", "word"), undefined);
});

test("no ghost after an accept that completes the line until the user types or asks", () => {
  const g = new GhostGate();
  g.accepted("file:///a.py", 7, "   ");
  assert.equal(g.allows("file:///a.py", 7, false), false); // the editor's automatic re-request
  assert.equal(g.allows("file:///b.py", 7, false), true); // another file is not affected
  assert.equal(g.isQuiet, true);
  assert.equal(g.allows("file:///a.py", 8, false), true); // typed again
  assert.equal(g.isQuiet, false);
  assert.equal(g.allows("file:///a.py", 8, false), true);
});

test("an explicit request ends the quiet; an accept mid-line never starts it", () => {
  const g = new GhostGate();
  g.accepted("file:///a.py", 3, "");
  assert.equal(g.allows("file:///a.py", 3, true), true);
  assert.equal(g.allows("file:///a.py", 3, false), true);
  g.accepted("file:///a.py", 4, ")");
  assert.equal(g.isQuiet, false);
  assert.equal(g.allows("file:///a.py", 4, false), true);
});
