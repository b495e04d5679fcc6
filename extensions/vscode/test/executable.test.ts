/** Finding the editserver executable. */

import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { resolveExecutable } from "../src/logic/executable";

function tempBin(): { dir: string; exe: string } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "editserver-bin-"));
  const exe = path.join(dir, "editserver");
  fs.writeFileSync(exe, "#!/bin/sh\n");
  fs.chmodSync(exe, 0o755);
  return { dir, exe };
}

test("found on PATH", { skip: process.platform === "win32" }, () => {
  const { dir, exe } = tempBin();
  assert.deepEqual(resolveExecutable("", `/nonexistent:${dir}`), { ok: true, path: exe });
});

test("a configured path wins, and a bad one is reported, not searched around", { skip: process.platform === "win32" }, () => {
  const { dir, exe } = tempBin();
  assert.deepEqual(resolveExecutable(exe, ""), { ok: true, path: exe });
  const bad = resolveExecutable(path.join(dir, "nope"), dir);
  assert.equal(bad.ok, false);
  assert.match(bad.ok ? "" : bad.reason, /executablePath/);
});

test("a non-executable file does not count", { skip: process.platform === "win32" }, () => {
  const { dir, exe } = tempBin();
  fs.chmodSync(exe, 0o644);
  const r = resolveExecutable("", dir);
  assert.equal(r.ok, false);
  assert.match(r.ok ? "" : r.reason, /not found on PATH/);
});
