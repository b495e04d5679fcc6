"""Turn one commit-edit record into replay points: the editor after the first k hunks, and FIM holes.

Design decisions:
- Hunks are replayed in the order a developer would have made them, not file order: a hunk that
  changes a definition (``def``/``fn``/``func``/``function``/``class``... line) comes before hunks
  that call or use the changed name, and a hunk that introduces a new name on a definition line comes
  before hunks that start using that name. Ties and cycles fall back to file order. So a rename is
  replayed definition first, then its call sites; a parameter threaded through a call chain is
  replayed callee first, then each caller.
- Hunk coordinates stay in the ``before`` file; ``FileState`` maps them to the current file as hunks
  are applied in any order (a hunk is shifted by the line delta of every applied hunk above it).
- The edit history is one ``protocol.prompt.unified_diff`` per applied hunk, oldest first, exactly the
  entries the LSP server sends; the prompt keeps the last ``history`` of them (training keeps 3).
- The position asked about is the caret after the last edit: the end of the last line that hunk
  wrote (the start of the line for a pure deletion). The editable region is ``region_lines`` lines
  (default 16, inside Mercury's recommended 10-25) starting ``region_above`` lines above it, slid to
  stay inside the file; ``context_lines`` of file above and below travel with it.
- Records with one hunk have no "next edit" to replay and are skipped (counted); for the others the
  steps are k = 1..n, where k = n (nothing left to do in this file) asks whether the model knows to
  stay quiet. At most ``max_steps`` steps per record are kept (a seeded choice), so one huge commit
  does not dominate.
- FIM holes come from lines the commit added, in the file as committed: the cursor sits at the
  line's first non-blank character (editors auto-indent) or at a seeded column inside it, and the
  expected answer is the rest of the line. Context is bounded to ``fim_context_lines`` around it.
- Everything random draws from ``random.Random`` seeded by (seed, record id): deterministic and
  independent of the order records are read in.
"""

from __future__ import annotations

import random
import re
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from editserver.options import opt
from editserver.protocol.prompt import EditPrompt, build_prompt, unified_diff

_IDENT = re.compile(r"[A-Za-z_$][\w$]*")
_CALL = re.compile(r"([A-Za-z_$][\w$]*)\s*(?:\(|!\(|::<)")
_DEF = re.compile(
    r"^\s*(?:export\s+)?(?:default\s+)?(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?(?:unsafe\s+)?"
    r"(?:def|class|fn|func|function\*?|struct|enum|trait|interface|type|impl|mod)\s+"
    r"(?:\([^)]*\)\s*)?([A-Za-z_$][\w$]*)"
)
_DEF_ASSIGN = re.compile(
    r"^\s*(?:export\s+)?(?:const|let|var)\s+([A-Za-z_$][\w$]*)\s*(?::[^=]*)?=\s*(?:async\s*)?(?:function|\(|[\w$]+\s*=>)"
)


@dataclass
class Options:
    """How records become points; fields with ``opt`` are also ``editserver replay`` flags."""

    # editable region size (Mercury recommends about 10-25 lines)
    region_lines: int = opt(16, "editable region size in lines", group="what to replay")
    region_above: int = 5  # lines of the region above the caret (edits mostly continue downwards)
    context_lines: int = opt(20, "file lines sent above and below the region", group="what to replay")
    # newest edit-history entries in the prompt (training uses 3)
    history: int = opt(3, "edit-history diffs in the prompt", group="what to replay")
    max_steps: int = opt(4, "steps (k values) kept per changed file", group="what to replay")
    max_hunks: int = 40  # records with more hunks are skipped (training skips them too)
    max_region_chars: int = 3000  # longer regions (minified code) are skipped
    include_final: bool = opt(
        True,
        "do not ask after a file's last hunk (when nothing is left to do)",
        flag="--no-final",
        negate=True,
        group="what to replay",
    )
    fim_per_record: int = 1  # added lines per record turned into FIM holes (two holes each)
    fim_context_lines: int = 40  # lines of prefix and of suffix around a FIM hole
    fim_min_chars: int = 6  # added lines shorter than this (after stripping) are not FIM holes
    seed: int = opt(0, "seed of the sampled commits and points", group="what to replay")


