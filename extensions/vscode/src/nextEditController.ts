/**
 * VS Code side of next edits: asks `editserver/nextEdit` after the user edits, draws the proposed
 * edits where they are, and handles Tab (jump, then apply) and Esc (dismiss).
 *
 * Design decisions:
 * - All decisions (what to draw, where Tab goes, how ranges shift) live in logic/nextEdit.ts; this
 *   file only converts types and talks to VS Code.
 * - Requests are debounced by `debounceMs` and cancelled by the next keystroke, so a burst of
 *   typing costs one request.
 * - Any user edit while suggestions are showing rejects them (didReject) and asks again; edits the
 *   controller applies itself are recognised by a flag and keep the remaining suggestions.
 * - Visibility is a context key (`editserver.nextEditVisible`) so Tab/Esc are only taken over while
 *   something is shown; otherwise they keep their normal meaning.
 */

import * as path from "node:path";
import * as vscode from "vscode";
import type { LanguageClient } from "vscode-languageclient/node";
import {
  DID_ACCEPT_METHOD,
  DID_REJECT_METHOD,
  DID_SHOW_METHOD,
  NEXT_EDIT_METHOD,
  didAcceptParams,
  nextEditParams,
  parseNextEditResult,
  type Range,
} from "./logic/protocol";
import {
  endOfApplied,
  planDecorations,
  planEdits,
  remainingAfter,
  tabAction,
  type PlannedEdit,
} from "./logic/nextEdit";
import type { Settings } from "./logic/settings";

const CONTEXT_KEY = "editserver.nextEditVisible";

interface Shown {
  id: string;
  uri: string;
  edits: PlannedEdit[];
}

function toRange(r: Range): vscode.Range {
  return new vscode.Range(r.start.line, r.start.character, r.end.line, r.end.character);
}

export class NextEditController implements vscode.Disposable {
  private shown: Shown | undefined;
  private pending: vscode.CancellationTokenSource | undefined;
  private timer: NodeJS.Timeout | undefined;
  private applying = false;
  private readonly disposables: vscode.Disposable[] = [];
  private readonly replaceDeco: vscode.TextEditorDecorationType;
  private readonly labelDeco: vscode.TextEditorDecorationType;
  private readonly hereDeco: vscode.TextEditorDecorationType;
  private readonly upDeco: vscode.TextEditorDecorationType;
  private readonly downDeco: vscode.TextEditorDecorationType;

  constructor(
    extensionPath: string,
    private readonly getClient: () => LanguageClient | undefined,
    private readonly getSettings: () => Settings,
    private readonly log: vscode.LogOutputChannel,
  ) {
    const media = (name: string) => vscode.Uri.file(path.join(extensionPath, "media", name));
    this.replaceDeco = vscode.window.createTextEditorDecorationType({
      backgroundColor: new vscode.ThemeColor("editserver.nextEditDeleteBackground"),
      textDecoration: "line-through",
    });
    this.labelDeco = vscode.window.createTextEditorDecorationType({
      after: { color: new vscode.ThemeColor("editserver.nextEditInsertForeground"), margin: "0 0 0 0.5em", fontStyle: "italic" },
    });
    this.hereDeco = vscode.window.createTextEditorDecorationType({ gutterIconPath: media("next-edit-here.svg"), gutterIconSize: "contain" });
    this.upDeco = vscode.window.createTextEditorDecorationType({ gutterIconPath: media("next-edit-up.svg"), gutterIconSize: "contain" });
    this.downDeco = vscode.window.createTextEditorDecorationType({ gutterIconPath: media("next-edit-down.svg"), gutterIconSize: "contain" });
    this.disposables.push(
      this.replaceDeco,
      this.labelDeco,
      this.hereDeco,
      this.upDeco,
      this.downDeco,
      vscode.workspace.onDidChangeTextDocument((e) => this.onDidChange(e)),
      vscode.window.onDidChangeActiveTextEditor(() => this.dismiss()),
      vscode.window.onDidChangeTextEditorVisibleRanges((e) => {
        if (this.shown && e.textEditor.document.uri.toString() === this.shown.uri) this.render(e.textEditor);
      }),
    );
  }

  private onDidChange(e: vscode.TextDocumentChangeEvent): void {
    if (this.applying || e.contentChanges.length === 0) return;
    const editor = vscode.window.activeTextEditor;
    if (!editor || editor.document !== e.document) return;
    if (!this.getSettings().languages.includes(e.document.languageId)) return;
    if (this.shown) this.dismiss();
    this.schedule(editor);
  }

  private schedule(editor: vscode.TextEditor): void {
    const s = this.getSettings();
    if (!s.enabled || !s.enableNextEdit) return;
    this.cancelPending();
    this.timer = setTimeout(() => void this.request(editor), s.debounceMs);
  }

  private cancelPending(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.pending?.cancel();
    this.pending?.dispose();
    this.pending = undefined;
  }

