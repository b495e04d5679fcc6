/**
 * Status bar text: on/off, server state and last latency, as pure data.
 *
 * Design decisions:
 * - The server reports its state through `editserver/status`; the client process state (starting,
 *   stopped, executable missing) comes from the extension; both fold into one `StatusModel`.
 * - Codicon names (`$(...)`) are plain strings here, so the mapping is unit-tested.
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
}

export function applyStatus(model: StatusModel, params: StatusParams): StatusModel {
  const next: StatusModel = { ...model, server: params.state };
  if (params.message !== undefined) next.message = params.message;
  else delete next.message;
  if (typeof params.latencyMs === "number") next.latencyMs = params.latencyMs;
  if (typeof params.withheld === "number") next.withheld = params.withheld;
  if (typeof params.fimThreshold === "number") next.fimThreshold = params.fimThreshold;
  return next;
}

export interface StatusView {
  text: string;
  tooltip: string;
  warning: boolean;
}

export function renderStatus(m: StatusModel): StatusView {
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
    case "ready": {
      const n = m.withheld ?? 0;
      const threshold = m.fimThreshold !== undefined ? String(m.fimThreshold) : "?";
      const withheld = n > 0 ? ` (${n} withheld)` : "";
      const why =
        n > 0
          ? `\n${n} completion(s) withheld below the server's threshold ${threshold} in the last minute;` +
            " start `editserver serve --fim-threshold X` yourself and set editserver.serverUrl to see more."
          : "";
      return {
        text: `$(sparkle) editserver${latency}${withheld}`,
        tooltip: `Ready. Last suggestion took${latency || " -"}.${why}${detail}\nClick to turn off.`,
        warning: false,
      };
    }
    case "unreachable":
      return { text: "$(warning) editserver unreachable", tooltip: `The model server does not answer.${detail}`, warning: true };
    case "disabled":
      return { text: "$(circle-slash) editserver", tooltip: `Disabled by the server.${detail}`, warning: false };
  }
}
