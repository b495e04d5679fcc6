/** settings -> initializationOptions / didChangeConfiguration / command line. */

import { test } from "node:test";
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import {
  DEFAULTS,
  needsRestart,
  readSettings,
  serverArgs,
  toDidChangeConfiguration,
  toInitializationOptions,
} from "../src/logic/settings";

const pkg = JSON.parse(fs.readFileSync(path.join(__dirname, "..", "..", "package.json"), "utf8"));

function getter(values: Record<string, unknown>) {
  return (key: string) => values[key];
}

test("defaults in code match contributes.configuration in package.json", () => {
  const props = pkg.contributes.configuration.properties as Record<string, { default: unknown }>;
  const fromPackage = readSettings((key) => props[`editserver.${key}`]?.default);
  assert.deepEqual(fromPackage, DEFAULTS);
  // and every setting the code reads is declared (so VS Code shows and validates it)
  for (const key of ["enabled", "serverUrl", "executablePath", "autostart", "modelPath", "debounceMs", "enableFim", "enableNextEdit", "languages", "excludeFiles", "telemetry.enabled", "telemetry.path", "telemetry.keepPrompts"]) {
    assert.ok(props[`editserver.${key}`], `editserver.${key} missing from package.json`);
  }
});

test("nothing configured gives the defaults", () => {
  assert.deepEqual(readSettings(() => undefined), DEFAULTS);
});

test("user values flow into initializationOptions in the contract's shape", () => {
  const s = readSettings(
    getter({
      serverUrl: " http://127.0.0.1:9123 ",
      debounceMs: 40,
      enableFim: false,
      languages: ["python"],
      "telemetry.enabled": false,
      "telemetry.path": "/tmp/t.sqlite",
      autostart: false,
    }),
  );
  assert.deepEqual(toInitializationOptions(s), {
    serverUrl: "http://127.0.0.1:9123",
    autostart: false,
    debounceMs: 40,
    enableFim: false,
    enableNextEdit: true,
    languages: ["python"],
    telemetry: { enabled: false, path: "/tmp/t.sqlite" },
  });
});

test("an empty telemetry path is left out so the server picks its default", () => {
  const opts = toInitializationOptions(DEFAULTS);
  assert.deepEqual(opts.telemetry, { enabled: true });
  assert.ok(!("path" in opts.telemetry));
});

test("the master switch turns both features off", () => {
  const off = toInitializationOptions(readSettings(getter({ enabled: false })));
  assert.equal(off.enableFim, false);
  assert.equal(off.enableNextEdit, false);
});

test("wrong-typed values fall back to defaults instead of reaching the server", () => {
  const s = readSettings(getter({ debounceMs: "fast", enableFim: "yes", languages: [1, 2], serverUrl: "  ", "telemetry.enabled": null }));
  assert.equal(s.debounceMs, DEFAULTS.debounceMs);
  assert.equal(s.enableFim, true);
  assert.deepEqual(s.languages, DEFAULTS.languages);
  assert.equal(s.serverUrl, DEFAULTS.serverUrl);
  assert.equal(s.telemetry.enabled, true);
});

test("didChangeConfiguration wraps the same payload under settings.editserver", () => {
  const s = readSettings(getter({ debounceMs: 10 }));
  assert.deepEqual(toDidChangeConfiguration(s), { settings: { editserver: toInitializationOptions(s) } });
});

test("command line carries url, autostart and model", () => {
  assert.deepEqual(serverArgs(DEFAULTS), ["lsp"]); // no URL: the language server starts its own on a free port
  const s = readSettings(getter({ autostart: false, modelPath: "/m", serverUrl: "http://127.0.0.1:1" }));
  assert.deepEqual(serverArgs(s, "/tmp/l.log"), ["lsp", "--server-url", "http://127.0.0.1:1", "--no-autostart", "--model", "/m", "--log-file", "/tmp/l.log"]);
});

test("only process-level settings need a restart", () => {
  const base = readSettings(() => undefined);
  assert.equal(needsRestart(base, readSettings(getter({ debounceMs: 5 }))), false);
  assert.equal(needsRestart(base, readSettings(getter({ executablePath: "/x/editserver" }))), true);
  assert.equal(needsRestart(base, readSettings(getter({ languages: ["go"] }))), true);
});
