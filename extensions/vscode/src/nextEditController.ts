/**
 * VS Code side of next edits: asks `editserver/nextEdit` after the user edits, draws the proposed
 * edits where they are, and handles Tab (jump, then apply) and Esc (dismiss).
 *
 * Design decisions:
 * - All decisions (what to draw, where Tab goes, how ranges shift) live in logic/nextEdit.ts; this
 *   file only converts types and talks to VS Code.
 * - Requests are debounced by `debounceMs` and cancelled by the next keystroke, so a burst of
 *   typing costs one request; they say `trigger: "auto"`, so the server asks the model only after
 *   an edit that can propagate (a rename, a changed literal or signature).
 * - Streaming: `editserver/nextEditPartial` notifications for the request in flight are drawn as
 *   they arrive; the final reply completes the set.
 * - Drawing (logic/hunks.ts, logic/preview.ts): a small one-line edit shows its changed tokens
 *   inline (old struck through, new after them); a multi-line edit or a rewrite of most of a line
 *   strikes its changed tokens and shows each new line after the old line it replaces (`→ ...`,
 *   added lines as `＋ ...`), the whole new region in the hover. Nothing that inserts lines (no
 *   CodeLens, no view zone) and no gutter icons on edit lines, so the text never moves.
 * - Partial accept (Ctrl+Right: the next token span, Ctrl+Alt+Right: the spans of its line) goes
 *   through logic/acceptSpan.ts; the keys are only taken while the cursor is on an edit
 *   (`editserver.nextEditAtCursor`), so they keep moving the cursor everywhere else.
 * - Any user edit while suggestions are showing rejects them (didReject) and asks again; edits the
 *   controller applies itself are recognised by a flag and keep the remaining suggestions.
 * - Visibility is a context key (`editserver.nextEditVisible`) so Tab/Esc are only taken over while
 *   something is shown; otherwise they keep their normal meaning.
 * - Edits in other files (logic/crossFile.ts) are announced after the last edit drawn and in the
 *   status bar ("7 more in 4 files"); Tab past the last in-file edit has the language server apply
 *   the next file's edits (refused if that file changed since) and opens it at the first one;
 *   `editserver.nextEdit.list` lists every proposed edit.
 * - Tab (or a partial accept) on edits still streaming waits for the request's final reply before
 *   changing anything: the server keeps a suggestion, and applies its edits to other files, only
 *   once it is complete, and an edit to the file before that supersedes it.
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
  type PartialKind,
  parseNextEditPartial,
  parseNextEditResult,
  type NextEditResult,
  type Range,
} from "./logic/protocol";
import { acceptSpans } from "./logic/acceptSpan";
import { APPLY_EDITS_METHOD, mergeOthers, moreText, type OtherFiles } from "./logic/crossFile";
import { isLinePreview, linePreview } from "./logic/preview";
import {
  cursorOnEdit,
  editHunks,
  endOfApplied,
  planDecorations,
  planEdits,
  remainingAfter,
  tabAction,
  type PlannedEdit,
} from "./logic/nextEdit";
import type { Settings } from "./logic/settings";

const CONTEXT_KEY = "editserver.nextEditVisible";
/** True while the cursor is on a proposed edit's lines: only then Ctrl+Right/Ctrl+Alt+Right take spans. */
const AT_CURSOR_KEY = "editserver.nextEditAtCursor";

interface Shown {
  id: string;
  uri: string;
  edits: PlannedEdit[];
}

function comparePosRange(r: Range): boolean {
  return r.start.line !== r.end.line || r.start.character !== r.end.character;
}

function toRange(r: Range): vscode.Range {
  return new vscode.Range(r.start.line, r.start.character, r.end.line, r.end.character);
}