  /** Ask the server for next edits at the cursor of `editor` and show them. */
  async request(editor: vscode.TextEditor): Promise<void> {
    const client = this.getClient();
    if (!client || !client.isRunning()) return;
    this.cancelPending();
    const cts = new vscode.CancellationTokenSource();
    this.pending = cts;
    const doc = editor.document;
    const version = doc.version;
    try {
      const raw = await client.sendRequest(NEXT_EDIT_METHOD, nextEditParams(doc.uri.toString(), editor.selection.active), cts.token);
      if (cts.token.isCancellationRequested || doc.version !== version) return;
      const result = parseNextEditResult(raw);
      if (!result) return;
      const edits = planEdits(result, doc.uri.toString(), (r) => doc.getText(toRange(r)));
      if (edits.length === 0) return;
      this.shown = { id: result.id, uri: doc.uri.toString(), edits };
      this.render(editor);
      await vscode.commands.executeCommand("setContext", CONTEXT_KEY, true);
      await client.sendNotification(DID_SHOW_METHOD, { id: result.id });
    } catch (err) {
      if (!cts.token.isCancellationRequested) this.log.warn(`next edit request failed: ${String(err)}`);
    }
  }

  private render(editor: vscode.TextEditor): void {
    const shown = this.shown;
    if (!shown) return this.clearDecorations(editor);
    const visible = editor.visibleRanges.map((r) => ({ start: r.start.line, end: r.end.line }));
    const plan = planDecorations(shown.edits, visible);
    const hint = "\n\n**Tab** jump / apply · **Esc** dismiss";
    editor.setDecorations(
      this.replaceDeco,
      plan.edits.filter((d) => d.kind !== "insert").map((d) => ({ range: toRange(d.range) })),
    );
    editor.setDecorations(
      this.labelDeco,
      plan.edits
        .filter((d) => d.kind !== "delete")
        .map((d) => ({
          range: toRange({ start: d.range.end, end: d.range.end }),
          hoverMessage: new vscode.MarkdownString().appendCodeblock(d.hover, editor.document.languageId).appendMarkdown(hint),
          renderOptions: { after: { contentText: d.kind === "insert" ? d.label : `→ ${d.label}` } },
        })),
    );
    editor.setDecorations(
      this.hereDeco,
      plan.edits.map((d) => ({ range: toRange({ start: d.range.start, end: d.range.start }) })),
    );
    const marker = (dir: "up" | "down") =>
      plan.gutter
        .filter((g) => g.direction === dir)
        .map((g) => ({
          range: new vscode.Range(g.line, 0, g.line, 0),
          hoverMessage: new vscode.MarkdownString(`${g.indices.length} proposed edit(s) ${dir === "up" ? "above" : "below"}. ${hint}`),
        }));
    editor.setDecorations(this.upDeco, marker("up"));
    editor.setDecorations(this.downDeco, marker("down"));
  }

  private clearDecorations(editor: vscode.TextEditor | undefined): void {
    for (const editorToClear of editor ? [editor] : vscode.window.visibleTextEditors) {
      for (const deco of [this.replaceDeco, this.labelDeco, this.hereDeco, this.upDeco, this.downDeco]) {
        editorToClear.setDecorations(deco, []);
      }
    }
  }

  /** Tab: jump to the next proposed edit, or apply it when the cursor is already there. */
  async jumpOrApply(): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    const shown = this.shown;
    if (!editor || !shown || editor.document.uri.toString() !== shown.uri) return;
    const action = tabAction(shown.edits, editor.selection.active);
    if (action.kind === "jump") {
      const pos = new vscode.Position(action.position.line, action.position.character);
      editor.selection = new vscode.Selection(pos, pos);
      editor.revealRange(new vscode.Range(pos, pos), vscode.TextEditorRevealType.InCenterIfOutsideViewport);
      return;
    }
    if (action.kind !== "apply") return;
    const edit = shown.edits.find((e) => e.index === action.index);
    if (!edit) return;
    this.applying = true;
    let ok = false;
    try {
      ok = await editor.edit((b) => b.replace(toRange(edit.range), edit.newText));
    } finally {
      this.applying = false;
    }
    if (!ok) return;
    void this.getClient()?.sendNotification(DID_ACCEPT_METHOD, didAcceptParams(shown.id, { editIndex: edit.index }));
    const end = endOfApplied(edit);
    const pos = new vscode.Position(end.line, end.character);
    editor.selection = new vscode.Selection(pos, pos);
    shown.edits = remainingAfter(shown.edits, edit);
    if (shown.edits.length === 0) {
      this.shown = undefined;
      this.clearDecorations(editor);
      await vscode.commands.executeCommand("setContext", CONTEXT_KEY, false);
    } else {
      this.render(editor);
    }
  }

  /** Esc (or any unrelated edit / editor switch): reject what is shown and clear it. */
  dismiss(): void {
    this.cancelPending();
    const shown = this.shown;
    if (!shown) return;
    this.shown = undefined;
    this.clearDecorations(undefined);
    void vscode.commands.executeCommand("setContext", CONTEXT_KEY, false);
    void this.getClient()?.sendNotification(DID_REJECT_METHOD, { id: shown.id });
  }

  dispose(): void {
    this.cancelPending();
    this.disposables.forEach((d) => d.dispose());
  }
}
