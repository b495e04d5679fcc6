/**
 * Find the `editserver` executable: the configured path, else the first match on PATH.
 *
 * Design decisions:
 * - Pure over its inputs (PATH string, platform, an `isExecutable` probe) so it is unit-tested
 *   with a temporary directory instead of the real environment.
 * - Returns a reason string when nothing is found; the extension shows it verbatim.
 */

import * as fs from "node:fs";
import * as path from "node:path";

export type Resolved = { ok: true; path: string } | { ok: false; reason: string };

export function defaultIsExecutable(file: string): boolean {
  try {
    const st = fs.statSync(file);
    if (!st.isFile()) return false;
    if (process.platform === "win32") return true;
    fs.accessSync(file, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

export function resolveExecutable(
  configured: string,
  envPath: string | undefined,
  platform: NodeJS.Platform = process.platform,
  isExecutable: (file: string) => boolean = defaultIsExecutable,
): Resolved {
  if (configured) {
    return isExecutable(configured)
      ? { ok: true, path: configured }
      : { ok: false, reason: `editserver.executablePath is set to "${configured}", which is not an executable file` };
  }
  const names = platform === "win32" ? ["editserver.exe", "editserver.cmd", "editserver"] : ["editserver"];
  const sep = platform === "win32" ? ";" : ":";
  for (const dir of (envPath ?? "").split(sep)) {
    if (!dir) continue;
    for (const name of names) {
      const candidate = path.join(dir, name);
      if (isExecutable(candidate)) return { ok: true, path: candidate };
    }
  }
  return {
    ok: false,
    reason:
      "`editserver` was not found on PATH. Install it (`pip install -e .` in the editserver repository) " +
      "or set editserver.executablePath.",
  };
}
