"""Training data: corpora, the three task builders, and fixed-length rows on disk.

Design decisions:
- Every training row is ``[context | canvas]`` with a per-row context length and sequence length,
  exactly the layout the sampler sees at inference (see transformer.py). Three tasks fill rows:
  (a) plain code windows (context 0: the whole row is canvas),
  (b) FIM: ``<|fim_prefix|>P<|fim_suffix|>S<|fim_middle|>`` then the middle padded with end-of-text
      tokens to a random canvas length, so the model learns where a variable-length infill ends,
  (c) next edit: the Inception prompt (protocol/prompt.py, the very layout ``/v1/edit/completions`` gets)
      then ``<|rewrite|>`` and the rewritten region padded with end-of-text. A share of examples ask
      about regions no remaining hunk touches: their answer is the region unchanged.
- FIM middles are cut at line granularity most of the time (a whole line, a few lines, or the rest
  of a line from a mid-line cursor): that is what inline completion asks for.
- Rows are written to a ``uint16`` memmap (vocab < 65,536) plus two small index arrays, so training
  reads batches without Python work per token and several runs can share one corpus build.
- A corpus can be built by several forked processes (``RowStore.write_sharded``): shard k is its own
  seeded row stream written into its slice of the memmap, so a 16-core GPU host builds a large
  corpus in its first minutes. Shard 0 is the single-process stream, so one worker gives exactly
  the rows every earlier recipe built.
- Whole repositories are held out for validation (HELD_OUT_REPOS); their packages are also skipped
  when site-packages is scanned so held-out code never leaks into training.
"""

from __future__ import annotations

import json
import lzma
import multiprocessing
import os
import random
import sysconfig
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from editserver.model.infer.tokenizer import Tokenizer
from editserver.model.train.synth import rename_example
from editserver.protocol.prompt import EditPrompt, fim_window, fit_prompt, unified_diff

HELD_OUT_REPOS = ("pallets+click", "jd+tenacity", "more-itertools+more-itertools", "spf13+cobra")
HELD_OUT_PACKAGES = ("click", "tenacity", "more_itertools", "cobra")
MAX_FILE_BYTES = 200_000
DEFAULT_MIX = (0.15, 0.5, 0.2, 0.15)  # plain, FIM, next edit from commits, synthetic rename


def python_source_files(roots: list[Path] | None = None) -> list[Path]:
    """Python files of the stdlib and site-packages (minus held-out packages and tests of big data)."""
    if roots is None:
        paths = sysconfig.get_paths()
        roots = sorted({Path(paths["stdlib"]), Path(paths["purelib"]), Path(paths["platlib"])})
    out: list[Path] = []
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in HELD_OUT_PACKAGES and not d.startswith(".")]
            for f in filenames:
                p = Path(dirpath) / f
                if f.endswith(".py") and p.stat().st_size < MAX_FILE_BYTES:
                    out.append(p)
    return sorted(set(out))


