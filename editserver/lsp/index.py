"""The workspace symbol index: definitions, imports and uses of every source file in the workspace.

Floor 3 (see lsp/__init__.py): over lsp/symbols.py; its life (create, build, watch) is lsp/indexing.py's.

Design decisions:
- Built in the background from the workspace folders given at ``initialize``: a walk that skips
  what ``.gitignore`` files ignore (nested ones too, git's rules via pathspec), hidden folders and
  ``node_modules``, files over ``max_bytes`` and everything past ``max_files``. Parsing runs in
  a worker process (``python -m editserver.lsp.index``) at a lower priority (``os.nice``), which
  streams one record per file back, so the editor's own requests on the LSP's event loop never
  wait for it (no shared interpreter lock, and the scheduler favours the typing path on a busy
  machine).
- Stored per workspace as JSON under ``$XDG_CACHE_HOME/editserver/index/`` (a hash of the roots
  names the file): each record keeps the file's mtime and size, so reopening a project parses only
  what changed since. JSON, not pickle: a cache file is data, never code.
- Kept current by ``update(path)`` (didSave, didChangeWatchedFiles, and before a cross-file plan
  reads a file whose mtime or size moved): one parse in the event loop, milliseconds.
- Cross-file queries (``importers``): who imports a name from a file, resolved through imports
  (``symbols.resolve``), breadth first through re-exports, so direct importers come first, then by
  distance in the import graph. A file that defines its own same-named symbol, or imports it from
  elsewhere, never appears. The reverse import map is rebuilt lazily after any change.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

from editserver.lsp.packages import go_package
from editserver.lsp.symbols import extract, resolve
from editserver.lsp.treesitter import grammar_name

log = logging.getLogger(__name__)

CACHE_VERSION = 3  # 2: Go and Rust imports recorded; 3: uses inside f-string interpolations
SKIP_DIRS = {"node_modules", "__pycache__"}


def default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "editserver" / "index")


def _record(path: str) -> tuple[str, dict | None]:
    """(path, its record with mtime and size) or None when unreadable or not a known language."""
    grammar = grammar_name("", path)
    try:
        st = os.stat(path)
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return path, None
    if grammar is None:
        return path, None
    rec = extract(grammar, text)
    rec.update(mtime=st.st_mtime_ns, size=st.st_size, grammar=grammar)
    return path, rec


def _ignored(specs: list[tuple[str, pathspec.PathSpec]], path: str, is_dir: bool) -> bool:
    """Whether a .gitignore of a folder above ``path`` (its base, its rules) ignores it."""
    for base, spec in specs:
        if spec.match_file(os.path.relpath(path, base) + ("/" if is_dir else "")):
            return True
    return False


@dataclass
class Importer:
    path: str  # the importing file
    key: str  # what its uses are recorded under: the local name, or "ns.name" for a whole module
    distance: int  # 1: imports the changed file directly; 2: through one re-export; ...


@dataclass
class WorkspaceIndex:
    roots: list[str]
    cache_dir: str = field(default_factory=default_cache_dir)
    max_files: int = 5000
    max_bytes: int = 512_000
    files: dict[str, dict] = field(default_factory=dict)
    state: str = "empty"  # empty | building | ready
    stats: dict = field(default_factory=dict)  # build: files, parsed, from_cache, skipped, seconds
    _reverse: dict[str, list[tuple[str, list]]] | None = None

    def __post_init__(self) -> None:
        self.roots = sorted({os.path.realpath(r) for r in self.roots if r and os.path.isdir(r)})

    # ---- walk and build ------------------------------------------------------------------------
    def scan(self) -> tuple[list[str], int]:
        """(source files to index, how many were left out by the bounds)."""
        out: list[str] = []
        skipped = 0
        for root in self.roots:
            specs: list[tuple[str, pathspec.PathSpec]] = []
            for d, dirs, names in os.walk(root):
                specs = [(b, s) for b, s in specs if d == b or d.startswith(b + os.sep)]
                if ".gitignore" in names:
                    try:
                        lines = Path(d, ".gitignore").read_text(errors="replace").splitlines()
                        specs.append((d, pathspec.GitIgnoreSpec.from_lines(lines)))
                    except OSError:
                        pass
                dirs[:] = sorted(
                    x
                    for x in dirs
                    if not x.startswith(".")
                    and x not in SKIP_DIRS
                    and not _ignored(specs, os.path.join(d, x), True)
                )
                for n in sorted(names):
                    p = os.path.join(d, n)
                    if grammar_name("", n) is None or _ignored(specs, p, False):
                        continue
                    try:
                        big = os.path.getsize(p) > self.max_bytes
                    except OSError:
                        continue
                    if big or len(out) >= self.max_files:
                        skipped += 1
                        continue
                    out.append(p)
        return out, skipped

    def cache_file(self) -> Path:
        key = hashlib.sha1("\0".join(self.roots).encode()).hexdigest()[:16]
        return Path(self.cache_dir) / f"{key}.json"

    def load_cache(self) -> dict[str, dict]:
        try:
            data = json.loads(self.cache_file().read_text())
        except (OSError, ValueError):
            return {}
        if (
            not isinstance(data, dict)
            or data.get("version") != CACHE_VERSION
            or data.get("roots") != self.roots
        ):
            return {}
        files = data.get("files")
        return files if isinstance(files, dict) else {}

    def save_cache(self) -> None:
        path = self.cache_file()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"version": CACHE_VERSION, "roots": self.roots, "files": self.files}))
            os.replace(tmp, path)
        except OSError as e:
            log.warning("index cache not written: %s", e)

    async def build(self) -> None:
        """Walk, reuse cached records whose mtime and size match, parse the rest in a worker."""
        t0 = time.monotonic()
        self.state = "building"
        loop = asyncio.get_running_loop()
        paths, skipped = await loop.run_in_executor(None, self.scan)
        cached = self.load_cache()
        todo = []
        for p in paths:
            rec = cached.get(p)
            try:
                st = os.stat(p)
            except OSError:
                continue
            if rec is not None and rec.get("mtime") == st.st_mtime_ns and rec.get("size") == st.st_size:
                self.files.setdefault(p, rec)
            else:
                todo.append(p)
        self._reverse = None
        if todo:
            await self._parse_in_worker(todo)
        self._reverse_map()  # the first cross-file plan need not resolve every import
        self.state = "ready"
        self.stats = {
            "files": len(self.files),
            "parsed": len(todo),
            "fromCache": len(paths) - len(todo),
            "skipped": skipped,
            "seconds": round(time.monotonic() - t0, 3),
        }
        await loop.run_in_executor(None, self.save_cache)

    async def _parse_in_worker(self, todo: list[str]) -> None:
        """Records for ``todo`` from ``python -m editserver.lsp.index`` (paths in as one JSON list,
        one ``[path, record]`` JSON line out per file, as each is parsed)."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "editserver.lsp.index",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            limit=1 << 26,
        )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(todo).encode())
        proc.stdin.close()
        try:
            async for line in proc.stdout:
                p, rec = json.loads(line)
                if rec is not None and p not in self.files:  # an update() since wins
                    self.files[p] = rec
                    self._reverse = None
        finally:
            if proc.returncode is None:
                try:
                    proc.kill()
                except ProcessLookupError:
                    pass
            await proc.wait()

    # ---- keeping current -----------------------------------------------------------------------
    def within(self, path: str) -> bool:
        return any(path == r or path.startswith(r + os.sep) for r in self.roots)

    def update(self, path: str) -> None:
        """Re-read one file (saved, or changed on disk); a missing file leaves the index."""
        path = os.path.realpath(path)
        if not self.within(path):
            return
        _, rec = _record(path) if os.path.isfile(path) else (path, None)
        if rec is None:
            self.files.pop(path, None)
        elif path in self.files or len(self.files) < self.max_files:
            self.files[path] = rec
        self._reverse = None

    def fresh(self, path: str) -> dict | None:
        """The record of ``path``, re-read first when its mtime or size moved since it was indexed."""
        rec = self.files.get(path)
        try:
            st = os.stat(path)
        except OSError:
            if rec is not None:
                self.update(path)
            return None
        if rec is None or rec.get("mtime") != st.st_mtime_ns or rec.get("size") != st.st_size:
            self.update(path)
        return self.files.get(path)

    # ---- queries -------------------------------------------------------------------------------
    def visible(self, path: str, name: str) -> bool:
        """Whether another file can name ``name`` defined in ``path`` (top level, exported, member)."""
        rec = self.files.get(path)
        return rec is not None and any(d[0] == name and d[3] for d in rec["defs"])

    def _reverse_map(self) -> dict[str, list[tuple[str, list]]]:
        """imported file -> [(importing file, [spec, member, local] with member resolved)]."""
        if self._reverse is None:
            rev: dict[str, list[tuple[str, list]]] = {}
            packages = {go_package(p) for p, rec in self.files.items() if rec["grammar"] == "go"}

            def exists(p: str) -> bool:  # an indexed file, or a directory of Go files ("dir/")
                return p in self.files or p in packages

            for p, rec in self.files.items():
                for spec, name, local in rec["imports"]:
                    hit = resolve(p, spec, name, rec["grammar"], self.roots, exists)
                    if hit is not None and hit[0] != p:
                        rev.setdefault(hit[0], []).append((p, [spec, hit[1], local]))
            self._reverse = rev
        return self._reverse

    def importers(self, path: str, name: str, limit: int = 64) -> list[Importer]:
        """Files that use ``name`` of ``path`` through their imports, nearest in the import graph first."""
        rev = self._reverse_map()
        out: list[Importer] = []
        seen = {path}
        frontier = [(path, name)]
        if path.endswith(".go"):  # a Go package is its directory: its files, and who imports it
            out, frontier = self._same_package(path, name), [(path, name), (go_package(path), name)]
            seen |= {i.path for i in out}
        distance = 0
        while frontier and len(out) < limit:
            distance += 1
            nxt = []
            for mod, nm in frontier:
                for p, (_spec, member, local) in rev.get(mod, []):
                    if p in seen:
                        continue
                    if member == nm:
                        key = local
                        nxt.append((p, local))  # bound in p's namespace: p re-exports it
                    elif member is None:
                        key = f"{local}.{nm}"
                    else:
                        continue
                    rec = self.files.get(p)
                    if rec is not None and rec["uses"].get(key):
                        seen.add(p)
                        out.append(Importer(p, key, distance))
            frontier = nxt
        return out[:limit]

    def _same_package(self, path: str, name: str) -> list[Importer]:
        """Other Go files of ``path``'s directory that use ``name``: one package names it unqualified."""
        pkg = go_package(path)
        return [
            Importer(p, name, 1)
            for p, rec in sorted(self.files.items())
            if p != path and p.endswith(".go") and go_package(p) == pkg and rec["uses"].get(name)
        ]


def _worker() -> None:
    """The parsing worker: a JSON list of paths on stdin, one ``[path, record]`` line per file out."""
    try:
        os.nice(10)
    except OSError:
        pass
    for p in json.loads(sys.stdin.read()):
        sys.stdout.write(json.dumps(_record(p)) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _worker()