@dataclass
class EditPoint:
    id: str
    repo: str
    sha: str
    path: str
    lang: str
    k: int  # hunks already applied
    n_hunks: int
    lines: list[str]  # the file after the first k hunks
    remaining: list[tuple[int, int, str]]  # hunks still to do, current coordinates, file order
    lo: int  # editable region = lines[lo:hi]
    hi: int
    cursor: int  # caret offset inside the region
    prompt: str
    last_edit: tuple[int, int]  # (line, column) of the caret after the last edit
    where: str = "in_file"  # "cross_file": the edit history is another file's (replay/crossfile.py)

    @property
    def region(self) -> str:
        return "".join(self.lines[self.lo : self.hi])


@dataclass
class FimPoint:
    id: str
    repo: str
    sha: str
    path: str
    lang: str
    position: str  # "start" | "mid"
    prefix: str
    suffix: str
    expected: str  # the rest of the line (without its newline)


@dataclass
class Hunk:
    start: int
    length: int
    new_text: str
    old: list[str] = field(default_factory=list)

    @property
    def new(self) -> list[str]:
        return self.new_text.splitlines(keepends=True)


def _stable_rng(seed: int, key: str) -> random.Random:
    return random.Random(seed * 1_000_003 + zlib.crc32(key.encode("utf-8")))


def record_id(rec: dict) -> str:
    return f"{rec['repo']}@{rec['sha'][:12]}:{rec['path']}"


# ---- developer order -------------------------------------------------------------------------
def _defined_names(lines: list[str]) -> set[str]:
    out = set()
    for line in lines:
        m = _DEF.match(line) or _DEF_ASSIGN.match(line)
        if m:
            out.add(m.group(1))
    return out


def _def_lines(lines: list[str]) -> list[str]:
    return [x for x in lines if _DEF.match(x) or _DEF_ASSIGN.match(x)]


def developer_order(hunks: list[Hunk]) -> list[int]:
    """Hunk indices in the order a developer would have made them (see the module docstring)."""
    n = len(hunks)
    defs, uses, introduced, new_idents = [], [], [], []
    for h in hunks:
        old_ids = set(_IDENT.findall("".join(h.old)))
        new_ids = set(_IDENT.findall(h.new_text))
        added = new_ids - old_ids
        defs.append(_defined_names(h.old) | _defined_names(h.new))
        calls = {m.group(1) for line in h.new for m in _CALL.finditer(line)}
        uses.append(calls | added)
        introduced.append(added & set(_IDENT.findall("".join(_def_lines(h.new)))))
        new_idents.append(added)
    strong = {(a, b) for a in range(n) for b in range(n) if a != b and defs[a] & uses[b] - defs[b]}
    weak = {
        (a, b)
        for a in range(n)
        for b in range(n)
        if a != b and introduced[a] & new_idents[b] and (b, a) not in strong
    }
    edges = strong | weak
    preds: dict[int, set[int]] = {i: set() for i in range(n)}
    for a, b in edges:
        preds[b].add(a)
    order: list[int] = []
    left = set(range(n))
    while left:
        ready = [i for i in left if not (preds[i] & left)]
        # a cycle (two hunks each defining what the other uses): fall back to file order
        i = min(ready) if ready else min(left)
        order.append(i)
        left.remove(i)
    return order


class FileState:
    """A file part-way through its commit: some hunks applied, in any order."""

    def __init__(self, before: str, hunks: list[Hunk]):
        self.orig = before.splitlines(keepends=True)
        self.hunks = hunks
        self.applied: set[int] = set()

    def current_start(self, i: int) -> int:
        return self.hunks[i].start + sum(
            len(self.hunks[j].new) - self.hunks[j].length for j in self.applied if j < i
        )

    def lines(self) -> list[str]:
        out = list(self.orig)
        for j in sorted(self.applied, reverse=True):
            h = self.hunks[j]
            out[h.start : h.start + h.length] = h.new
        return out

    def remaining(self) -> list[tuple[int, int, str]]:
        return [
            (self.current_start(i), self.hunks[i].length, self.hunks[i].new_text)
            for i in range(len(self.hunks))
            if i not in self.applied
        ]


def parse_hunks(rec: dict) -> list[Hunk]:
    lines = rec["before"].splitlines(keepends=True)
    return [Hunk(int(s), int(n), t, lines[int(s) : int(s) + int(n)]) for s, n, t in rec["hunks"]]


