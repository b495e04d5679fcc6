/**
 * Status bar text: on/off, server state and last latency, as pure data.
 *
 * Design decisions:
 * - The server reports its state through `editserver/status`; the client process state (starting,
 *   stopped, executable missing) comes from the extension; both fold into one `StatusModel`.
 * - Codicon names (`$(...)`) are plain strings here, so the mapping is unit-tested.
 * - Completions the server withheld below its threshold in the last minute show as `· 3 withheld
 *   <0.93` (nothing when none); the tooltip always names the threshold and how to change it. The
 *   count ages out on the server, so the extension polls `editserver/info` while it is non-zero.
 * - A file that `excludeFiles` keeps out gets no suggestions by design: while it is the active
 *   editor the item says so and names the pattern (the server lists the open excluded files in
 *   every status), so an empty ghost text is never mistaken for a broken server. A file the server
 *   never sees (no client attaches to a `.env`) is matched in the editor (logic/privacy.ts).
 * - The latest latency survives state changes that carry none (a status without latencyMs does not
 *   erase the last measurement).
 */

import type { ServerState, StatusParams } from "./protocol";

export type ClientState = "stopped" | "starting" | "running" | "failed";

export interface StatusModel {
  enabled: boolean;
  client: ClientState;
  server?: ServerState;
  message?: string;
  latencyMs?: number;
  withheld?: number;
  fimThreshold?: number;
  excluded?: Record<string, string>; // uri -> the excludeFiles pattern that matched
}

export function applyStatus(model: StatusModel, params: StatusParams): StatusModel {
  const next: StatusModel = { ...model, server: params.state };
  if (params.message !== undefined) next.message = params.message;
  else delete next.message;
  if (typeof params.latencyMs === "number") next.latencyMs = params.latencyMs;
  if (typeof params.withheld === "number") next.withheld = params.withheld;
  if (typeof params.fimThreshold === "number") next.fimThreshold = params.fimThreshold;
  if (Array.isArray(params.excluded)) {
    next.excluded = Object.fromEntries(params.excluded.map((e) => [e.uri, e.pattern]));
  }
  return next;
}

/** Live state from `editserver/info` (polled while a withheld count needs to age out). */
export function applyInfo(model: StatusModel, info: unknown): StatusModel {
  if (!info || typeof info !== "object") return model;
  const i = info as { withheld?: unknown; fimThreshold?: unknown };
  const next: StatusModel = { ...model };
  if (typeof i.withheld === "number") next.withheld = i.withheld;
  if (typeof i.fimThreshold === "number") next.fimThreshold = i.fimThreshold;
  return next;
}

/** ` · 3 withheld <0.93`: completions the server held back in the last minute, and its threshold. */
export function withheldText(m: StatusModel): string {
  const n = m.withheld ?? 0;
  if (n <= 0) return "";
  return m.fimThreshold !== undefined ? ` · ${n} withheld <${m.fimThreshold}` : ` · ${n} withheld`;
}

/** The threshold, the withheld count and how to change the threshold, for the tooltip. */
export function thresholdTooltip(m: StatusModel): string {
  if (m.fimThreshold === undefined && !m.withheld) return "";
  const threshold = m.fimThreshold !== undefined ? String(m.fimThreshold) : "unknown";
  const n = m.withheld ?? 0;
  return (
    `\nCompletion threshold ${threshold}: ${n} completion${n === 1 ? "" : "s"} withheld below it in the last minute.` +
    "\nTo change it, start `editserver serve --fim-threshold X` yourself (0 shows every completion)" +
    " and set editserver.serverUrl to its URL."
  );
}

export interface StatusView {
  text: string;
  tooltip: string;
  warning: boolean;
}

/** ``activeUri``: the active editor's document, to say when it is excluded; ``localPattern``: the
 * excludeFiles pattern it matches when the server does not see it (logic/privacy.ts). */
export function renderStatus(m: StatusModel, activeUri?: string, localPattern?: string): StatusView {
  const pattern = (activeUri !== undefined ? m.excluded?.[activeUri] : undefined) ?? localPattern;
  if (m.enabled && pattern !== undefined) {
    return {
      text: "$(lock) editserver: excluded",
      tooltip: `No suggestions for this file: it matches the excludeFiles pattern ${pattern}, so nothing of it is sent to the model or stored.`,
      warning: false,
    };
  }
  const latency = m.latencyMs !== undefined ? ` ${Math.round(m.latencyMs)} ms` : "";
  const detail = m.message ? `\n${m.message}` : "";
  if (!m.enabled) {
    return { text: "$(circle-slash) editserver off", tooltip: "Suggestions are off. Click to turn them on.", warning: false };
  }
  if (m.client === "failed") {
    return { text: "$(error) editserver", tooltip: `The language server could not start.${detail}`, warning: true };
  }
  if (m.client === "stopped") {
    return { text: "$(debug-stop) editserver", tooltip: "The language server is stopped.", warning: true };
  }
  if (m.client === "starting" || m.server === undefined || m.server === "starting") {
    return { text: "$(sync~spin) editserver", tooltip: `Starting…${detail}`, warning: false };
  }
  switch (m.server) {
    case "ready":
      return {
        text: `$(sparkle) editserver${latency}${withheldText(m)}`,
        tooltip: `Ready. Last suggestion took${latency || " -"}.${thresholdTooltip(m)}${detail}\nClick to turn off.`,
        warning: false,
      };
    case "unreachable":
      return { text: "$(warning) editserver unreachable", tooltip: `The model server does not answer.${detail}`, warning: true };
    case "disabled":
      return { text: "$(circle-slash) editserver", tooltip: `Disabled by the server.${detail}`, warning: false };
  }
}
