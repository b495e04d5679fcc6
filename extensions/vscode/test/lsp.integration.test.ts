/**
 * The client against a real `editserver lsp` process, speaking LSP over stdio with vscode-jsonrpc
 * exactly as the extension does: the same command line, initializationOptions, request params and
 * notifications (all built by src/logic), and the same capabilities vscode-languageclient announces
 * for the features we use.
 *
 * Needs a running `editserver serve` (EDITSERVER_SERVER_URL) and the `editserver` executable
 * (EDITSERVER_EXE, else PATH). tests/extensions/test_vscode.py provides both (tiny model) and then
 * checks the telemetry rows for the ids this test writes to EDITSERVER_RESULT_FILE.
 */

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { createMessageConnection, StreamMessageReader, StreamMessageWriter, type MessageConnection } from "vscode-jsonrpc/node";
import { resolveExecutable } from "../src/logic/executable";
import { partialSlice } from "../src/logic/partial";
import {
  DID_ACCEPT_METHOD,
  DID_REJECT_METHOD,
  DID_SHOW_METHOD,
  INFO_METHOD,
  INLINE_ACCEPTED_COMMAND,
  NEXT_EDIT_METHOD,
  STATUS_METHOD,
  didAcceptParams,
  inlineItemId,
  nextEditParams,
  parseNextEditResult,
  type StatusParams,
} from "../src/logic/protocol";
import { chooseLog, logView } from "../src/logic/log";
import { planEdits } from "../src/logic/nextEdit";
import { readSettings, serverArgs, toDidChangeConfiguration, toInitializationOptions } from "../src/logic/settings";
import { applyStatus, renderStatus, type StatusModel } from "../src/logic/status";

const SERVER_URL = process.env.EDITSERVER_SERVER_URL;
const TINY_MODEL = process.env.EDITSERVER_TINY_MODEL;
const SKIP = SERVER_URL ? false : "EDITSERVER_SERVER_URL is not set (tests/extensions/test_vscode.py starts a model server and sets it)";
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), "editserver-vscode-"));
const results: Record<string, unknown> = {};

interface LspProcess {
  proc: ChildProcess;
  conn: MessageConnection;
  statuses: StatusParams[];
  messages: { type: number; message: string }[];
  stderr: string[];
}

function exe(): string {
  const r = resolveExecutable(process.env.EDITSERVER_EXE ?? "", process.env.PATH);
  if (!r.ok) throw new Error(r.reason);
  return r.path;
}

async function waitFor<T>(check: () => T | undefined | false, timeoutMs: number, what: string): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = check();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Start `editserver lsp` the way the extension does and run the initialize handshake. */
async function startLsp(
  settingsValues: Record<string, unknown>,
  env: Record<string, string> = {},
): Promise<{ s: LspProcess; init: any }> {
  const settings = readSettings((k) => settingsValues[k]);
  const proc = spawn(exe(), serverArgs(settings, path.join(TMP, "lsp.log")), {
    stdio: ["pipe", "pipe", "pipe"],
    env: { ...process.env, OMP_NUM_THREADS: "1", ...env },
  });
  const stderr: string[] = [];
  proc.stderr!.on("data", (d) => stderr.push(String(d)));
  const conn = createMessageConnection(new StreamMessageReader(proc.stdout!), new StreamMessageWriter(proc.stdin!));
  const s: LspProcess = { proc, conn, statuses: [], messages: [], stderr };
  conn.onNotification(STATUS_METHOD, (p: StatusParams) => s.statuses.push(p));
  conn.onNotification("window/showMessage", (p: { type: number; message: string }) => s.messages.push(p));
  conn.onNotification("window/logMessage", () => undefined);
  conn.onRequest("workspace/configuration", (p: { items: { section?: string }[] }) =>
    p.items.map((i) => (i.section === "editserver" ? toInitializationOptions(settings) : null)),
  );
  conn.onRequest("client/registerCapability", () => null);
  conn.onRequest("window/workDoneProgress/create", () => null);
  conn.listen();
  const init = await conn.sendRequest("initialize", {
    processId: process.pid,
    clientInfo: { name: "Visual Studio Code", version: "1.82.0" },
    rootUri: null,
    workspaceFolders: null,
    capabilities: {
      general: { positionEncodings: ["utf-16"] },
      workspace: { configuration: true, didChangeConfiguration: { dynamicRegistration: true }, executeCommand: { dynamicRegistration: true } },
      textDocument: {
        synchronization: { dynamicRegistration: true, didSave: true },
        inlineCompletion: { dynamicRegistration: true },
      },
      window: { showMessage: {}, workDoneProgress: true },
    },
    initializationOptions: toInitializationOptions(settings),
  });
  await conn.sendNotification("initialized", {});
  return { s, init };
}

