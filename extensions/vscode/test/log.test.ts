/** "Show log": which log it opens and what the output channel holds (real files on disk). */

import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { MAX_LINES, chooseLog, logView } from "../src/logic/log";

test("our own model server's log, else a note about the user's server", () => {
  assert.deepEqual(chooseLog({ ownPort: true, serveLog: "/s/serve.log", serverUrl: "http://127.0.0.1:40123" }), {
    kind: "serve",
    path: "/s/serve.log",
  });
  const theirs = chooseLog({ ownPort: false, serveLog: "/s/serve.log", serverUrl: "http://127.0.0.1:8123" });
  assert.equal(theirs.kind, "client");
  assert.match((theirs as { note: string }).note, /8123/);
  assert.equal(chooseLog(undefined).kind, "client");
});

test("the view is the file's last lines under a header naming it", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "editserver-log-"));
  const file = path.join(dir, "serve.log");
  fs.writeFileSync(file, Array.from({ length: MAX_LINES + 100 }, (_, i) => `line ${i}`).join("\n") + "\n");
  const view = (await logView(file)).split("\n");
  assert.equal(view[0], `${file} (last ${MAX_LINES} of ${MAX_LINES + 100} lines):`);
  assert.equal(view[1], "line 100");
  assert.equal(view[view.length - 1], `line ${MAX_LINES + 99}`);
  fs.writeFileSync(file, "one\ntwo\n");
  assert.equal(await logView(file), `${file}:\none\ntwo`);
  assert.match(await logView(path.join(dir, "missing.log")), /missing\.log: cannot be read \(ENOENT/);
});
