/** Next-edit results -> decorations, jump order, Tab actions and range shifting. */

import { test } from "node:test";
import assert from "node:assert/strict";
import {
  endOfApplied,
  jumpOrder,
  labelFor,
  planDecorations,
  planEdits,
  remainingAfter,
  tabAction,
  type PlannedEdit,
} from "../src/logic/nextEdit";
import { parseNextEditResult, type NextEditResult, type Range } from "../src/logic/protocol";

const URI = "file:///w/a.py";

/** A tiny text model: extract a range from lines, and apply an edit, like an editor would. */
function textOf(doc: string, r: Range): string {
  const lines = doc.split("\n");
  const offset = (p: { line: number; character: number }) =>
    lines.slice(0, p.line).reduce((n, l) => n + l.length + 1, 0) + p.character;
  return doc.slice(offset(r.start), offset(r.end));
}

function apply(doc: string, e: PlannedEdit): string {
  const lines = doc.split("\n");
  const offset = (p: { line: number; character: number }) =>
    lines.slice(0, p.line).reduce((n, l) => n + l.length + 1, 0) + p.character;
  return doc.slice(0, offset(e.range.start)) + e.newText + doc.slice(offset(e.range.end));
}

function r(sl: number, sc: number, el: number, ec: number): Range {
  return { start: { line: sl, character: sc }, end: { line: el, character: ec } };
}

const DOC = [
  "def area(width, height):", // 0
  "    return width * height", // 1
  "", // 2
  "print(area(width=2, height=3))", // 3
  "x = area(1, 2)", // 4
].join("\n");

// The user renamed `width` -> `w` in the signature; the server proposes the other occurrences.
const RESULT: NextEditResult = {
  id: "ne-1",
  score: 0.9,
  edits: [
    { textDocument: { uri: URI, version: 3 }, range: r(3, 11, 3, 16), newText: "w" }, // print(area(width=
    { textDocument: { uri: URI, version: 3 }, range: r(1, 11, 1, 16), newText: "w" }, // return width
    { textDocument: { uri: "file:///w/other.py" }, range: r(0, 0, 0, 0), newText: "elsewhere" },
    { textDocument: { uri: URI }, range: r(4, 0, 4, 0), newText: "# checked\n" },
  ],
};

function planned(doc = DOC): PlannedEdit[] {
  return planEdits(RESULT, URI, (range) => textOf(doc, range));
}

test("planEdits keeps this document's edits with the text they replace", () => {
  const edits = planned();
  assert.deepEqual(edits.map((e) => e.index), [0, 1, 3]);
  assert.equal(edits[0]!.oldText, "width");
  assert.equal(edits[2]!.oldText, "");
});

test("no-op edits and reversed ranges are normalised", () => {
  const res: NextEditResult = {
    id: "x",
    score: 0,
    edits: [
      { textDocument: { uri: URI }, range: r(1, 16, 1, 11), newText: "w" },
      { textDocument: { uri: URI }, range: r(0, 0, 0, 3), newText: "def" },
    ],
  };
  const edits = planEdits(res, URI, (range) => textOf(DOC, range));
  assert.equal(edits.length, 1);
  assert.deepEqual(edits[0]!.range, r(1, 11, 1, 16));
});

test("decorations: kinds, one-line labels, hover with the full text", () => {
  const plan = planDecorations(planned(), [{ start: 0, end: 10 }]);
  assert.deepEqual(
    plan.edits.map((d) => [d.index, d.kind, d.label, d.inViewport]),
    [
      [0, "replace", "w", true],
      [1, "replace", "w", true],
      [3, "insert", "# checked … (+1 line)", true],
    ],
  );
  assert.equal(plan.edits[2]!.hover, "# checked\n");
  assert.deepEqual(plan.gutter, []);
});

