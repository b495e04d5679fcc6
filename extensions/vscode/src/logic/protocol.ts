/**
 * The editserver LSP contract, as the client speaks it: method names, payload shapes and the
 * builders for every request and notification the extension sends.
 *
 * Design decisions:
 * - Pure module (no `vscode` import) so the node tests drive a real `editserver lsp` with exactly
 *   the payloads the extension sends.
 * - Shapes mirror the fixed contract in the project brief; positions are LSP (0-based line,
 *   UTF-16 character), which is also what VS Code uses, so no conversion is needed.
 */

export const NEXT_EDIT_METHOD = "editserver/nextEdit";
/** Server -> client: one region's kept edits, as soon as it is vetted (same id as the final reply). */
export const NEXT_EDIT_PARTIAL_METHOD = "editserver/nextEditPartial";
/** Live state: server URL (own or configured), serve log, restarts, withheld completions. */
export const INFO_METHOD = "editserver/info";
export const DID_SHOW_METHOD = "editserver/didShow";
export const DID_ACCEPT_METHOD = "editserver/didAccept";
export const DID_REJECT_METHOD = "editserver/didReject";
export const STATUS_METHOD = "editserver/status";
/** Server-side command carried by every inline completion item; VS Code runs it on full accept. */
export const INLINE_ACCEPTED_COMMAND = "editserver.inlineAccepted";

export interface Position {
  line: number;
  character: number;
}

export interface Range {
  start: Position;
  end: Position;
}

export interface NextEditParams {
  textDocument: { uri: string };
  position: Position;
  /** "auto": sent after an edit; the server asks the model only when the edit can propagate. */
  trigger?: "auto" | "manual";
  partialResults?: boolean;
}

export interface NextEditPartial {
  id: string;
  textDocument: { uri: string; version?: number | null };
  edits: NextEdit[];
  score: number;
}

export interface NextEdit {
  textDocument: { uri: string; version?: number | null };
  range: Range;
  newText: string;
}

export interface NextEditResult {
  id: string;
  edits: NextEdit[];
  score: number;
  /** Why no model was asked (an automatic request after an edit that cannot propagate). */
  skipped?: string;
}

export type PartialKind = "word" | "line";

export interface DidShowParams {
  id: string;
}

export interface DidAcceptParams {
  id: string;
  editIndex?: number;
  partial?: PartialKind;
  acceptedText?: string;
}

export interface DidRejectParams {
  id: string;
}

export type ServerState = "starting" | "ready" | "unreachable" | "disabled";

export interface StatusParams {
  state: ServerState;
  message?: string;
  latencyMs?: number;
  /** Completions withheld below the server's threshold in the last minute, and that threshold. */
  withheld?: number;
  fimThreshold?: number;
  /** Open documents that `excludeFiles` keeps out, with the pattern that matched. */
  excluded?: { uri: string; path: string; pattern: string }[];
}

export function nextEditParams(uri: string, position: Position, trigger: "auto" | "manual" = "manual"): NextEditParams {
  return {
    textDocument: { uri },
    position: { line: position.line, character: position.character },
    trigger,
    partialResults: true,
  };
}

/** Validate a partial; anything malformed is ignored. */
export function parseNextEditPartial(raw: unknown): NextEditPartial | undefined {
  const r = parseNextEditResult(raw);
  const doc = (raw as { textDocument?: { uri?: unknown } } | undefined)?.textDocument;
  if (!r || !doc || typeof doc.uri !== "string") return undefined;
  return { id: r.id, textDocument: doc as NextEditPartial["textDocument"], edits: r.edits, score: r.score };
}

export function didAcceptParams(
  id: string,
  opts: { editIndex?: number; partial?: PartialKind; acceptedText?: string } = {},
): DidAcceptParams {
  // Only set keys that carry information: the server treats a missing `partial` as a full accept.
  const params: DidAcceptParams = { id };
  if (opts.editIndex !== undefined) params.editIndex = opts.editIndex;
  if (opts.partial !== undefined) params.partial = opts.partial;
  if (opts.acceptedText !== undefined) params.acceptedText = opts.acceptedText;
  return params;
}

/** The suggestion id an inline completion item carries in its `editserver.inlineAccepted` command. */
export function inlineItemId(command: { command: string; arguments?: unknown[] } | undefined): string | undefined {
  if (!command || command.command !== INLINE_ACCEPTED_COMMAND) return undefined;
  const arg = command.arguments?.[0];
  if (arg && typeof arg === "object" && typeof (arg as { id?: unknown }).id === "string") {
    return (arg as { id: string }).id;
  }
  return undefined;
}

/** Validate a nextEdit response; anything malformed becomes "nothing to suggest" rather than a crash. */
export function parseNextEditResult(raw: unknown): NextEditResult | undefined {
  if (!raw || typeof raw !== "object") return undefined;
  const r = raw as Partial<NextEditResult>;
  if (typeof r.id !== "string" || !Array.isArray(r.edits)) return undefined;
  const edits = r.edits.filter(
    (e): e is NextEdit =>
      !!e && typeof e.newText === "string" && isRange(e.range) && !!e.textDocument && typeof e.textDocument.uri === "string",
  );
  const out: NextEditResult = { id: r.id, edits, score: typeof r.score === "number" ? r.score : 0 };
  if (typeof r.skipped === "string") out.skipped = r.skipped;
  return out;
}

function isRange(r: unknown): r is Range {
  if (!r || typeof r !== "object") return false;
  const { start, end } = r as Range;
  return isPosition(start) && isPosition(end);
}

function isPosition(p: unknown): p is Position {
  return !!p && typeof (p as Position).line === "number" && typeof (p as Position).character === "number";
}
