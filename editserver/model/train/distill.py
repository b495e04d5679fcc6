"""Self-distillation rows for parallel decoding: the model learns to say at once what it says slowly.

Why: parallel unmasking commits every token whose confidence clears tau in the same step (sampler.py),
so tokens per step is bounded by how peaked the model's marginals are while most of the canvas is
still masked. Trained on real code, those marginals spread over every way a line could go on; the
shipped model commits a median token at confidence 0.73, and even an exact draft-and-verify
decoder would keep at most 1.75-1.90 tokens per call (2026-11-25, docs/experiments.md). Self-distillation
(dParallel, Chen et al. 2025; the consistency objective of CDLM, Kim et al. 2025) changes the
targets instead: the answer a teacher (the model itself) decodes one token per step is a
deterministic function of the context, so the ideal predictor of any masked subset of it is certain
of every position, and a model trained towards it can commit many of them in one step.

Design decisions:
- Teacher = the checkpoint through ``Engine.complete_batch`` in its one-token-per-step mode
  (``sequential``), greedy, asked exactly as the LSP asks for one line (a 32-token canvas with
  ``stop: ["\\n"]``, plus the checkpoint's ``line_canvases`` ensemble). The distilled model's
  parallel decoding is held to that baseline (the target: <= 1 point of pass@1 lost), so the target
  is what the baseline says, good or bad.
- Contexts are the FIM rows of an existing training corpus (model/train/data.py): their prefix and suffix
  texts, re-tokenised by the engine so the row's context is the very one inference builds
  (``Engine.fim_context``, same window cut).
- A teacher answer becomes one row per inference canvas it fits (``canvases``, 32 and 24 by
  default: the LSP's canvas and the shipped ``line_canvases``), padded with end-of-text, so both
  rows of the length ensemble learn the same answer and where it ends.
- Answers that did not end inside the canvas (finish ``length``) are skipped: their end is unknown.
  Blank answers stay: "nothing here" is an answer the model must learn to give at once too.
- Rows are written as a ``RowStore`` of the corpus's row length, so training mixes them into its
  batches (``TrainConfig.distill_dir``) with no other change to the loss (model/train/diffusion.py).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from pathlib import Path

from editserver.model.infer.engine import Engine, FimRequest, SamplingOptions
from editserver.model.infer.tokenizer import Tokenizer
from editserver.model.train.data import Row, RowStore

TEACHER_CANVASES = (32, 24)  # the LSP's single-line canvas and the shipped ``line_canvases``
TEACHER_BATCH = 32  # contexts decoded at once: fills 2 CPU cores; a GPU takes hundreds


def fim_texts(store: RowStore, tok: Tokenizer, rng: random.Random) -> Iterator[tuple[str, str]]:
    """(prefix, suffix) texts of the store's FIM rows, in random order (one pass over the store)."""
    order = list(range(store.n))
    rng.shuffle(order)
    for i in order:
        c = int(store.meta[i, 0])
        ctx = store.ids[i, :c].tolist()
        if not ctx or ctx[0] != tok.fim_prefix_id or tok.fim_suffix_id not in ctx:
            continue
        s = ctx.index(tok.fim_suffix_id)
        yield tok.decode(ctx[1:s]), tok.decode(ctx[s + 1 : c - 1])  # drop the closing <|fim_middle|>


def teacher_rows(
    engine: Engine,
    pairs: Iterator[tuple[str, str]],
    n_examples: int,
    canvases: tuple[int, ...] = TEACHER_CANVASES,
    batch_size: int = TEACHER_BATCH,
    max_len: int | None = None,
) -> Iterator[Row]:
    """Rows ``fim context + teacher answer + end-of-text`` for ``n_examples`` contexts; ``max_len``
    (the corpus row length) drops a row that would not fit."""
    tok, canvas = engine.tok, max(canvases)
    opts = SamplingOptions(sequential=True, stop=["\n"])
    done = 0
    while done < n_examples:
        take = itertools.islice(pairs, min(batch_size, n_examples - done))
        batch = [FimRequest(p, s, max_tokens=canvas, options=opts) for p, s in take]
        if not batch:
            return
        done += len(batch)
        for req, c in zip(batch, engine.complete_batch(batch)):
            if c.finish_reason != "stop":
                continue
            answer = tok.encode(c.text + (c.stop_sequence or ""))  # [n]
            for n in canvases:
                if len(answer) + 1 > n:
                    continue
                ctx, _ = engine.fim_context(req, n)
                ids = ctx + answer + [tok.eot_id] * (n - len(answer))
                if max_len is None or len(ids) <= max_len:
                    yield Row(ids, len(ctx))


def build_distill_store(
    engine: Engine,
    corpus: RowStore,
    out_dir: Path,
    n_examples: int,
    seed: int = 0,
    canvases: tuple[int, ...] = TEACHER_CANVASES,
    batch_size: int = TEACHER_BATCH,
    progress=None,
) -> RowStore:
    """Write the teacher's rows for ``n_examples`` FIM contexts of ``corpus`` to ``out_dir``."""
    tok = engine.tok
    pairs = fim_texts(corpus, tok, random.Random(seed))
    rows = []
    for r in teacher_rows(engine, pairs, n_examples, canvases, batch_size, corpus.L):
        rows.append(r)
        if progress is not None:
            progress(len(rows))
    if not rows:
        raise ValueError(f"{corpus.dir} has no FIM rows the teacher could answer")
    info = {"teacher": str(engine.ck.meta), "examples": n_examples, "canvases": list(canvases)}
    RowStore.write(out_dir, rows, len(rows), corpus.L, tok.eot_id, info)
    return RowStore(out_dir)