async function stopLsp(s: LspProcess): Promise<void> {
  try {
    await s.conn.sendRequest("shutdown");
    await s.conn.sendNotification("exit");
  } catch {
    // already gone
  }
  await new Promise<void>((resolve) => {
    if (s.proc.exitCode !== null) return resolve();
    const t = setTimeout(() => {
      s.proc.kill();
      resolve();
    }, 5000);
    s.proc.on("exit", () => {
      clearTimeout(t);
      resolve();
    });
  });
  s.conn.dispose();
}

const URI = "file://" + path.join(TMP, "shapes.py");
const TEXT = [
  "def area(width, height):",
  "    return width * height",
  "",
  "",
  "def describe(width, height):",
  '    print("area", area(width, height))',
  "",
  "",
  "describe(2, 3)",
  "result = area(",
  "",
].join("\n");

let lspProc: LspProcess | undefined;
let init: any;

before(async () => {
  if (SKIP) return;
  const started = await startLsp({
    serverUrl: SERVER_URL,
    autostart: false,
    debounceMs: 0,
    "telemetry.path": path.join(TMP, "telemetry.sqlite"),
  });
  lspProc = started.s;
  init = started.init;
  results.telemetryPath = path.join(TMP, "telemetry.sqlite");
});

after(async () => {
  if (lspProc) await stopLsp(lspProc);
  if (process.env.EDITSERVER_RESULT_FILE) fs.writeFileSync(process.env.EDITSERVER_RESULT_FILE, JSON.stringify(results));
});

test("initialize: the server offers inline completions and the accept command", { skip: SKIP }, () => {
  const caps = init.capabilities;
  assert.ok(caps.inlineCompletionProvider, "no inlineCompletionProvider");
  assert.ok(caps.executeCommandProvider.commands.includes(INLINE_ACCEPTED_COMMAND));
  assert.ok(caps.textDocumentSync !== undefined);
});

test("status notifications reach the status bar as 'ready'", { skip: SKIP }, async () => {
  const s = lspProc!;
  const ready = await waitFor(() => s.statuses.find((p) => p.state === "ready"), 30000, "status ready");
  let model: StatusModel = { enabled: true, client: "running" };
  model = applyStatus(model, ready);
  assert.match(renderStatus(model).text, /sparkle\) editserver/);
});

test("inline completion: an item with the accept command; show, partial accept, full accept", { skip: SKIP }, async () => {
  const s = lspProc!;
  await s.conn.sendNotification("textDocument/didOpen", { textDocument: { uri: URI, languageId: "python", version: 1, text: TEXT } });
  const position = { line: 9, character: "result = area(".length };
  const res: any = await s.conn.sendRequest("textDocument/inlineCompletion", {
    textDocument: { uri: URI },
    position,
    context: { triggerKind: 1 },
  });
  const items = Array.isArray(res) ? res : res.items;
  assert.ok(items.length >= 1, `no items: ${JSON.stringify(res)}`);
  const item = items[0];
  assert.equal(typeof item.insertText, "string");
  assert.ok(item.insertText.length > 0);
  const id = inlineItemId(item.command);
  assert.ok(id, `no id in ${JSON.stringify(item.command)}`);
  if (item.range) {
    assert.ok(item.range.start.line <= position.line && item.range.end.line >= position.line);
  }
  await s.conn.sendNotification(DID_SHOW_METHOD, { id });
  const word = partialSlice(item.insertText, "word");
  await s.conn.sendNotification(DID_ACCEPT_METHOD, didAcceptParams(id!, { partial: "word", acceptedText: word }));
  // What VS Code does on Tab: run the item's command, which vscode-languageclient forwards.
  await s.conn.sendRequest("workspace/executeCommand", { command: item.command.command, arguments: item.command.arguments });
  results.inline = { id, word };
});

