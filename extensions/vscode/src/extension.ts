/**
 * editserver for VS Code: starts `editserver lsp`, shows its inline completions (ghost text) and
 * next edits, and a status bar item.
 *
 * Design decisions:
 * - Thin: suggestions are computed by the language server; this file wires VS Code to it.
 *   Decisions that can be made without VS Code live in src/logic/ (unit-tested under node).
 * - Inline completions go through vscode-languageclient's LSP 3.18 inlineCompletion feature
 *   (registered via the proposed features); a middleware remembers the shown item so the
 *   accept-next-word/line commands can report what they accepted. Full accepts are reported by the
 *   server itself: each item carries the `editserver.inlineAccepted` command, which VS Code runs.
 * - Settings travel as initializationOptions and, on change, as didChangeConfiguration; settings
 *   that are command-line flags (executable, model) restart the server instead. A server that pulls
 *   settings (workspace/configuration) gets the same payload.
 * - Ghost text rules VS Code does not enforce (logic/ghost.ts): answers the user's typing has
 *   contradicted are dropped before VS Code sees them and the shown one is rejected on the first
 *   contradicting key; after a full accept that completes the line, the automatic re-request gets
 *   nothing until the user types again or asks explicitly. Full accepts are seen through the
 *   executeCommand middleware (VS Code runs the item's `editserver.inlineAccepted` command).
 * - A file that excludeFiles keeps out says so in the status bar even when no client attaches to it
 *   (a `.env` is in none of `editserver.languages`), matched here with the server's rules.
 * - The status bar's withheld count ages out on the server; while it is non-zero it is refreshed
 *   from `editserver/info` every WITHHELD_POLL_MS.
 * - The executable is resolved before starting so a missing binary is one clear message, not a
 *   spawn error in the log.
 */

import * as vscode from "vscode";
import {
  LanguageClient,
  State,
  type LanguageClientOptions,
  type ServerOptions,
} from "vscode-languageclient/node";
import { resolveExecutable } from "./logic/executable";
import { GhostGate, ghostPartial, ghostRemainder, liveItems } from "./logic/ghost";
import { chooseLog, logView } from "./logic/log";
import { effectiveExcludes, excludedBy } from "./logic/privacy";
import {
  DID_ACCEPT_METHOD,
  DID_REJECT_METHOD,
  DID_SHOW_METHOD,
  INLINE_ACCEPTED_COMMAND,
  INFO_METHOD,
  NEXT_EDIT_PARTIAL_METHOD,
  STATUS_METHOD,
  didAcceptParams,
  inlineItemId,
  type PartialKind,
  type StatusParams,
} from "./logic/protocol";
import {
  needsRestart,
  readSettings,
  serverArgs,
  toDidChangeConfiguration,
  toInitializationOptions,
  type Settings,
} from "./logic/settings";
import { applyInfo, applyStatus, renderStatus, type StatusModel } from "./logic/status";
import { NextEditController } from "./nextEditController";

/** How often the withheld count is refreshed while non-zero (it ages out on the server). */
const WITHHELD_POLL_MS = 15_000;

/** The inline suggestion most recently handed to VS Code (for stale checks and partial accepts). */
interface LastInline {
  id: string;
  uri: string;
  /** Where `text` starts: the cursor when it was asked for. */
  anchor: vscode.Position;
  text: string;
}

