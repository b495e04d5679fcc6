/**
 * Settings: read the `editserver.*` configuration into one typed object, and turn it into what the
 * language server consumes (initializationOptions, didChangeConfiguration, command line).
 *
 * Design decisions:
 * - One place parses settings; everything else takes the typed `Settings`.
 * - Reading goes through a `get(key)` callback instead of `vscode.WorkspaceConfiguration`, so the
 *   mapping is unit-tested without VS Code.
 * - A wrong-typed value falls back to its default here (VS Code already validates against the
 *   schema, so this only guards hand-edited JSON); range checks stay with the server, which warns.
 * - The master switch `enabled` is folded into `enableFim`/`enableNextEdit` so the server stops
 *   computing suggestions when the user toggles off (it then reports state "disabled").
 */

export interface Settings {
  enabled: boolean;
  serverUrl: string;
  executablePath: string;
  autostart: boolean;
  modelPath: string;
  debounceMs: number;
  enableFim: boolean;
  enableNextEdit: boolean;
  languages: string[];
  excludeFiles: string[];
  telemetry: { enabled: boolean; path: string; keepPrompts: boolean };
}

/** Defaults; keep in sync with `contributes.configuration` in package.json (a test checks). */
export const DEFAULTS: Settings = {
  enabled: true,
  serverUrl: "", // empty: the language server starts a server of its own on a free port
  executablePath: "", // empty: find `editserver` on PATH
  autostart: true,
  modelPath: "", // empty: the shipped default checkpoint
  debounceMs: 150,
  enableFim: true,
  enableNextEdit: true,
  languages: ["python", "javascript", "typescript", "javascriptreact", "typescriptreact", "go", "rust"],
  excludeFiles: [], // added to the server's secret-file defaults (.env*, *.pem, ...); "!*.key" removes one
  telemetry: { enabled: true, path: "", keepPrompts: false }, // local SQLite only; empty path: the server's default
};

/** The initializationOptions / `settings.editserver` payload of the contract. */
export interface InitializationOptions {
  serverUrl: string;
  autostart: boolean;
  debounceMs: number;
  enableFim: boolean;
  enableNextEdit: boolean;
  languages: string[];
  excludeFiles?: string[];
  telemetry: { enabled: boolean; path?: string; keepPrompts?: boolean };
}

export type ConfigGetter = (key: string) => unknown;

function pick<T>(get: ConfigGetter, key: string, fallback: T, ok: (v: unknown) => boolean): T {
  const value = get(key);
  return value !== undefined && ok(value) ? (value as T) : fallback;
}

const isBool = (v: unknown) => typeof v === "boolean";
const isString = (v: unknown) => typeof v === "string";
const isNumber = (v: unknown) => typeof v === "number" && Number.isFinite(v);
const isStringArray = (v: unknown) => Array.isArray(v) && v.every((x) => typeof x === "string");

/** Read settings; `get` takes keys relative to the `editserver` section (e.g. "telemetry.enabled"). */
export function readSettings(get: ConfigGetter): Settings {
  return {
    enabled: pick(get, "enabled", DEFAULTS.enabled, isBool),
    serverUrl: pick(get, "serverUrl", DEFAULTS.serverUrl, isString).trim(),
    executablePath: pick(get, "executablePath", DEFAULTS.executablePath, isString).trim(),
    autostart: pick(get, "autostart", DEFAULTS.autostart, isBool),
    modelPath: pick(get, "modelPath", DEFAULTS.modelPath, isString).trim(),
    debounceMs: pick(get, "debounceMs", DEFAULTS.debounceMs, isNumber),
    enableFim: pick(get, "enableFim", DEFAULTS.enableFim, isBool),
    enableNextEdit: pick(get, "enableNextEdit", DEFAULTS.enableNextEdit, isBool),
    languages: [...pick(get, "languages", DEFAULTS.languages, isStringArray)],
    excludeFiles: [...pick(get, "excludeFiles", DEFAULTS.excludeFiles, isStringArray)],
    telemetry: {
      enabled: pick(get, "telemetry.enabled", DEFAULTS.telemetry.enabled, isBool),
      path: pick(get, "telemetry.path", DEFAULTS.telemetry.path, isString).trim(),
      keepPrompts: pick(get, "telemetry.keepPrompts", DEFAULTS.telemetry.keepPrompts, isBool),
    },
  };
}

export function toInitializationOptions(s: Settings): InitializationOptions {
  const telemetry: InitializationOptions["telemetry"] = { enabled: s.telemetry.enabled };
  if (s.telemetry.path) telemetry.path = s.telemetry.path;
  if (s.telemetry.keepPrompts) telemetry.keepPrompts = true;
  const exclude = s.excludeFiles.length ? { excludeFiles: [...s.excludeFiles] } : {};
  return {
    ...exclude,
    serverUrl: s.serverUrl,
    autostart: s.autostart,
    debounceMs: s.debounceMs,
    enableFim: s.enabled && s.enableFim,
    enableNextEdit: s.enabled && s.enableNextEdit,
    languages: [...s.languages],
    telemetry,
  };
}

/** Params of `workspace/didChangeConfiguration` sent when the user changes a setting. */
export function toDidChangeConfiguration(s: Settings): { settings: { editserver: InitializationOptions } } {
  return { settings: { editserver: toInitializationOptions(s) } };
}

/**
 * Settings that only take effect by restarting the language server process (they are command-line
 * flags or select which documents the client syncs); the rest go over didChangeConfiguration.
 */
export function needsRestart(before: Settings, after: Settings): boolean {
  return (
    before.executablePath !== after.executablePath ||
    before.modelPath !== after.modelPath ||
    before.languages.join("\n") !== after.languages.join("\n")
  );
}

/** Command line of the language server: `editserver lsp` plus flags from settings. */
export function serverArgs(s: Settings, logFile?: string): string[] {
  const args = s.serverUrl ? ["lsp", "--server-url", s.serverUrl] : ["lsp"];
  if (!s.autostart) args.push("--no-autostart");
  if (s.modelPath) args.push("--model", s.modelPath);
  if (logFile) args.push("--log-file", logFile);
  return args;
}