test("edits outside the viewport get gutter markers pointing at them", () => {
  const plan = planDecorations(planned(), [{ start: 2, end: 3 }]);
  assert.deepEqual(
    plan.edits.map((d) => [d.index, d.inViewport]),
    [
      [0, true],
      [1, false],
      [3, false],
    ],
  );
  assert.deepEqual(plan.gutter, [
    { line: 2, direction: "up", indices: [1] },
    { line: 3, direction: "down", indices: [3] },
  ]);
});

test("labels for multi-line and leading-newline text", () => {
  assert.equal(labelFor("a"), "a");
  assert.equal(labelFor("a\nb\nc"), "a … (+2 lines)");
  assert.equal(labelFor("\n    pass"), "⏎    pass");
  assert.equal(labelFor(""), "");
});

test("jump order is document order from the cursor, wrapping", () => {
  const edits = planned();
  assert.deepEqual(jumpOrder(edits, { line: 0, character: 0 }), [1, 0, 3]);
  assert.deepEqual(jumpOrder(edits, { line: 2, character: 0 }), [0, 3, 1]);
  assert.deepEqual(jumpOrder(edits, { line: 4, character: 5 }), [1, 0, 3]);
});

test("Tab jumps first, then applies at the edit", () => {
  const edits = planned();
  const first = tabAction(edits, { line: 0, character: 9 });
  assert.deepEqual(first, { kind: "jump", index: 1, position: { line: 1, character: 11 } });
  assert.deepEqual(tabAction(edits, { line: 1, character: 11 }), { kind: "apply", index: 1 });
  assert.deepEqual(tabAction([], { line: 0, character: 0 }), { kind: "none" });
});

test("Tab, Tab, ... applies every edit and the text comes out right", () => {
  let doc = DOC;
  let edits = planned(doc);
  let cursor = { line: 0, character: 9 };
  const applied: number[] = [];
  for (let guard = 0; guard < 20 && edits.length; guard++) {
    const action = tabAction(edits, cursor);
    if (action.kind === "jump") cursor = action.position;
    else if (action.kind === "apply") {
      const e = edits.find((x) => x.index === action.index)!;
      doc = apply(doc, e);
      applied.push(e.index);
      cursor = endOfApplied(e);
      edits = remainingAfter(edits, e);
      // the shifted ranges still cover exactly the text they replace
      for (const rest of edits) assert.equal(textOf(doc, rest.range), rest.oldText);
    }
  }
  assert.deepEqual(applied, [1, 0, 3]);
  assert.equal(doc, ["def area(width, height):", "    return w * height", "", "print(area(w=2, height=3))", "# checked", "x = area(1, 2)"].join("\n"));
});

test("shifting: same line after a multi-line insert, overlap dropped", () => {
  const doc = "abc def ghi\nxyz";
  const mk = (index: number, range: Range, newText: string): PlannedEdit => ({ index, range, newText, oldText: textOf(doc, range) });
  const a = mk(0, r(0, 0, 0, 3), "A\nBB");
  const b = mk(1, r(0, 4, 0, 7), "D");
  const c = mk(2, r(0, 1, 0, 5), "zz"); // overlaps a
  const d = mk(3, r(1, 0, 1, 3), "X");
  const rest = remainingAfter([a, b, c, d], a);
  assert.deepEqual(rest.map((e) => e.index), [1, 3]);
  const after = apply(doc, a);
  for (const e of rest) assert.equal(textOf(after, e.range), e.oldText);
  assert.deepEqual(endOfApplied(a), { line: 1, character: 2 });
});

test("malformed responses become nothing to show", () => {
  assert.equal(parseNextEditResult(null), undefined);
  assert.equal(parseNextEditResult({ edits: [] }), undefined);
  const parsed = parseNextEditResult({ id: "a", edits: [{ range: r(0, 0, 0, 0) }, RESULT.edits[0]] });
  assert.equal(parsed?.edits.length, 1);
  assert.equal(parsed?.score, 0);
});
