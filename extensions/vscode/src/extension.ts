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
 * - The executable is resolved before starting so a missing binary is one clear message, not a
 *   spawn error in the log.
 */

import { promises as fs } from "node:fs";
import * as vscode from "vscode";
import {
  LanguageClient,
  State,
  type LanguageClientOptions,
  type ServerOptions,
} from "vscode-languageclient/node";
import { resolveExecutable } from "./logic/executable";
import { partialSlice } from "./logic/partial";
import {
  DID_ACCEPT_METHOD,
  DID_SHOW_METHOD,
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
import { applyStatus, renderStatus, type StatusModel } from "./logic/status";
import { NextEditController } from "./nextEditController";

/** The inline suggestion most recently handed to VS Code (for partial-accept telemetry). */
interface LastInline {
  id: string;
  uri: string;
  text: string;
  accepted: number; // characters of `text` accepted so far by partial accepts
}

class Extension implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private settings: Settings;
  private status: StatusModel;
  private lastInline: LastInline | undefined;
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
      vscode.commands.registerCommand("editserver.acceptNextWord", () => this.acceptPartial("word")),
      vscode.commands.registerCommand("editserver.acceptNextLine", () => this.acceptPartial("line")),
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
  }

  private renderStatus(): void {
    const view = renderStatus(this.status);
    this.statusItem.text = view.text;
    this.statusItem.tooltip = view.tooltip;
    this.statusItem.backgroundColor = view.warning ? new vscode.ThemeColor("statusBarItem.warningBackground") : undefined;
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
        provideInlineCompletionItems: async (document, position, context, token, next) => {
          if (!this.settings.enabled || !this.settings.enableFim) return null;
          const result = await next(document, position, context, token);
          const items = Array.isArray(result) ? result : result?.items ?? [];
          const first = items[0];
          const id = first ? inlineItemId(first.command) : undefined;
          if (first && id) {
            const text = typeof first.insertText === "string" ? first.insertText : first.insertText.value;
            // The shown text starts at the cursor; a range that starts earlier repeats typed text.
            const typed = first.range ? document.getText(new vscode.Range(first.range.start, position)) : "";
            this.lastInline = { id, uri: document.uri.toString(), text: text.slice(typed.length), accepted: 0 };
            void this.client?.sendNotification(DID_SHOW_METHOD, { id });
          }
          return result;
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

  /** The model server's log (where a crash shows) in its own output channel, then ours. */
  private async showLog(): Promise<void> {
    const info = (await this.client?.sendRequest(INFO_METHOD, {}).catch(() => undefined)) as { serveLog?: unknown } | undefined;
    const path = typeof info?.serveLog === "string" ? info.serveLog : undefined;
    if (path) {
      const text = await fs.readFile(path, "utf8").catch((err: unknown) => `cannot read ${path}: ${String(err)}`);
      this.serveLog.clear();
      this.serveLog.appendLine(`${path}:`);
      this.serveLog.append(text.split("\n").slice(-400).join("\n"));
      this.serveLog.show(true);
      return;
    }
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
    const command = kind === "word" ? "editor.action.inlineSuggest.acceptNextWord" : "editor.action.inlineSuggest.acceptNextLine";
    await vscode.commands.executeCommand(command);
    const last = this.lastInline;
    const editor = vscode.window.activeTextEditor;
    if (!last || !editor || editor.document.uri.toString() !== last.uri) return;
    const accepted = partialSlice(last.text.slice(last.accepted), kind);
    if (!accepted) return;
    last.accepted += accepted.length;
    void this.client?.sendNotification(DID_ACCEPT_METHOD, didAcceptParams(last.id, { partial: kind, acceptedText: accepted }));
  }

  dispose(): void {
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