test("next edit after a rename: contract-shaped result; shown then rejected", { skip: SKIP }, async () => {
  const s = lspProc!;
  const renamed = TEXT.replace("def area(width", "def area(size");
  await s.conn.sendNotification("textDocument/didChange", {
    textDocument: { uri: URI, version: 2 },
    contentChanges: [{ range: { start: { line: 0, character: 9 }, end: { line: 0, character: 14 } }, text: "size" }],
  });
  const raw = await s.conn.sendRequest(NEXT_EDIT_METHOD, nextEditParams(URI, { line: 0, character: 13 }));
  const result = parseNextEditResult(raw);
  assert.ok(result, `not a nextEdit result: ${JSON.stringify(raw)}`);
  assert.equal(typeof result!.id, "string");
  assert.equal(typeof result!.score, "number");
  const lines = renamed.split("\n");
  const getText = (r: { start: { line: number; character: number }; end: { line: number; character: number } }) => {
    const off = (p: { line: number; character: number }) => lines.slice(0, p.line).reduce((n, l) => n + l.length + 1, 0) + p.character;
    return renamed.slice(off(r.start), off(r.end));
  };
  // Every edit the server proposes is for this document and maps onto real text.
  const planned = planEdits(result!, URI, getText);
  for (const e of result!.edits) {
    assert.equal(e.textDocument.uri, URI);
    assert.ok(e.range.start.line < lines.length);
  }
  assert.ok(planned.length <= result!.edits.length);
  await s.conn.sendNotification(DID_SHOW_METHOD, { id: result!.id });
  await s.conn.sendNotification(DID_REJECT_METHOD, { id: result!.id });
  results.nextEdit = { id: result!.id, edits: result!.edits.length };
});

test("turning suggestions off via didChangeConfiguration", { skip: SKIP }, async () => {
  const s = lspProc!;
  const off = readSettings((k) => ({ serverUrl: SERVER_URL, autostart: false, enabled: false } as Record<string, unknown>)[k]);
  const seen = s.statuses.length;
  await s.conn.sendNotification("workspace/didChangeConfiguration", toDidChangeConfiguration(off));
  const res: any = await s.conn.sendRequest("textDocument/inlineCompletion", {
    textDocument: { uri: URI },
    position: { line: 9, character: 3 },
    context: { triggerKind: 1 },
  });
  const items = res === null ? [] : Array.isArray(res) ? res : res.items;
  assert.equal(items.length, 0);
  const disabled = await waitFor(() => s.statuses.slice(seen).find((p) => p.state === "disabled"), 10000, "status disabled");
  assert.match(renderStatus(applyStatus({ enabled: true, client: "running" }, disabled)).text, /circle-slash/);
});

function closedPort(): Promise<number> {
  return new Promise((resolve) => {
    const srv = net.createServer();
    srv.listen(0, "127.0.0.1", () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}

test("an unreachable model server: a warning message and an 'unreachable' status bar", { skip: SKIP }, async () => {
  const url = `http://127.0.0.1:${await closedPort()}`;
  const { s } = await startLsp({ serverUrl: url, autostart: false, "telemetry.enabled": false });
  try {
    const st = await waitFor(() => s.statuses.find((p) => p.state === "unreachable"), 30000, "status unreachable");
    const view = renderStatus(applyStatus({ enabled: true, client: "running" }, st));
    assert.equal(view.warning, true);
    assert.match(view.text, /unreachable/);
    const msg = await waitFor(() => s.messages.find((m) => m.message.includes(url)), 30000, "the showMessage warning");
    assert.equal(msg.type, 2); // Warning
  } finally {
    await stopLsp(s);
  }
});

test("Show log: the language server's own model server log, as the output channel shows it", { skip: SKIP }, async () => {
  assert.ok(TINY_MODEL, "EDITSERVER_TINY_MODEL is not set (tests/extensions/test_vscode.py sets it)");
  const state = path.join(TMP, "state");
  // no serverUrl: the language server starts `editserver serve` itself and logs it under XDG_STATE_HOME
  const { s } = await startLsp({ autostart: true, modelPath: TINY_MODEL, "telemetry.enabled": false }, { XDG_STATE_HOME: state });
  try {
    let choice = chooseLog(undefined);
    let view = "";
    const deadline = Date.now() + 30000;
    while (Date.now() < deadline) {
      choice = chooseLog(await s.conn.sendRequest(INFO_METHOD, {}));
      if (choice.kind === "serve") {
        view = await logView(choice.path);
        if (view.includes("serve --host")) break;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(choice.kind, "serve", "the language server did not report its own server's log");
    assert.equal((choice as { path: string }).path, path.join(state, "editserver", "serve.log"));
    const lines = view.split("\n");
    assert.equal(lines[0], `${path.join(state, "editserver", "serve.log")}:`);
    assert.match(view, /editserver\.cli serve --host 127\.0\.0\.1 --port \d+ --model /);
  } finally {
    await stopLsp(s);
  }
});
