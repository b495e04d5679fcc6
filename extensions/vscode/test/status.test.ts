/** Status bar model: on/off, server state, last latency. */

import { test } from "node:test";
import assert from "node:assert/strict";
import { applyInfo, applyStatus, renderStatus, type StatusModel } from "../src/logic/status";

const running: StatusModel = { enabled: true, client: "running" };

test("ready shows the latency, which survives a status without one", () => {
  let m = applyStatus(running, { state: "ready", latencyMs: 83.6 });
  assert.match(renderStatus(m).text, /editserver 84 ms/);
  m = applyStatus(m, { state: "ready" });
  assert.match(renderStatus(m).text, /84 ms/);
});

test("unreachable is a warning and carries the server's message", () => {
  const view = renderStatus(applyStatus(running, { state: "unreachable", message: "connection refused at http://127.0.0.1:9" }));
  assert.equal(view.warning, true);
  assert.match(view.text, /unreachable/);
  assert.match(view.tooltip, /connection refused/);
});

test("off wins over any server state", () => {
  const view = renderStatus({ ...applyStatus(running, { state: "ready" }), enabled: false });
  assert.match(view.text, /off/);
});

test("a client that failed to start says so", () => {
  const view = renderStatus({ enabled: true, client: "failed", message: "not found on PATH" });
  assert.equal(view.warning, true);
  assert.match(view.tooltip, /not found on PATH/);
});

test("starting until the server reports", () => {
  assert.match(renderStatus(running).text, /sync~spin/);
  assert.match(renderStatus(applyStatus(running, { state: "disabled" })).text, /circle-slash/);
});

test("withheld completions and the threshold: in the text when any, always in the tooltip", () => {
  let m = applyStatus(running, { state: "ready", latencyMs: 90, withheld: 0, fimThreshold: 0.93 });
  let v = renderStatus(m);
  assert.doesNotMatch(v.text, /withheld/);
  assert.match(v.tooltip, /threshold 0\.93: 0 completions withheld below it in the last minute/);
  assert.match(v.tooltip, /editserver serve --fim-threshold X/);
  m = applyStatus(m, { state: "ready", withheld: 1 });
  v = renderStatus(m);
  assert.match(v.text, /editserver 90 ms · 1 withheld <0\.93$/);
  assert.match(v.tooltip, /1 completion withheld/);
});

test("editserver/info refreshes the withheld count as it ages out", () => {
  const m = applyStatus(running, { state: "ready", withheld: 4, fimThreshold: 0.5 });
  const aged = applyInfo(m, { state: "ready", withheld: 0, withheldWindowS: 60, fimThreshold: 0.5, serveLog: null });
  assert.equal(aged.withheld, 0);
  assert.doesNotMatch(renderStatus(aged).text, /withheld/);
  assert.deepEqual(applyInfo(m, undefined), m);
  assert.deepEqual(applyInfo(m, { withheld: "many" }), m);
});

test("an excluded active file says why nothing comes, and only that file", () => {
  const m = applyStatus(running, {
    state: "ready",
    excluded: [{ uri: "file:///w/.env", path: ".env", pattern: ".env*" }],
  });
  const view = renderStatus(m, "file:///w/.env");
  assert.match(view.text, /excluded/);
  assert.match(view.tooltip, /\.env\*/);
  assert.match(renderStatus(m, "file:///w/app.py").text, /sparkle/);
  assert.doesNotMatch(renderStatus(applyStatus(m, { state: "ready", excluded: [] }), "file:///w/.env").text, /excluded/);
});

test("a file the server never sees but excludeFiles matches says so (a .env has no client)", () => {
  const m = applyStatus(running, { state: "ready", excluded: [] });
  const view = renderStatus(m, "file:///w/.env", ".env*");
  assert.match(view.text, /excluded/);
  assert.match(view.tooltip, /\.env\*/);
  assert.match(renderStatus(m, "file:///w/a.py").text, /sparkle/);
});
