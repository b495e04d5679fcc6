/** excludeFiles matching in the editor: the server's rules (editserver/lsp/privacy.py). */

import { test } from "node:test";
import assert from "node:assert/strict";
import { effectiveExcludes, excludedBy } from "../src/logic/privacy";

const defaults = effectiveExcludes([]);

test("secret files by convention are excluded by name, in any folder, ignoring case", () => {
  assert.equal(excludedBy("/home/u/project/.env", defaults), ".env*");
  assert.equal(excludedBy("deploy/.env.production", defaults), ".env*");
  assert.equal(excludedBy("certs/Server.PEM", defaults), "*.pem");
  assert.equal(excludedBy("secrets.yaml", defaults), "secrets.*");
  assert.equal(excludedBy("app/main.py", defaults), undefined);
  assert.equal(excludedBy("app/environment.py", defaults), undefined);
});

test("a user pattern is added; ! removes a default", () => {
  const p = effectiveExcludes(["*_private.py", "!*.key"]);
  assert.equal(excludedBy("src/keys_private.py", p), "*_private.py");
  assert.equal(excludedBy("src/api.key", p), undefined);
  assert.equal(excludedBy(".env", p), ".env*");
});

test("a pattern with / matches the relative or absolute path, * crossing folders", () => {
  const p = effectiveExcludes(["config/*.json", "[!a]b?.txt"]);
  assert.equal(excludedBy("config/prod.json", p), "config/*.json");
  assert.equal(excludedBy("/srv/app/config/deep/prod.json", p), "config/*.json");
  assert.equal(excludedBy("other/prod.json", p), undefined);
  assert.equal(excludedBy("xbc.txt", p), "[!a]b?.txt");
  assert.equal(excludedBy("abc.txt", p), undefined);
});