# ---- edit points -----------------------------------------------------------------------------
def _caret(lines: list[str], start: int, n_new: int) -> tuple[int, int]:
    if not lines:
        return 0, 0
    if n_new > 0:
        line = min(start + n_new - 1, len(lines) - 1)
        return line, len(lines[line].rstrip("\r\n"))
    line = min(start, len(lines) - 1)
    return line, 0


def edit_points(rec: dict, opt: Options, stats: Counter) -> Iterator[EditPoint]:
    hunks = parse_hunks(rec)
    n = len(hunks)
    if n == 0:
        stats["no_hunks"] += 1
        return
    if n == 1:
        stats["single_hunk"] += 1
        return
    if n > opt.max_hunks:
        stats["too_many_hunks"] += 1
        return
    rid = record_id(rec)
    ks = list(range(1, n + 1 if opt.include_final else n))
    if len(ks) > opt.max_steps:
        ks = sorted(_stable_rng(opt.seed, rid).sample(ks, opt.max_steps))
    wanted = set(ks)
    order = developer_order(hunks)
    state = FileState(rec["before"], hunks)
    history: list[str] = []
    for k, i in enumerate(order, start=1):
        if k > max(wanted):
            break
        before = "".join(state.lines())
        state.applied.add(i)
        lines = state.lines()
        history.append(unified_diff(rec["path"], before, "".join(lines)))
        if k not in wanted:
            continue
        if not lines:
            stats["empty_file"] += 1
            continue
        line, col = _caret(lines, state.current_start(i), len(hunks[i].new))
        hi = min(len(lines), max(0, line - opt.region_above) + opt.region_lines)
        lo = max(0, hi - opt.region_lines)
        region = "".join(lines[lo:hi])
        if len(region) > opt.max_region_chars:
            stats["region_too_long"] += 1
            continue
        if not region.strip():
            stats["blank_region"] += 1
            continue
        cursor = sum(len(x) for x in lines[lo:line]) + col
        prompt = EditPrompt(
            file_path=rec["path"],
            above="".join(lines[max(0, lo - opt.context_lines) : lo]),
            region=region,
            cursor=cursor,
            below="".join(lines[hi : hi + opt.context_lines]),
            history="".join(history[-opt.history :]) if opt.history > 0 else "",
        )
        yield EditPoint(
            id=f"{rid}#{k}",
            repo=rec["repo"],
            sha=rec["sha"],
            path=rec["path"],
            lang=rec["lang"],
            k=k,
            n_hunks=n,
            lines=lines,
            remaining=state.remaining(),
            lo=lo,
            hi=hi,
            cursor=cursor,
            prompt=build_prompt(prompt),
            last_edit=(line, col),
        )


# ---- FIM points ------------------------------------------------------------------------------
def fim_points(rec: dict, opt: Options, stats: Counter) -> Iterator[FimPoint]:
    hunks = parse_hunks(rec)
    if not hunks or opt.fim_per_record <= 0:
        return
    final = list(rec["before"].splitlines(keepends=True))
    added: list[int] = []  # line numbers in the committed file
    shift = 0
    for h in hunks:
        new = h.new
        start = h.start + shift
        added.extend(range(start, start + len(new)))
        shift += len(new) - h.length
    for h in sorted(hunks, key=lambda h: h.start, reverse=True):
        final[h.start : h.start + h.length] = h.new
    candidates = [i for i in added if len(final[i].strip()) >= opt.fim_min_chars]
    if not candidates:
        stats["fim_no_added_line"] += 1
        return
    rid = record_id(rec)
    rng = _stable_rng(opt.seed, rid + "#fim")
    for i in sorted(rng.sample(candidates, min(opt.fim_per_record, len(candidates)))):
        line = final[i]
        content = line.rstrip("\r\n")
        indent = len(content) - len(content.lstrip())
        cols = {"start": indent}
        if len(content) - indent >= 2:
            cols["mid"] = rng.randint(indent + 1, len(content) - 1)
        above = "".join(final[max(0, i - opt.fim_context_lines) : i])
        below = line[len(content) :] + "".join(final[i + 1 : i + 1 + opt.fim_context_lines])
        for pos, col in cols.items():
            yield FimPoint(
                id=f"{rid}@L{i + 1}:{pos}",
                repo=rec["repo"],
                sha=rec["sha"],
                path=rec["path"],
                lang=rec["lang"],
                position=pos,
                prefix=above + content[:col],
                suffix=below,
                expected=content[col:],
            )
