/** Token hunks: inline vs preview, partial accept by whole token spans, status with withheld. */

import { test } from "node:test";
import assert from "node:assert/strict";
import { hunks, isPreview, partialHunks, tokens, type Hunk } from "../src/logic/hunks";
import { nextEditParams, parseNextEditPartial, type Range } from "../src/logic/protocol";
import { applyStatus, renderStatus } from "../src/logic/status";

function r(sl: number, sc: number, el: number, ec: number): Range {
  return { start: { line: sl, character: sc }, end: { line: el, character: ec } };
}

/** Apply hunks (last first) to a one-line text whose range starts at column `base`. */
function applyLine(line: string, hs: Hunk[]): string {
  let out = line;
  for (const h of [...hs].sort((a, b) => b.range.start.character - a.range.start.character)) {
    out = out.slice(0, h.range.start.character) + h.newText + out.slice(h.range.end.character);
  }
  return out;
}

test("tokens keep words whole", () => {
  assert.deepEqual(tokens("arg = os.path(ärg)"), ["arg", " ", "=", " ", "os", ".", "path", "(", "ärg", ")"]);
});

test("a one-line rename is two word hunks, drawn inline", () => {
  const line = "        arg = os.path.expanduser(arg)";
  const old = line.slice(8);
  const neu = "item = os.path.expanduser(item)";
  const hs = hunks(r(6, 8, 6, line.length), old, neu);
  assert.deepEqual(
    hs.map((h) => [h.range.start.character, h.range.end.character, h.newText]),
    [
      [8, 11, "item"],
      [33, 36, "item"],
    ],
  );
  assert.equal(isPreview(old, neu), false);
  // accept word by word: every state is old or new tokens, never `item = os)`
  const first = partialHunks(hs, "word");
  assert.equal(applyLine(line, first), "        item = os.path.expanduser(arg)");
  assert.equal(applyLine(line, partialHunks(hs, "line")), "        item = os.path.expanduser(item)");
});

test("a multi-line rewrite is previewed and its hunks span lines", () => {
  const old = "        out.append(arg)\n    return out";
  const neu = "        out.append(item)\n        out.sort()\n    return out";
  assert.equal(isPreview(old, neu), true);
  const hs = hunks(r(7, 0, 8, 14), old, neu);
  assert.ok(hs.length >= 2);
  assert.deepEqual(hs[0]!.range, r(7, 19, 7, 22));
  assert.equal(hs[0]!.newText, "item");
  assert.equal(partialHunks(hs, "line").every((h) => h.range.start.line === 7), true);
});

test("nextEdit params ask for streamed, gated results; partials are validated", () => {
  const p = nextEditParams("file:///a.py", { line: 1, character: 2 }, "auto");
  assert.equal(p.trigger, "auto");
  assert.equal(p.partialResults, true);
  const ok = parseNextEditPartial({ id: "x", textDocument: { uri: "file:///a.py", version: 3 }, edits: [], score: 0.5 });
  assert.equal(ok?.textDocument.version, 3);
  assert.equal(parseNextEditPartial({ id: "x", edits: [] }), undefined);
});

test("status shows completions withheld below the threshold and how to see them", () => {
  const m = applyStatus({ enabled: true, client: "running" }, { state: "ready", latencyMs: 80, withheld: 3, fimThreshold: 0.93 });
  const v = renderStatus(m);
  assert.match(v.text, /3 withheld/);
  assert.match(v.tooltip, /0\.93/);
  assert.match(v.tooltip, /--fim-threshold/);
  const none = renderStatus(applyStatus(m, { state: "ready", withheld: 0 }));
  assert.doesNotMatch(none.text, /withheld/);
});
