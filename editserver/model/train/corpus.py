"""The training corpus on disk: a tokenizer and train/val row stores built from source and history.

Design decisions:
- Sources: local Python files (``python_source_files``), commit-edit records of the training
  repositories (held-out repositories become the validation rows), and a user's own repository
  (``extra_records``: every tenth commit held out). Files as they were before each commit add
  Go/Rust/JS/TS code to the plain and FIM tasks.
- ``workers`` processes build the training rows (``RowStore.write_sharded``); bars go to stderr.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from tqdm import tqdm

from editserver.model.infer.tokenizer import Tokenizer, train_tokenizer
from editserver.model.train.data import (
    DEFAULT_MIX,
    SHARD_SEED_STRIDE,
    RowStore,
    build_rows,
    edit_record_files,
    iter_records,
    python_source_files,
    read_text,
)


def _bar(enabled: bool, **kw) -> tqdm:
    """A tqdm bar on stderr (a no-op object when disabled)."""
    return tqdm(disable=not enabled, file=sys.stderr, mininterval=0.5, dynamic_ncols=True, **kw)


def prepare(
    data_dir: Path,
    edits_dir: Path | None,
    n_train: int = 200_000,
    n_val: int = 2_000,
    seq_len: int = 512,
    vocab_size: int = 8192,
    seed: int = 0,
    tokenizer_path: Path | None = None,
    code_files: list[Path] | None = None,
    max_records: int | None = None,
    extra_records: list[dict] | None = None,
    mix: tuple[float, ...] = DEFAULT_MIX,
    workers: int = 1,
    progress: bool = False,
) -> None:
    """Tokenizer + train/val rows from local Python source and the commit-edit records; ``workers``
    processes build the training rows (model/train/data.py ``RowStore.write_sharded``); ``progress``
    shows bars on stderr (files read, rows built: worker 0's when there are several)."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    files = code_files if code_files is not None else python_source_files()
    texts: list[str] = []
    paths: list[str] = []  # a file's name as a next-edit diff shows it (its last two components)
    for f in _bar(progress, iterable=files, desc="reading sources", unit="file"):
        text = read_text(f)
        if text:
            texts.append(text)
            paths.append("/".join(Path(f).parts[-2:]))
    train_recs: list[dict] = []
    val_recs: list[dict] = []
    if edits_dir is not None and Path(edits_dir).is_dir():
        train_recs = list(iter_records(edit_record_files(Path(edits_dir), held_out=False)))
        val_recs = list(iter_records(edit_record_files(Path(edits_dir), held_out=True)))
        if max_records:
            random.Random(seed).shuffle(train_recs)
            train_recs = train_recs[:max_records]
    if extra_records:
        # a user's own repository: hold out every tenth commit for validation
        held = [r for r in extra_records if int(r["sha"][:8], 16) % 10 == 0]
        kept = [r for r in extra_records if int(r["sha"][:8], 16) % 10 != 0]
        # a tiny history can hash every commit into the held-out tenth: then train on all of it
        # (validation overlaps training, which beats refusing a repository a user pointed us at)
        train_recs += kept or held
        val_recs += held
    # files as they were before each commit add Go/Rust/JS/TS code to the plain and FIM tasks
    seen: set[tuple[str, str]] = set()
    for r in train_recs:
        if (r["repo"], r["path"]) not in seen:
            seen.add((r["repo"], r["path"]))
            texts.append(r["before"])
            paths.append(r["path"])
    if not texts:
        raise ValueError("no training text: no source files and no edit records to learn from")
    if tokenizer_path is not None:
        tok = Tokenizer.load(tokenizer_path)
    else:
        if progress:
            print(
                f"training a {vocab_size}-token tokenizer on {len(texts)} files ...",
                file=sys.stderr,
                flush=True,
            )
        sample = random.Random(seed).sample(texts, min(len(texts), 20000))
        tok = train_tokenizer(sample, vocab_size=vocab_size)
    tok.save(data_dir / "tokenizer.json")
    val_texts = [r["before"] for r in val_recs[:3000]]
    val_paths = [r["path"] for r in val_recs[:3000]]
    if val_texts or val_recs:
        val_rows = build_rows(
            tok, val_texts or texts[:200], val_recs, n_val, seq_len, seed + 1, mix, val_paths or paths[:200]
        )
        RowStore.write(data_dir / "val", val_rows, n_val, seq_len, tok.eot_id)

    def rows_of(k: int, n: int):
        rows = build_rows(tok, texts, train_recs, n, seq_len, seed + k * SHARD_SEED_STRIDE, mix, paths)
        desc = "corpus rows" if workers <= 1 else f"corpus rows (worker 1 of {workers})"
        return _bar(progress and k == 0, iterable=rows, total=n, desc=desc, unit="row")

    info = {"files": len(texts)}
    RowStore.write_sharded(data_dir / "train", rows_of, n_train, seq_len, tok.eot_id, workers, info)
