/**
 * Which files `excludeFiles` keeps out, decided in the editor for files the language server never
 * sees (a `.env` file is not in any of `editserver.languages`, so no client attaches to it and the
 * server cannot list it as excluded).
 *
 * Design decisions:
 * - The same rules as the server's editserver/lsp/privacy.py: its defaults plus the user's patterns,
 *   `!PATTERN` removes a default; a pattern without `/` matches the file's name, one with `/` the
 *   workspace-relative or absolute path; `*` also crosses `/`; case is ignored. A Python test checks
 *   that both default lists are the same.
 * - Only used to say why nothing is suggested; what is sent is still decided by the server for the
 *   files it sees.
 */

export const DEFAULT_EXCLUDES = [".env*", "*.pem", "*.key", "id_rsa*", "*.p12", ".netrc", "secrets.*", "credentials*"];

/** The defaults plus the user's patterns, less the defaults the user removed with `!`. */
export function effectiveExcludes(user: readonly string[]): string[] {
  const removed = new Set(user.filter((p) => p.startsWith("!")).map((p) => p.slice(1)));
  const added = user.filter((p) => !p.startsWith("!") && !DEFAULT_EXCLUDES.includes(p));
  return [...DEFAULT_EXCLUDES.filter((p) => !removed.has(p)), ...added];
}

/** fnmatch's rules as a regular expression: `*` any run, `?` one character, `[...]` a class. */
function globRegExp(glob: string): RegExp {
  let out = "";
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i] as string;
    if (c === "*") out += ".*";
    else if (c === "?") out += ".";
    else if (c === "[") {
      const end = glob.indexOf("]", i + 2);
      if (end < 0) {
        out += "\\[";
        continue;
      }
      let body = glob.slice(i + 1, end).replace(/\\/g, "\\\\");
      if (body.startsWith("!")) body = "^" + body.slice(1);
      out += `[${body}]`;
      i = end;
    } else out += c.replace(/[.+^${}()|\\/]/g, "\\$&");
  }
  return new RegExp(`^${out}$`, "s");
}

/** The first pattern that excludes `path` (relative or absolute, `/`-separated), or undefined. */
export function excludedBy(path: string, patterns: readonly string[]): string | undefined {
  const low = path.replace(/\\/g, "/").toLowerCase();
  const name = low.slice(low.lastIndexOf("/") + 1);
  for (const pattern of patterns) {
    const p = pattern.toLowerCase();
    if (p.includes("/")) {
      if (globRegExp(p).test(low) || globRegExp("*/" + p.replace(/^\/+/, "")).test(low)) return pattern;
    } else if (globRegExp(p).test(name)) return pattern;
  }
  return undefined;
}
