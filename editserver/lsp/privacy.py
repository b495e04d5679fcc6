"""Files that never leave the editor: the ``excludeFiles`` globs.

Floor 0 (see lsp/__init__.py): imports nothing of the language server.

Design decisions:
- Defaults cover the files that hold secrets by convention (``.env*``, ``*.pem``, ``*.key``,
  ``id_rsa*``, ``*.p12``, ``.netrc``, ``secrets.*``, ``credentials*``); the user's patterns are added
  to them, and ``!PATTERN`` removes a default (a project whose ``*.key`` files are not keys), so the
  defaults never go away by accident when a user adds one pattern.
- A pattern without ``/`` matches the file's name, one with ``/`` its workspace-relative path (and
  its absolute path), with ``fnmatch`` rules where ``*`` also crosses ``/``. Matching ignores case:
  excluding one file too many costs a suggestion, one too few can leak a key.
- What "excluded" means is enforced in the server's state (state.py), where documents enter: an
  excluded document is still kept in sync (the editor's buffer is the truth), but no request is
  made for it, it is never a recently viewed snippet, its edits never enter the edit history that
  other files' prompts show, it is never searched for definitions, and so nothing of it is stored
  in telemetry.
"""

from __future__ import annotations

import fnmatch
import posixpath

DEFAULT_EXCLUDES = (".env*", "*.pem", "*.key", "id_rsa*", "*.p12", ".netrc", "secrets.*", "credentials*")


def effective(user: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The defaults plus the user's patterns, less the defaults the user removed with ``!``."""
    removed = {p[1:] for p in user if p.startswith("!")}
    added = [p for p in user if not p.startswith("!") and p not in DEFAULT_EXCLUDES]
    return tuple(p for p in DEFAULT_EXCLUDES if p not in removed) + tuple(added)


def match(path: str, patterns: tuple[str, ...]) -> str | None:
    """The first pattern that excludes ``path`` (relative or absolute, ``/``-separated), or None."""
    path = path.replace("\\", "/")
    name = posixpath.basename(path).lower()
    low = path.lower()
    for pattern in patterns:
        p = pattern.lower()
        if "/" in p:
            if fnmatch.fnmatchcase(low, p) or fnmatch.fnmatchcase(low, "*/" + p.lstrip("/")):
                return pattern
        elif fnmatch.fnmatchcase(name, p):
            return pattern
    return None


class Exclusions:
    """The open documents that ``excludeFiles`` keeps out: uri -> the pattern that matched."""

    def __init__(self) -> None:
        self.by_uri: dict[str, str] = {}

    def __contains__(self, uri: str) -> bool:
        return uri in self.by_uri

    def __getitem__(self, uri: str) -> str:
        return self.by_uri[uri]

    def check(self, uri: str, paths: tuple[str, ...], patterns: tuple[str, ...]) -> str | None:
        """Record whether document ``uri`` (known by ``paths``: relative, absolute) is excluded."""
        pattern = next((p for p in (match(path, patterns) for path in paths) if p), None)
        if pattern is None:
            self.by_uri.pop(uri, None)
        else:
            self.by_uri[uri] = pattern
        return pattern

    def forget(self, uri: str) -> bool:
        return self.by_uri.pop(uri, None) is not None

    def listing(self, path_of) -> list[dict[str, str]]:
        return [{"uri": u, "path": path_of(u), "pattern": p} for u, p in self.by_uri.items()]