export class NextEditController implements vscode.Disposable {
  private shown: Shown | undefined;
  private pending: vscode.CancellationTokenSource | undefined;
  private pendingDoc: { uri: string; version: number } | undefined;
  /** The request in flight, until its final reply is handled. */
  private inflight: Promise<void> | undefined;
  private waiting = false; // a Tab waits for that final reply: further keys are ignored meanwhile
  private timer: NodeJS.Timeout | undefined;
  private applying = false;
  private atCursor = false;
  private others: OtherFiles | undefined;
  private opening = false; // Tab is opening another file: the editor switch is ours
  private readonly moreItem: vscode.StatusBarItem;
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
    this.hereDeco = vscode.window.createTextEditorDecorationType({
      isWholeLine: true,
      backgroundColor: new vscode.ThemeColor("editserver.nextEditDeleteBackground"),
    });
    this.upDeco = vscode.window.createTextEditorDecorationType({ gutterIconPath: media("next-edit-up.svg"), gutterIconSize: "contain" });
    this.downDeco = vscode.window.createTextEditorDecorationType({ gutterIconPath: media("next-edit-down.svg"), gutterIconSize: "contain" });
    this.moreItem = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 99);
    this.moreItem.command = "editserver.nextEdit.list";
    this.disposables.push(
      this.moreItem,
      this.replaceDeco,
      this.labelDeco,
      this.hereDeco,
      this.upDeco,
      this.downDeco,
      vscode.workspace.onDidChangeTextDocument((e) => this.onDidChange(e)),
      vscode.window.onDidChangeActiveTextEditor(() => {
        if (!this.opening) this.dismiss();
      }),
      vscode.window.onDidChangeTextEditorSelection((e) => this.updateAtCursor(e.textEditor)),
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
    this.timer = setTimeout(() => void this.request(editor, "auto"), s.debounceMs);
  }

  private cancelPending(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.pending?.cancel();
    this.pending?.dispose();
    this.pending = undefined;
    this.pendingDoc = undefined;
  }

  /** `editserver/nextEditPartial`: draw one region's edits while the request is still running. */
  onPartial(raw: unknown): void {
    const p = parseNextEditPartial(raw);
    const editor = vscode.window.activeTextEditor;
    const want = this.pendingDoc;
    if (!p || !editor || !want || p.textDocument.uri !== want.uri) return;
    if (editor.document.uri.toString() !== want.uri || editor.document.version !== want.version) return;
    this.add(editor, { id: p.id, edits: p.edits, score: p.score });
  }

  private add(editor: vscode.TextEditor, result: NextEditResult): void {
    const doc = editor.document;
    const uri = doc.uri.toString();
    const planned = planEdits(result, uri, (r) => doc.getText(toRange(r)));
    this.others = mergeOthers(this.others, result, uri);
    this.updateMore();
    if (!this.shown || this.shown.id !== result.id) {
      if (planned.length === 0) return;
      this.shown = { id: result.id, uri, edits: [] };
      void vscode.commands.executeCommand("setContext", CONTEXT_KEY, true);
      void this.getClient()?.sendNotification(DID_SHOW_METHOD, { id: result.id });
    }
    const key = (e: { range: Range; newText: string }) => `${JSON.stringify(e.range)}|${e.newText}`;
    const have = new Map(this.shown.edits.map((e) => [key(e), e] as const));
    for (const e of planned) {
      const old = have.get(key(e));
      if (old) old.index = e.index;
      else this.shown.edits.push(e);
    }
    this.render(editor);
  }

  /** Ask the server for next edits at the cursor of `editor` and show them as they arrive. */
  async request(editor: vscode.TextEditor, trigger: "auto" | "manual" = "manual"): Promise<void> {
    const client = this.getClient();
    if (!client || !client.isRunning()) return;
    this.cancelPending();
    const cts = new vscode.CancellationTokenSource();
    this.pending = cts;
    const run = this.ask(client, editor, trigger, cts);
    this.inflight = run;
    try {
      await run;
    } finally {
      if (this.inflight === run) this.inflight = undefined;
    }
  }

  private async ask(
    client: LanguageClient,
    editor: vscode.TextEditor,
    trigger: "auto" | "manual",
    cts: vscode.CancellationTokenSource,
  ): Promise<void> {
    const doc = editor.document;
    const version = doc.version;
    const uri = doc.uri.toString();
    this.pendingDoc = { uri, version };
    try {
      const raw = await client.sendRequest(NEXT_EDIT_METHOD, nextEditParams(uri, editor.selection.active, trigger), cts.token);
      if (cts.token.isCancellationRequested) return;
      this.pendingDoc = undefined;
      const result = parseNextEditResult(raw);
      if (doc.version !== version || !result || result.edits.length === 0) return;
      // partials carry a running index; add() gives each edit its index in the final reply
      this.add(editor, result);
    } catch (err) {
      if (!cts.token.isCancellationRequested) this.log.warn(`next edit request failed: ${String(err)}`);
    }
  }

  private render(editor: vscode.TextEditor): void {
    const shown = this.shown;
    if (!shown) return this.clearDecorations(editor);
    const doc = editor.document;
    const visible = editor.visibleRanges.map((r) => ({ start: r.start.line, end: r.end.line }));
    const plan = planDecorations(shown.edits, visible);
    const hint = "\n\n**Tab** jump / apply · **Ctrl+Right** next word · **Ctrl+Alt+Right** next line · **Esc** dismiss";
    const struck: vscode.DecorationOptions[] = [];
    const labels: vscode.DecorationOptions[] = [];
    const lines: vscode.DecorationOptions[] = [];
    const eol = (line: number) => new vscode.Range(line, doc.lineAt(line).text.length, line, doc.lineAt(line).text.length);
    for (const e of shown.edits) {
      if (!plan.edits.some((d) => d.index === e.index && d.inViewport)) continue;
      const hs = editHunks(e);
      if (isLinePreview(e, hs)) {
        const p = linePreview(e, (n) => doc.lineAt(n).text);
        const hoverMessage = new vscode.MarkdownString().appendCodeblock(p.newLines.join("\n"), doc.languageId).appendMarkdown(hint);
        for (const h of hs) if (comparePosRange(h.range)) struck.push({ range: toRange(h.range), hoverMessage });
        for (const l of p.labels) labels.push({ range: eol(l.line), hoverMessage, renderOptions: { after: { contentText: `  ${l.text}` } } });
        for (const l of p.removed) lines.push({ range: new vscode.Range(l, 0, l, doc.lineAt(l).text.length), hoverMessage });
        continue;
      }
      const hoverMessage = new vscode.MarkdownString().appendCodeblock(e.newText, doc.languageId).appendMarkdown(hint);
      for (const h of hs) {
        if (comparePosRange(h.range)) struck.push({ range: toRange(h.range), hoverMessage });
        if (h.newText) labels.push({ range: toRange({ start: h.range.end, end: h.range.end }), hoverMessage, renderOptions: { after: { contentText: h.newText } } });
      }
    }
    const more = moreText(this.others);
    if (more && shown.edits.length > 0) {
      const last = Math.max(...shown.edits.map((e) => e.range.end.line));
      labels.push({ range: eol(last), renderOptions: { after: { contentText: `  ${more} (Tab)` } } });
    }
    editor.setDecorations(this.replaceDeco, struck);
    editor.setDecorations(this.labelDeco, labels);
    editor.setDecorations(this.hereDeco, lines);
    const marker = (dir: "up" | "down") =>
      plan.gutter
        .filter((g) => g.direction === dir)
        .map((g) => ({
          range: new vscode.Range(g.line, 0, g.line, 0),
          hoverMessage: new vscode.MarkdownString(`${g.indices.length} proposed edit(s) ${dir === "up" ? "above" : "below"}. ${hint}`),
        }));
    editor.setDecorations(this.upDeco, marker("up"));
    editor.setDecorations(this.downDeco, marker("down"));
    this.updateAtCursor(editor);
  }

  /** Keep `editserver.nextEditAtCursor` in step with the cursor. */
  private updateAtCursor(editor: vscode.TextEditor): void {
    const shown = this.shown;
    const on =
      !!shown && editor.document.uri.toString() === shown.uri && shown.edits.some((e) => cursorOnEdit(e, editor.selection.active));
    if (on === this.atCursor) return;
    this.atCursor = on;
    void vscode.commands.executeCommand("setContext", AT_CURSOR_KEY, on);
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
    if (!editor || !shown || editor.document.uri.toString() !== shown.uri) return this.nextFile();
    const action = tabAction(shown.edits, editor.selection.active);
    if (action.kind === "jump") {
      const pos = new vscode.Position(action.position.line, action.position.character);
      editor.selection = new vscode.Selection(pos, pos);
      editor.revealRange(new vscode.Range(pos, pos), vscode.TextEditorRevealType.InCenterIfOutsideViewport);
      return;
    }
    if (action.kind !== "apply") return;
    if (await this.untilFinal()) return this.jumpOrApply();
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
    await this.settle(editor, remainingAfter(shown.edits, edit));
  }

  /** Ctrl+Right / Ctrl+Alt+Right: accept the next token span / line of spans of the edit under the
   * cursor (on no edit: jump to the next one first, as Tab does). */
  async acceptPartial(kind: PartialKind): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    const shown = this.shown;
    if (!editor || !shown || editor.document.uri.toString() !== shown.uri) return;
    if (await this.untilFinal()) return this.acceptPartial(kind);
    const edit = shown.edits.find((e) => cursorOnEdit(e, editor.selection.active));
    if (!edit) return this.jumpOrApply();
    const acc = acceptSpans(edit, kind);
    if (!acc) return;
    this.applying = true;
    let ok = false;
    try {
      ok = await editor.edit((b) => acc.changes.forEach((h) => b.replace(toRange(h.range), h.newText)));
    } finally {
      this.applying = false;
    }
    if (!ok) return;
    void this.getClient()?.sendNotification(
      DID_ACCEPT_METHOD,
      didAcceptParams(shown.id, { editIndex: edit.index, partial: kind, acceptedText: acc.acceptedText }),
    );
    const pos = new vscode.Position(acc.cursor.line, acc.cursor.character);
    editor.selection = new vscode.Selection(pos, pos);
    const others = remainingAfter(shown.edits, acc.asApplied);
    await this.settle(editor, acc.remaining ? [...others, acc.remaining] : others);
  }

  /** Before applying anything, the final reply of the request in flight: the server keeps a
   * suggestion (to apply its edits in other files) only once it is complete, and an edit to the file
   * before that supersedes it. True when it waited (the caller re-reads the state), also when
   * another key is already waiting (then the caller must do nothing). */
  private async untilFinal(): Promise<boolean> {
    if (this.waiting) return true;
    if (!this.inflight) return false;
    this.waiting = true;
    try {
      await this.inflight;
    } finally {
      this.waiting = false;
    }
    return true;
  }

  /** After an accept: keep drawing what is left, or clear everything when nothing is. */
  private async settle(editor: vscode.TextEditor, left: PlannedEdit[]): Promise<void> {
    const shown = this.shown;
    if (!shown) return;
    shown.edits = left;
    if (left.length > 0) return this.render(editor);
    this.shown = undefined;
    this.clearDecorations(editor);
    this.updateAtCursor(editor);
    await vscode.commands.executeCommand("setContext", CONTEXT_KEY, !!moreText(this.others));
  }

  /** "N more in M files" in the status bar; Tab stays ours while other files have edits. */
  private updateMore(): void {
    const more = moreText(this.others);
    if (more) {
      this.moreItem.text = `$(arrow-right) ${more}`;
      this.moreItem.tooltip = "editserver: Tab applies the next file's edits and opens it; click to list them";
      this.moreItem.show();
      void vscode.commands.executeCommand("setContext", CONTEXT_KEY, true);
    } else {
      this.moreItem.hide();
      if (!this.shown) void vscode.commands.executeCommand("setContext", CONTEXT_KEY, false);
    }
  }

  /** Tab past the last in-file edit: the language server applies the next file's edits (or refuses
   * them when the file changed since), then the file opens at the first one. */
  async nextFile(): Promise<void> {
    const client = this.getClient();
    if (!client || this.opening || this.waiting) return;
    this.opening = true;
    try {
      // Tab on streamed edits: the server applies a suggestion's edits only once its final reply
      // is out (which may also add files)
      if (this.inflight && this.others) await this.inflight;
      await this.applyNextFile(client);
    } finally {
      this.opening = false;
      this.updateMore();
    }
  }

  private async applyNextFile(client: LanguageClient): Promise<void> {
    const kept = this.others;
    if (!kept || kept.files.length === 0) return;
    const file = kept.files.shift();
    if (!file) return;
    try {
      const res = (await client.sendRequest(APPLY_EDITS_METHOD, { id: kept.id, uri: file.uri })) as {
        applied?: boolean;
        reason?: string | null;
        range?: Range;
      };
      const name = vscode.workspace.asRelativePath(vscode.Uri.parse(file.uri));
      if (!res?.applied || !res.range) {
        void vscode.window.showWarningMessage(`editserver: ${name}: ${res?.reason ?? "not applied"}`);
        return;
      }
      const editor = await vscode.window.showTextDocument(vscode.Uri.parse(file.uri));
      const pos = new vscode.Position(res.range.start.line, res.range.start.character);
      editor.selection = new vscode.Selection(pos, pos);
      editor.revealRange(new vscode.Range(pos, pos), vscode.TextEditorRevealType.InCenterIfOutsideViewport);
    } catch (err) {
      this.log.warn(`applying next edits in ${file.uri} failed: ${String(err)}`);
    }
  }

  /** Every proposed edit, in this file and the others, to pick one and go there. */
  async list(): Promise<void> {
    type Item = vscode.QuickPickItem & { uri: string; line: number; character: number };
    const items: Item[] = [];
    const add = (uri: string, r: Range, newText: string) =>
      items.push({
        label: `${vscode.workspace.asRelativePath(vscode.Uri.parse(uri))}:${r.start.line + 1}`,
        description: newText.split("\n")[0],
        uri,
        line: r.start.line,
        character: r.start.character,
      });
    for (const e of this.shown?.edits ?? []) add(this.shown?.uri ?? "", e.range, e.newText);
    for (const f of this.others?.files ?? []) for (const e of f.edits) add(f.uri, e.range, e.newText);
    if (items.length === 0) return void vscode.window.showInformationMessage("editserver: no proposed edits");
    const pick = await vscode.window.showQuickPick(items, { title: "editserver: proposed edits" });
    if (!pick) return;
    this.opening = true;
    try {
      const editor = await vscode.window.showTextDocument(vscode.Uri.parse(pick.uri));
      const pos = new vscode.Position(pick.line, pick.character);
      editor.selection = new vscode.Selection(pos, pos);
      editor.revealRange(new vscode.Range(pos, pos), vscode.TextEditorRevealType.InCenterIfOutsideViewport);
    } finally {
      this.opening = false;
    }
  }

  /** Esc (or any unrelated edit / editor switch): reject what is shown and clear it. */
  dismiss(): void {
    this.cancelPending();
    const shown = this.shown;
    const others = this.others;
    this.others = undefined;
    this.updateMore();
    if (!shown) {
      if (others) void this.getClient()?.sendNotification(DID_REJECT_METHOD, { id: others.id });
      return;
    }
    this.shown = undefined;
    this.clearDecorations(undefined);
    const editor = vscode.window.activeTextEditor;
    if (editor) this.updateAtCursor(editor);
    void vscode.commands.executeCommand("setContext", CONTEXT_KEY, false);
    void this.getClient()?.sendNotification(DID_REJECT_METHOD, { id: shown.id });
  }

  dispose(): void {
    this.cancelPending();
    this.disposables.forEach((d) => d.dispose());
  }
}
