/** Partial accept of next edits by token span: word by word and line by line, on one-line and
 * multi-line edits; every state on the way is the old text with a prefix of the diff's spans applied. */

import { test } from "node:test";
import assert from "node:assert/strict";
import { acceptSpans, offsetIn } from "../src/logic/acceptSpan";
import { hunks, type Hunk } from "../src/logic/hunks";
import { editHunks, remainingAfter, type PlannedEdit } from "../src/logic/nextEdit";
import type { Position, Range } from "../src/logic/protocol";

function r(sl: number, sc: number, el: number, ec: number): Range {
  return { start: { line: sl, character: sc }, end: { line: el, character: ec } };
}

function offset(doc: string, p: Position): number {
  const lines = doc.split("\n");
  return lines.slice(0, p.line).reduce((n, l) => n + l.length + 1, 0) + p.character;
}

function textOf(doc: string, range: Range): string {
  return doc.slice(offset(doc, range.start), offset(doc, range.end));
}

/** Apply replacements given in the document's coordinates before any of them, as VS Code does. */
function applyAll(doc: string, changes: Hunk[]): string {
  const sorted = [...changes].sort((a, b) => offset(doc, b.range.start) - offset(doc, a.range.start));
  let out = doc;
  for (const h of sorted) out = out.slice(0, offset(doc, h.range.start)) + h.newText + out.slice(offset(doc, h.range.end));
  return out;
}

function edit(doc: string, index: number, range: Range, newText: string): PlannedEdit {
  return { index, range, newText, oldText: textOf(doc, range) };
}

/** Accept `kind` until the edit is done; check every state against the original diff's spans. */
function walk(doc: string, e: PlannedEdit, kind: "word" | "line"): string[] {
  const spans = hunks(e.range, e.oldText, e.newText).sort((a, b) => offset(doc, a.range.start) - offset(doc, b.range.start));
  const states: string[] = [];
  let current: PlannedEdit | undefined = e;
  let text = doc;
  let taken = 0;
  while (current) {
    const acc = acceptSpans(current, kind);
    assert.ok(acc, "an edit with spans left always has something to accept");
    text = applyAll(text, acc.changes);
    taken += acc.changes.length;
    // the document is the old text with the first `taken` spans of the original diff applied
    assert.equal(text, applyAll(doc, spans.slice(0, taken)));
    assert.equal(acc.acceptedText, acc.changes.map((h) => h.newText).join(""));
    if (acc.remaining) assert.equal(textOf(text, acc.remaining.range), acc.remaining.oldText);
    states.push(text);
    current = acc.remaining;
  }
  assert.equal(taken, spans.length);
  return states;
}

const LINE = "        arg = os.path.expanduser(arg)";

test("offsets inside an edit's old text", () => {
  assert.equal(offsetIn({ line: 3, character: 4 }, "ab\ncd\nef", { line: 3, character: 6 }), 2);
  assert.equal(offsetIn({ line: 3, character: 4 }, "ab\ncd\nef", { line: 4, character: 1 }), 4);
  assert.equal(offsetIn({ line: 3, character: 4 }, "ab\ncd\nef", { line: 5, character: 2 }), 8);
});

test("a one-line rename, word by word: each state holds whole old or whole new tokens", () => {
  const doc = `def f(arg):\n${LINE}\n    return arg\n`;
  const e = edit(doc, 0, r(1, 8, 1, LINE.length), "item = os.path.expanduser(item)");
  const states = walk(doc, e, "word");
  assert.deepEqual(states, [
    "def f(arg):\n        item = os.path.expanduser(arg)\n    return arg\n",
    "def f(arg):\n        item = os.path.expanduser(item)\n    return arg\n",
  ]);
  // the cursor after the first word sits right after `item`
  assert.deepEqual(acceptSpans(e, "word")!.cursor, { line: 1, character: 12 });
  // the remaining span moved with the longer word
  assert.deepEqual(acceptSpans(e, "word")!.remaining!.hunks, [{ range: r(1, 34, 1, 37), newText: "item" }]);
  // "line" takes both spans at once
  assert.deepEqual(walk(doc, e, "line"), [states[1]]);
});

test("a multi-line edit: line by line, then word by word, ends at the new text", () => {
  const doc = ["def f(arg):", "    out = []", "        out.append(arg)", "    return out", ""].join("\n");
  const e = edit(doc, 0, r(2, 0, 3, 14), "        out.append(item)\n        out.sort()\n    return out");
  const lines = walk(doc, e, "line");
  assert.equal(lines[lines.length - 1], doc.replace("        out.append(arg)\n", "        out.append(item)\n        out.sort()\n"));
  assert.ok(lines.length >= 2, "the changed line and the added line are separate line accepts");
  assert.equal(lines[0], doc.replace("append(arg)", "append(item)"));
  const words = walk(doc, e, "word");
  assert.equal(words[words.length - 1], lines[lines.length - 1]);
});

test("a rewrite across lines with spans on several lines, word by word", () => {
  const doc = ["x = 1", "total = compute(a, b)", "print(total, a)", "y = 2", ""].join("\n");
  const e = edit(doc, 3, r(1, 0, 2, 15), "result = compute(a, c)\nlog(result, a)");
  const words = walk(doc, e, "word");
  assert.equal(words[words.length - 1], ["x = 1", "result = compute(a, c)", "log(result, a)", "y = 2", ""].join("\n"));
  assert.equal(words[0], doc.replace("total =", "result ="));
  assert.equal(editHunks(acceptSpans(e, "word")!.remaining!).length, editHunks(e).length - 1);
});

test("other edits move with a partial accept that adds a line", () => {
  const doc = ["a = 1", "b = a", "c = a", "d = a", ""].join("\n");
  const first = edit(doc, 0, r(1, 0, 1, 5), "b = a\nbb = a");
  const later = edit(doc, 1, r(3, 4, 3, 5), "z");
  const acc = acceptSpans(first, "word")!;
  const text = applyAll(doc, acc.changes);
  const left = remainingAfter([first, later], acc.asApplied);
  assert.equal(left.length, 1);
  assert.equal(textOf(text, left[0]!.range), "a");
  assert.deepEqual(left[0]!.range, r(4, 4, 4, 5));
});

test("stored spans move too when another edit above is applied whole", () => {
  const doc = ["a = x", "b = x + x", ""].join("\n");
  const top = edit(doc, 0, r(0, 4, 0, 5), "y\nq = 0");
  const below = acceptSpans(edit(doc, 1, r(1, 0, 1, 9), "b = y + y"), "word")!.remaining!;
  const moved = remainingAfter([top, below], top)[0]!;
  assert.deepEqual(moved.hunks!.map((h) => h.range), [r(2, 8, 2, 9)]);
});
