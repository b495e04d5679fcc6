/** Status bar model: on/off, server state, last latency. */

import { test } from "node:test";
import assert from "node:assert/strict";
import { applyStatus, renderStatus, type StatusModel } from "../src/logic/status";

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
