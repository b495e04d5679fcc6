"""Corpus builds in several processes: shards land in their slices, one worker is the old stream."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from editserver.model.infer.tokenizer import train_tokenizer
from editserver.model.train.corpus import prepare
from editserver.model.train.data import SHARD_SEED_STRIDE, Row, RowStore, build_rows
from tests.conftest import CORPUS


def _rows(k: int, n: int):
    """Shard k's rows: distinct lengths and contexts, so a row in the wrong slice shows."""
    rng = random.Random(k)
    for i in range(n):
        length = rng.randint(3, 12)
        yield Row([100 * k + i] * length, rng.randint(0, length - 1))


def _read(d):
    store = RowStore(d)
    return np.asarray(store.ids), store.meta, json.loads((d / "info.json").read_text())


def test_one_worker_writes_the_single_stream(tmp_path) -> None:
    RowStore.write(tmp_path / "a", _rows(0, 10), 10, 16, 7)
    RowStore.write_sharded(tmp_path / "b", _rows, 10, 16, 7, workers=1)
    (ia, ma, _), (ib, mb, _) = _read(tmp_path / "a"), _read(tmp_path / "b")
    assert np.array_equal(ia, ib) and np.array_equal(ma, mb)


def test_shards_fill_their_slices(tmp_path) -> None:
    RowStore.write_sharded(tmp_path / "s", _rows, 11, 16, 7, workers=3, info={"files": 2})
    ids, meta, info = _read(tmp_path / "s")
    assert info == {"seq_len": 16, "rows": 11, "workers": 3, "files": 2}
    bounds = [0, 3, 7, 11]  # n * k // workers
    for k in range(3):
        want = list(_rows(k, bounds[k + 1] - bounds[k]))
        for i, r in enumerate(want):
            row = ids[bounds[k] + i]
            assert row[: len(r.ids)].tolist() == r.ids and (row[len(r.ids) :] == 7).all()
            assert meta[bounds[k] + i].tolist() == [r.context_len, len(r.ids)]
    assert not list((tmp_path / "s").glob("meta-*.npy")), "shard metadata is merged and removed"


def _short(k: int, n: int):
    return _rows(k, n - 1 if k == 1 else n)  # shard 1 runs dry


def test_a_failing_shard_fails_the_build(tmp_path) -> None:
    with pytest.raises(RuntimeError, match=r"shards \[1\]"):
        RowStore.write_sharded(tmp_path / "s", _short, 9, 16, 7, workers=3)


def test_prepare_with_workers_builds_seeded_shards(tmp_path) -> None:
    files = []
    for i, text in enumerate(CORPUS[:12]):
        f = tmp_path / "src" / f"m{i}.py"
        f.parent.mkdir(exist_ok=True)
        f.write_text(text * 3)
        files.append(f)
    tok = train_tokenizer(CORPUS, vocab_size=400)
    tok.save(tmp_path / "tok.json")
    prepare(
        tmp_path / "data",
        None,
        n_train=10,
        n_val=4,
        seq_len=64,
        tokenizer_path=tmp_path / "tok.json",
        code_files=files,
        mix=(0.5, 0.5, 0.0),
        workers=2,
    )
    ids, meta, info = _read(tmp_path / "data" / "train")
    assert info["rows"] == 10 and info["workers"] == 2
    texts = [f.read_text() for f in files]
    paths = ["/".join(f.parts[-2:]) for f in files]
    for k, lo in ((0, 0), (1, 5)):  # shard k is build_rows at seed + k * stride
        want = list(build_rows(tok, texts, [], 5, 64, k * SHARD_SEED_STRIDE, (0.5, 0.5, 0.0), paths))
        for i, r in enumerate(want):
            assert ids[lo + i, : len(r.ids)].tolist() == r.ids and meta[lo + i, 0] == r.context_len