class Extension implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private settings: Settings;
  private status: StatusModel;
  private lastInline: LastInline | undefined;
  private readonly gate = new GhostGate();
  private withheldTimer: NodeJS.Timeout | undefined;
  private readonly statusItem: vscode.StatusBarItem;
  private readonly serveLog = vscode.window.createOutputChannel("editserver: model server");
  private readonly nextEdits: NextEditController;
  private readonly disposables: vscode.Disposable[] = [];

  constructor(
    context: vscode.ExtensionContext,
    private readonly log: vscode.LogOutputChannel,
  ) {
    this.settings = this.read();
    this.status = { enabled: this.settings.enabled, client: "stopped" };
    this.statusItem = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
    this.statusItem.command = "editserver.toggle";
    this.statusItem.show();
    this.nextEdits = new NextEditController(context.extensionPath, () => this.client, () => this.settings, log);
    this.disposables.push(
      this.serveLog,
      this.statusItem,
      this.nextEdits,
      vscode.commands.registerCommand("editserver.toggle", () => this.toggle()),
      vscode.commands.registerCommand("editserver.restartServer", () => this.restart()),
      vscode.commands.registerCommand("editserver.showLog", () => void this.showLog()),
      vscode.commands.registerCommand("editserver.requestNextEdit", () => {
        const editor = vscode.window.activeTextEditor;
        if (editor) void this.nextEdits.request(editor);
      }),
      vscode.commands.registerCommand("editserver.nextEdit.jumpOrApply", () => this.nextEdits.jumpOrApply()),
      vscode.commands.registerCommand("editserver.nextEdit.dismiss", () => this.nextEdits.dismiss()),
      vscode.commands.registerCommand("editserver.nextEdit.list", () => this.nextEdits.list()),
      vscode.commands.registerCommand("editserver.nextEdit.acceptWord", () => this.nextEdits.acceptPartial("word")),
      vscode.commands.registerCommand("editserver.nextEdit.acceptLine", () => this.nextEdits.acceptPartial("line")),
      vscode.commands.registerCommand("editserver.acceptNextWord", () => this.acceptPartial("word")),
      vscode.commands.registerCommand("editserver.acceptNextLine", () => this.acceptPartial("line")),
      vscode.window.onDidChangeTextEditorSelection((e) => this.checkStaleGhost(e.textEditor)),
      vscode.window.onDidChangeActiveTextEditor(() => this.renderStatus()),
      vscode.workspace.onDidChangeConfiguration((e) => {
        if (e.affectsConfiguration("editserver")) void this.onSettingsChanged();
      }),
    );
    this.renderStatus();
  }

  private read(): Settings {
    const cfg = vscode.workspace.getConfiguration("editserver");
    return readSettings((key) => cfg.get(key));
  }

  private setStatus(next: StatusModel): void {
    this.status = next;
    this.renderStatus();
    this.scheduleWithheldRefresh();
  }

  /** While completions are counted as withheld, refresh the count until it has aged out. */
  private scheduleWithheldRefresh(): void {
    if (this.withheldTimer || !this.status.withheld) return;
    this.withheldTimer = setTimeout(() => {
      this.withheldTimer = undefined;
      const client = this.client;
      if (!client?.isRunning()) return;
      void client.sendRequest(INFO_METHOD, {}).then(
        (info) => this.setStatus(applyInfo(this.status, info)),
        () => undefined,
      );
    }, WITHHELD_POLL_MS);
  }

  /** What was typed between `anchor` and the cursor of `document`'s editor (undefined: cursor before it). */
  private typedSince(document: vscode.TextDocument, anchor: vscode.Position): string | undefined {
    const editor = vscode.window.visibleTextEditors.find((e) => e.document === document);
    if (!editor) return "";
    const cursor = editor.selection.active;
    if (cursor.isBefore(anchor)) return undefined;
    return document.getText(new vscode.Range(anchor, cursor));
  }

  /** The first key that contradicts the ghost text rejects it; nothing we keep brings it back. */
  private checkStaleGhost(editor: vscode.TextEditor): void {
    const last = this.lastInline;
    if (!last || editor.document.uri.toString() !== last.uri) return;
    const rest = ghostRemainder(last.text, this.typedSince(editor.document, last.anchor));
    if (rest === undefined) void this.client?.sendNotification(DID_REJECT_METHOD, { id: last.id });
    if (!rest) this.lastInline = undefined; // contradicted, or typed out in full
  }

  /** VS Code ran an item's accept command: a full accept at the cursor. */
  private onInlineAccepted(): void {
    this.lastInline = undefined;
    const editor = vscode.window.activeTextEditor;
    if (!editor) return;
    const cursor = editor.selection.active;
    const rest = editor.document.lineAt(cursor.line).text.slice(cursor.character);
    this.gate.accepted(editor.document.uri.toString(), editor.document.version, rest);
  }

  private renderStatus(): void {
    const doc = vscode.window.activeTextEditor?.document;
    const view = renderStatus(this.status, doc?.uri.toString(), doc ? this.excludedHere(doc) : undefined);
    this.statusItem.text = view.text;
    this.statusItem.tooltip = view.tooltip;
    this.statusItem.backgroundColor = view.warning ? new vscode.ThemeColor("statusBarItem.warningBackground") : undefined;
  }

  /** The excludeFiles pattern a file on disk matches (for files no client attaches to, which the
   * server never lists as excluded). */
  private excludedHere(doc: vscode.TextDocument): string | undefined {
    if (doc.uri.scheme !== "file") return undefined;
    const patterns = effectiveExcludes(this.settings.excludeFiles);
    return excludedBy(vscode.workspace.asRelativePath(doc.uri, false), patterns) ?? excludedBy(doc.uri.fsPath, patterns);
  }

  async start(): Promise<void> {
    const exe = resolveExecutable(this.settings.executablePath, process.env.PATH);
    if (!exe.ok) {
      this.setStatus({ ...this.status, client: "failed", message: exe.reason });
      this.log.error(exe.reason);
      void vscode.window.showErrorMessage(`editserver: ${exe.reason}`, "Open Settings").then((pick) => {
        if (pick) void vscode.commands.executeCommand("workbench.action.openSettings", "editserver.executablePath");
      });
      return;
    }
    const serverOptions: ServerOptions = { command: exe.path, args: serverArgs(this.settings) };
    const clientOptions: LanguageClientOptions = {
      documentSelector: this.settings.languages.flatMap((language) => [
        { language, scheme: "file" },
        { language, scheme: "untitled" },
      ]),
      initializationOptions: toInitializationOptions(this.settings),
      outputChannel: this.log,
      middleware: {
        // Should the server pull settings (workspace/configuration), answer with the same payload we
        // push, not VS Code's raw section (which has client-only keys and no master switch folded in).
        workspace: {
          configuration: (params, token, next) =>
            params.items.some((i) => i.section === "editserver")
              ? params.items.map((i) => (i.section === "editserver" ? toInitializationOptions(this.settings) : null))
              : next(params, token),
        },
        executeCommand: (command, args, next) => {
          if (command === INLINE_ACCEPTED_COMMAND) this.onInlineAccepted();
          return next(command, args);
        },
        provideInlineCompletionItems: async (document, position, context, token, next) => {
          if (!this.settings.enabled || !this.settings.enableFim) return null;
          const uri = document.uri.toString();
          const version = document.version;
          const explicit = context.triggerKind === vscode.InlineCompletionTriggerKind.Invoke;
          if (!this.gate.allows(uri, version, explicit)) return null;
          const result = await next(document, position, context, token);
          // the accept command of the previous item may have run while this request was out
          if (!this.gate.allows(uri, version, explicit)) return null;
          const items = Array.isArray(result) ? result : result?.items ?? [];
          // The shown text starts at the cursor; a range that starts earlier repeats typed text.
          const shownText = (item: vscode.InlineCompletionItem) => {
            const text = typeof item.insertText === "string" ? item.insertText : item.insertText.value;
            const typed = item.range ? document.getText(new vscode.Range(item.range.start, position)) : "";
            return text.slice(typed.length);
          };
          const typed = document.version === version ? "" : this.typedSince(document, position);
          const live = liveItems(items, shownText, typed);
          const first = live[0];
          if (!first) {
            this.lastInline = undefined;
            return null;
          }
          const id = inlineItemId(first.command);
          if (id) {
            this.lastInline = { id, uri, anchor: position, text: shownText(first) };
            void this.client?.sendNotification(DID_SHOW_METHOD, { id });
          }
          return live;
        },
      },
    };
    const client = new LanguageClient("editserver", "editserver", serverOptions, clientOptions);
    client.registerProposedFeatures(); // LSP 3.18 textDocument/inlineCompletion
    this.client = client;
    client.onDidChangeState((e) => {
      const map = { [State.Starting]: "starting", [State.Running]: "running", [State.Stopped]: "stopped" } as const;
      this.setStatus({ ...this.status, client: map[e.newState] });
    });
    // Registered before start so the status sent during initialization is not missed.
    client.onNotification(STATUS_METHOD, (params: StatusParams) => this.setStatus(applyStatus(this.status, params)));
    client.onNotification(NEXT_EDIT_PARTIAL_METHOD, (params: unknown) => this.nextEdits.onPartial(params));
    this.setStatus({ ...this.status, client: "starting" });
    try {
      await client.start();
    } catch (err) {
      this.setStatus({ ...this.status, client: "failed", message: String(err) });
      this.log.error(`could not start ${exe.path}: ${String(err)}`);
    }
  }

  /** The model server's log (where a crash shows) in its own output channel, else ours. */
  private async showLog(): Promise<void> {
    const info = await this.client?.sendRequest(INFO_METHOD, {}).catch(() => undefined);
    const choice = chooseLog(info);
    if (choice.kind === "serve") {
      this.serveLog.replace(await logView(choice.path));
      this.serveLog.show(true);
      return;
    }
    this.log.info(choice.note);
    this.log.show();
  }

  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    this.nextEdits.dismiss();
    if (client) await client.dispose().catch((err: unknown) => this.log.warn(`stop: ${String(err)}`));
  }

  async restart(): Promise<void> {
    await this.stop();
    this.settings = this.read();
    await this.start();
  }

  private async toggle(): Promise<void> {
    await vscode.workspace.getConfiguration("editserver").update("enabled", !this.settings.enabled, vscode.ConfigurationTarget.Global);
  }

  private async onSettingsChanged(): Promise<void> {
    const before = this.settings;
    this.settings = this.read();
    this.setStatus({ ...this.status, enabled: this.settings.enabled });
    if (!this.settings.enabled || !this.settings.enableNextEdit) this.nextEdits.dismiss();
    if (needsRestart(before, this.settings) || serverArgs(before).join(" ") !== serverArgs(this.settings).join(" ")) {
      await this.restart();
    } else if (this.client?.isRunning()) {
      await this.client.sendNotification("workspace/didChangeConfiguration", toDidChangeConfiguration(this.settings));
    }
  }

  /** Accept the next word/line of the ghost text with VS Code's command, and report what it took. */
  private async acceptPartial(kind: PartialKind): Promise<void> {
    const last = this.lastInline;
    const editor = vscode.window.activeTextEditor;
    const fresh = last && editor && editor.document.uri.toString() === last.uri ? last : undefined;
    // what is taken is read from the document before VS Code inserts it, so typing-through counts
    const accepted = fresh && editor ? ghostPartial(fresh.text, this.typedSince(editor.document, fresh.anchor), kind) : undefined;
    const command = kind === "word" ? "editor.action.inlineSuggest.acceptNextWord" : "editor.action.inlineSuggest.acceptNextLine";
    await vscode.commands.executeCommand(command);
    if (!fresh || !accepted) return;
    void this.client?.sendNotification(DID_ACCEPT_METHOD, didAcceptParams(fresh.id, { partial: kind, acceptedText: accepted }));
  }

  dispose(): void {
    if (this.withheldTimer) clearTimeout(this.withheldTimer);
    this.disposables.forEach((d) => d.dispose());
  }
}

let extension: Extension | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const log = vscode.window.createOutputChannel("editserver", { log: true });
  extension = new Extension(context, log);
  context.subscriptions.push(log, extension);
  await extension.start();
}

export async function deactivate(): Promise<void> {
  await extension?.stop();
  extension = undefined;
}
