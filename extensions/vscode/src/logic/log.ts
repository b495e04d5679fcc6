/**
 * "Show log": which log the command opens and what its output channel holds, as pure data.
 *
 * Design decisions:
 * - The language server says where things are (`editserver/info`): when it starts the model server
 *   itself (`ownPort: true`), that server's log (`serveLog`, where a crash or a load error shows)
 *   goes into its own output channel, its last MAX_LINES lines under a header naming the file; a server
 *   the user started is not ours to read, so the command opens the language server's channel and
 *   says where to look.
 * - Read when the command runs (never cached), so it shows what the file holds now; a file that
 *   cannot be read is one line saying so, never an exception.
 */

import { promises as fs } from "node:fs";

export const MAX_LINES = 400;

export type LogChoice =
  | { kind: "serve"; path: string }
  | { kind: "client"; note: string };

/** Which log "Show log" opens, from an `editserver/info` reply (undefined: no reply). */
export function chooseLog(info: unknown): LogChoice {
  const i = (info && typeof info === "object" ? info : {}) as { ownPort?: unknown; serveLog?: unknown; serverUrl?: unknown };
  if (i.ownPort === true && typeof i.serveLog === "string" && i.serveLog) return { kind: "serve", path: i.serveLog };
  if (typeof i.serverUrl === "string" && i.serverUrl) {
    return { kind: "client", note: `The model server at ${i.serverUrl} was started outside the editor: its log is where it was started.` };
  }
  return { kind: "client", note: "The language server did not say where the model server logs (is it running?)." };
}

/** The output channel's text for the log at `path`: a header line, then its last `maxLines` lines. */
export async function logView(
  path: string,
  maxLines = MAX_LINES,
  read: (p: string) => Promise<string> = (p) => fs.readFile(p, "utf8"),
): Promise<string> {
  let text: string;
  try {
    text = await read(path);
  } catch (err) {
    return `${path}: cannot be read (${err instanceof Error ? err.message : String(err)})`;
  }
  const lines = text.replace(/\n$/, "").split("\n");
  const shown = lines.slice(-maxLines);
  const header = lines.length > shown.length ? `${path} (last ${shown.length} of ${lines.length} lines):` : `${path}:`;
  return [header, ...shown].join("\n");
}