def read_text(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None
    return text if text.strip() else None


def edit_record_files(edits_dir: Path, held_out: bool) -> list[Path]:
    files = sorted(edits_dir.glob("*.jsonl.xz"))
    return [f for f in files if (f.name.removesuffix(".jsonl.xz") in HELD_OUT_REPOS) == held_out]


def iter_records(files: list[Path]) -> Iterator[dict]:
    for f in files:
        with lzma.open(f, "rt", encoding="utf-8") as fh:
            for line in fh:
                yield json.loads(line)


def apply_hunks(lines: list[str], hunks: list) -> list[str]:
    """Apply ``[start, length, new_text]`` hunks (file order, original coordinates) to lines."""
    out = list(lines)
    for start, length, new_text in sorted(hunks, key=lambda h: h[0], reverse=True):
        out[start : start + length] = new_text.splitlines(keepends=True)
    return out


# ---------------------------------------------------------------------------------------------
@dataclass
class Row:
    ids: list[int]
    context_len: int  # tokens [0, context_len) are never masked


class RowBuilder:
    """Turns texts and edit records into rows of at most ``seq_len`` tokens."""

    def __init__(self, tok: Tokenizer, seq_len: int, rng: random.Random):
        self.tok, self.L, self.rng = tok, seq_len, rng

    def _canvas(self, target: list[int], max_extra: int) -> list[int]:
        # pad with end-of-text: the model learns to close a variable-length answer (LLaDA-style)
        return target + [self.tok.eot_id] * (1 + self.rng.randint(0, max_extra))

    def plain(self, ids: list[int]) -> Row:
        return Row(ids[: self.L], 0)

    def fim(self, text: str) -> Row | None:
        lines = text.splitlines(keepends=True)
        if len(lines) < 3:
            return None
        r = self.rng.random()
        i = self.rng.randrange(len(lines))
        if r < 0.5:  # one whole line
            pre, mid, suf = "".join(lines[:i]), lines[i], "".join(lines[i + 1 :])
        elif r < 0.75:  # a few lines
            j = min(len(lines), i + self.rng.randint(2, 6))
            pre, mid, suf = "".join(lines[:i]), "".join(lines[i:j]), "".join(lines[j:])
        else:  # cursor inside a line: the rest of the line (sometimes the next lines too)
            line = lines[i]
            cut = self.rng.randint(0, max(0, len(line.rstrip("\n")) - 1))
            j = i + 1 if self.rng.random() < 0.7 else min(len(lines), i + self.rng.randint(2, 4))
            pre = "".join(lines[:i]) + line[:cut]
            mid = line[cut:] + "".join(lines[i + 1 : j])
            suf = "".join(lines[j:])
        if not mid.strip():
            return None
        return self.fim_row(pre, mid, suf)

    def fim_row(self, pre: str, mid: str, suf: str) -> Row | None:
        """``<|fim_prefix|>P<|fim_suffix|>S<|fim_middle|>`` then the middle padded with end-of-text,
        prefix and suffix cut to fit (``fim_window``); None for a middle over 96 tokens."""
        mid_ids = self.tok.encode(mid)
        if len(mid_ids) > 96:
            return None
        canvas = self._canvas(mid_ids, 48)
        budget = self.L - len(canvas) - 3
        if budget < self.L // 4:
            return None
        pre_ids, suf_ids = self.tok.encode(pre[-budget * 8 :]), self.tok.encode(suf[: budget * 8])
        n_pre, n_suf = fim_window(len(pre_ids), len(suf_ids), budget)
        pre_ids = pre_ids[len(pre_ids) - n_pre :]
        t = self.tok
        ctx = [t.fim_prefix_id, *pre_ids, t.fim_suffix_id, *suf_ids[:n_suf], t.fim_middle_id]
        return Row(ctx + canvas, len(ctx))

    def edit(self, rec: dict) -> Row | None:
        """A next-edit example from a commit record: first k hunks are history, hunk k is the answer."""
        hunks, rng = rec["hunks"], self.rng
        if not hunks or len(hunks) > 40:
            return None
        lines = rec["before"].splitlines(keepends=True)
        k = rng.randrange(len(hunks) + (1 if len(hunks) > 1 else 0))  # k == len: nothing left to do
        done, rest = hunks[:k], hunks[k:]
        # state after the first k hunks; track how later hunks' line numbers shift
        state, shift = list(lines), 0
        history = []
        for i, (start, length, new_text) in enumerate(done):
            shown = i >= len(done) - 3  # the prompt shows the 3 newest (difflib on a file is slow)
            before = "".join(state) if shown else ""
            new_lines = new_text.splitlines(keepends=True)
            state[start + shift : start + shift + length] = new_lines
            if shown:
                history.append(unified_diff(rec["path"], before, "".join(state)))
            shift += len(new_lines) - length
        negative = not rest or rng.random() < 0.2
        if negative:
            anchor = (
                (done[-1][0] + shift) if done and rng.random() < 0.5 else rng.randrange(max(1, len(state)))
            )
            target_hunk = None
        else:
            target_hunk = rest[0]
            anchor = target_hunk[0] + shift
        lo = max(0, anchor - rng.randint(0, 6))
        hi = min(len(state), anchor + (target_hunk[1] if target_hunk else 0) + rng.randint(1, 8))
        if target_hunk is None:
            # an unchanged answer must really be unchanged: no remaining hunk may touch the region
            if any(h[0] + shift < hi and h[0] + shift + max(h[1], 1) > lo for h in rest):
                return None
            new_region = "".join(state[lo:hi])
        else:
            start, length, new_text = target_hunk
            if start + shift + length > hi:
                return None
            piece = list(state)
            piece[start + shift : start + shift + length] = new_text.splitlines(keepends=True)
            new_region = "".join(piece[lo : hi + len(new_text.splitlines()) - length])
        region = "".join(state[lo:hi])
        if not region.strip() or len(region) > 3000:
            return None
        cursor = 0
        if done and lo <= done[-1][0] + shift < hi:
            cursor = sum(len(x) for x in state[lo : done[-1][0] + shift])
        elif region:
            cursor = rng.randrange(len(region))
        above, below = "".join(state[max(0, lo - 40) : lo]), "".join(state[hi : hi + 40])
        prompt = EditPrompt(rec["path"], above, region, cursor, below, [], "".join(history))
        return self._edit_row(prompt, new_region)

    def rename(self, path: str, text: str) -> Row | None:
        """A synthetic next edit: carry a rename made elsewhere to this region (model/train/synth.py)."""
        ex = rename_example(path, text, self.rng)
        return None if ex is None else self._edit_row(*ex)

    def _edit_row(self, prompt: EditPrompt, new_region: str) -> Row | None:
        """``prompt <|rewrite|> answer`` padded with end-of-text, the prompt cut to fit (fit_prompt)."""
        canvas = self._canvas(self.tok.encode(new_region), 32)
        budget = self.L - len(canvas) - 1
        fitted = fit_prompt(prompt, self.tok.encode_prompt, budget, self.tok.min_tokens)
        if fitted is None:
            return None
        ctx = [*fitted[1], self.tok.rewrite_id]
        return Row(ctx + canvas, len(ctx))


# ---------------------------------------------------------------------------------------------
class RowStore:
    """Rows on disk: ``ids.u16`` [N, L] (padded with end-of-text), ``meta.npy`` [N, 2] (ctx, len)."""

    def __init__(self, directory: Path):
        self.dir = Path(directory)
        info = json.loads((self.dir / "info.json").read_text())
        self.L, self.n = info["seq_len"], info["rows"]
        self.ids = np.memmap(self.dir / "ids.u16", dtype=np.uint16, mode="r", shape=(self.n, self.L))
        self.meta = np.load(self.dir / "meta.npy")

    @staticmethod
    def write(
        directory: Path, rows: Iterable[Row], n: int, seq_len: int, pad_id: int, info: dict | None = None
    ) -> None:
        """Stream ``n`` rows to disk (rows are never all held in memory)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        arr = np.memmap(directory / "ids.u16", dtype=np.uint16, mode="w+", shape=(n, seq_len))
        meta = np.zeros((n, 2), dtype=np.int32)
        written = 0
        for i, r in zip(range(n), rows):
            k = len(r.ids)
            arr[i, :k] = r.ids
            arr[i, k:] = pad_id
            meta[i] = (r.context_len, k)
            written += 1
        if written != n:
            raise ValueError(f"expected {n} rows, got {written}")
        arr.flush()
        np.save(directory / "meta.npy", meta)
        (directory / "info.json").write_text(json.dumps({"seq_len": seq_len, "rows": n, **(info or {})}))

    @staticmethod
    def write_sharded(
        directory: Path,
        shard_rows: Callable[[int, int], Iterable[Row]],
        n: int,
        seq_len: int,
        pad_id: int,
        workers: int,
        info: dict | None = None,
    ) -> None:
        """Write ``n`` rows built by ``workers`` forked processes: ``shard_rows(k, n_k)`` yields shard
        k's ``n_k`` rows, which fill rows [lo_k, lo_k + n_k). One worker is ``write`` in-process."""
        if workers <= 1:
            RowStore.write(directory, shard_rows(0, n), n, seq_len, pad_id, info)
            return
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        np.memmap(directory / "ids.u16", dtype=np.uint16, mode="w+", shape=(n, seq_len)).flush()
        bounds = [n * k // workers for k in range(workers + 1)]
        ctx = multiprocessing.get_context("fork")  # shares the corpus texts without pickling them
        procs = [
            ctx.Process(
                target=_fill_shard,
                args=(directory, shard_rows, k, bounds[k], bounds[k + 1], n, seq_len, pad_id),
            )
            for k in range(workers)
        ]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join()
        failed = [k for k, proc in enumerate(procs) if proc.exitcode != 0]
        if failed:
            raise RuntimeError(f"corpus shards {failed} failed to build (see their errors above)")
        parts = [directory / f"meta-{k}.npy" for k in range(workers)]
        np.save(directory / "meta.npy", np.concatenate([np.load(f) for f in parts]))
        for f in parts:
            f.unlink()
        (directory / "info.json").write_text(
            json.dumps({"seq_len": seq_len, "rows": n, "workers": workers, **(info or {})})
        )


def _fill_shard(
    directory: Path,
    shard_rows: Callable[[int, int], Iterable[Row]],
    k: int,
    lo: int,
    hi: int,
    n: int,
    seq_len: int,
    pad_id: int,
) -> None:
    """One corpus worker: rows [lo, hi) of the memmap and their (context, length) in meta-k.npy."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one process per core already
    arr = np.memmap(directory / "ids.u16", dtype=np.uint16, mode="r+", shape=(n, seq_len))
    meta = np.zeros((hi - lo, 2), dtype=np.int32)
    written = 0
    for i, r in zip(range(hi - lo), shard_rows(k, hi - lo)):
        arr[lo + i, : len(r.ids)] = r.ids
        arr[lo + i, len(r.ids) :] = pad_id
        meta[i] = (r.context_len, len(r.ids))
        written += 1
    if written != hi - lo:
        raise ValueError(f"shard {k}: expected {hi - lo} rows, got {written}")
    arr.flush()
    np.save(directory / f"meta-{k}.npy", meta)


def code_token_stream(tok: Tokenizer, texts: list[str], rng: random.Random) -> Iterator[int]:
    """Files joined by ``<|file_sep|>``, in a shuffled order, tokenized in batches."""
    order = list(range(len(texts)))
    rng.shuffle(order)
    for i in range(0, len(order), 256):
        for ids in tok.encode_batch([texts[j] for j in order[i : i + 256]]):
            yield from ids
            yield tok.file_sep_id


SHARD_SEED_STRIDE = 1_000_003  # shard k of a corpus draws with seed + k * stride (RowStore.write_sharded)


def build_rows(
    tok: Tokenizer,
    code_texts: list[str],
    records: list[dict],
    n_rows: int,
    seq_len: int,
    seed: int,
    mix: tuple[float, ...] = DEFAULT_MIX,
    code_paths: list[str] | None = None,
) -> Iterator[Row]:
    """Yield ``n_rows`` rows drawn with the (plain, FIM, edit[, rename]) mixture ``mix``; renames
    (model/train/synth.py) are made from ``code_texts``, named by ``code_paths`` in their diffs."""
    mix = (*mix, 0.0) if len(mix) == 3 else tuple(mix)
    rng = random.Random(seed)
    b = RowBuilder(tok, seq_len, rng)
    stream = code_token_stream(tok, code_texts, rng)
    made = 0
    while made < n_rows:
        r = rng.random()
        row = None
        if r < mix[0]:
            chunk = [next(stream, None) for _ in range(seq_len)]
            if chunk[-1] is None:
                stream = code_token_stream(tok, code_texts, rng)
                continue
            row = b.plain(chunk)  # type: ignore[arg-type]
        elif r < mix[0] + mix[1] or (not records and r < 1.0 - mix[3]):
            text = code_texts[rng.randrange(len(code_texts))]
            row = b.fim(text)
        elif r >= 1.0 - mix[3]:
            i = rng.randrange(len(code_texts))
            row = b.rename(code_paths[i] if code_paths else "main.py", code_texts[i])
        else:
            row = b.edit(records[rng.randrange(len(records))])
        if row is not None:
            made += 1
            yield row
