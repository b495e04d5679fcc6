"""The training recipe: build the corpus, train with the masked-diffusion loss, resume, fine-tune.

Design decisions:
- ``prepare`` tokenizes once into a RowStore (model/train/data.py); ``train`` only reads rows, so a run can
  be stopped and resumed (``state.pt`` holds weights, optimizer, step and RNG) at no cost.
- bf16 autocast where the hardware has bf16 arithmetic (CUDA; CPUs with AVX-512 BF16 or AMX), fp32
  elsewhere: on an AVX2-only CPU bf16 autocast measured 17x *slower* than fp32 (52 vs 899 tokens/s,
  12.6M params), since every bf16 matmul is emulated. Master weights and optimizer state stay fp32.
- AdamW, or Muon on the blocks' matrices (model/train/optim.py), with a warmup-stable-decay schedule:
  linear warm-up, constant LR, and a linear decay to 10% from ``decay_start`` to ``steps``. A long
  run stays in the stable phase and can be extended on resume; a shipped checkpoint is a short decay
  branch forked from its state (``--decay-start``). A run resumed with another optimizer starts it
  afresh and warms its LR up again.
- Every ``eval_every`` steps: loss on held-out rows (fixed masking seed, so values are comparable
  across the run) and a checkpoint directory a server can load (``<run>/checkpoint``).
- ``compile``: ``nn.Module.compile(dynamic=True)`` on the whole model (inductor). In place, so the
  state dict keeps its names and checkpoints stay loadable uncompiled; dynamic because each batch
  takes logits at a different number of masked positions. Off by default: the first steps pay the
  compilation (about 20 s for ``mini`` on 2 CPU cores), and on an AVX2 CPU it measured only 1.08x
  per step (2026-11-24, docs/experiments.md).
- ``time_budget_s``: a run may be bounded by wall-clock time instead of steps (a borrowed GPU is held
  for minutes, not for a step count, and its step rate is unknown before it starts). The budget
  counts training time across resumes (kept in ``state.pt``), the LR decays linearly to 10% over
  its last ``decay_frac``, and the run saves and stops when it is spent; ``steps`` stays a cap.
- The next batch is prepared on a thread while a step runs (``draw``); the row indices are still
  drawn in order from the run's seeded generator, so batches do not depend on the thread.
- Self-distillation (``distill_dir``, model/train/distill.py): a fixed share of each batch comes from a
  second row store of the teacher's answers, the rest from the corpus; both take the same loss
  unless ``decision_t_min`` re-aims the teacher rows' masking at the sampler's decisions.
- Logs are JSON lines in ``<run>/train.log.jsonl``.
"""

from __future__ import annotations

import json
import random
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from model.infer.checkpoint import load_checkpoint, save_checkpoint
from model.infer.config import PRESETS, InferenceConfig, ModelConfig
from model.infer.draft import align_draft, draft_region
from model.infer.tokenizer import Tokenizer, train_tokenizer
from model.infer.transformer import Transformer
from model.train.data import (
    DEFAULT_MIX,
    SHARD_SEED_STRIDE,
    RowStore,
    build_rows,
    edit_record_files,
    iter_records,
    python_source_files,
    read_text,
)
from model.train.diffusion import diffusion_loss
from model.train.optim import Optimizer
from protocol.prompt import EDIT_OPEN, edit_canvas_pos


@dataclass
class TrainConfig:
    run_dir: Path
    data_dir: Path
    preset: str = "small"
    steps: int = 20000
    batch_size: int = 16
    lr: float = 1.5e-3
    weight_decay: float = 0.1
    warmup: int = 200
    decay_start: int | None = None  # None: no decay (stable phase throughout)
    eval_every: int = 250
    device: str = "cpu"
    threads: int = 0  # 0 = torch default
    seed: int = 0
    init_from: Path | None = None  # start from a checkpoint directory (fine-tuning)
    warmup_steps: int | None = None  # None: ``warmup``
    precision: str = "auto"  # auto | bf16 | fp32; auto = bf16 only where the hardware computes it
    canvas_draft: bool = False  # new models: next-edit canvases get the draft input (transformer.py)
    # share of each batch masked block-ordered (model/train/diffusion.py); 0 because a continuation
    # (2026-11-24, docs/experiments.md) at 0.5 scored worse on both validation losses and the infill CE than the model it started from
    ordered_share: float = 0.0
    compile: bool = False  # torch.compile the model (module docstring); measured in README
    time_budget_s: float | None = None  # stop after this much training time (module docstring)
    decay_frac: float = 0.2  # with a time budget: the LR decays over its last fifth
    optimizer: str = "adamw"  # adamw | muon (model/train/optim.py)
    # self-distillation rows (model/train/distill.py) mixed into every batch at ``distill_share``; None: off
    distill_dir: Path | None = None
    distill_share: float = 0.5  # half teacher rows, half the corpus (keeps next edit and multi-line)
    certainty: float = 0.0  # weight of the certainty-forcing entropy term on teacher rows (diffusion.py)
    # teacher rows: t ~ U(decision_t_min, 1) and the mean CE over their answer's masked decisions
    # (diffusion.py, decision weighting); None: the MDLM weight, like corpus rows
    decision_t_min: float | None = None


def bf16_supported(device: str) -> bool:
    """Whether bf16 autocast is fast here: CUDA, or a CPU with native bf16 (AVX-512 BF16 or AMX)."""
    if device.startswith("cuda"):
        return True
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def autocast(device: str, precision: str = "auto") -> torch.autocast:
    """The training/eval autocast context for ``precision`` (see bf16_supported)."""
    if precision not in ("auto", "bf16", "fp32"):
        raise ValueError(f"precision must be auto, bf16 or fp32, got {precision!r}")
    on = precision == "bf16" or (precision == "auto" and bf16_supported(device))
    return torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16, enabled=on)


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
) -> None:
    """Tokenizer + train/val rows from local Python source and the commit-edit records; ``workers``
    processes build the training rows (model/train/data.py ``RowStore.write_sharded``)."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    files = code_files if code_files is not None else python_source_files()
    texts: list[str] = []
    paths: list[str] = []  # a file's name as a next-edit diff shows it (its last two components)
    for f in files:
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

    def shard(k: int, n: int):
        return build_rows(tok, texts, train_recs, n, seq_len, seed + k * SHARD_SEED_STRIDE, mix, paths)

    info = {"files": len(texts)}
    RowStore.write_sharded(data_dir / "train", shard, n_train, seq_len, tok.eot_id, workers, info)


def _batch(store: RowStore, idx: np.ndarray, device: str, tok: Tokenizer):
    """(ids [B, L], context lengths [B], row lengths [B], canvas positions [B], drafts [B, L]) of
    rows ``idx``; a draft is -1 outside next-edit canvases (model/infer/transformer.py)."""
    rows, meta = store.ids[idx], store.meta[idx]
    region_open = tok.special_ids[EDIT_OPEN]
    B, L = rows.shape
    pos, draft = [], torch.full((B, L), -1, dtype=torch.long)
    for b, (r, c) in enumerate(zip(rows, meta[:, 0])):
        ctx = r[:c].tolist()
        pos.append(edit_canvas_pos(ctx, tok.rewrite_id, region_open))
        region = draft_region(ctx, tok)
        if region is not None:  # aligned on the whole answer: every opcode known (model/infer/draft.py)
            answer = r[c:].tolist()
            answer = answer[: answer.index(tok.eot_id)] if tok.eot_id in answer else answer
            draft[b, c:] = torch.tensor(align_draft(region, answer, L - int(c), tok.eot_id))
    ids = torch.from_numpy(rows.astype(np.int64)).to(device)
    m = torch.from_numpy(meta).to(device)
    return ids, m[:, 0].long(), m[:, 1].long(), torch.tensor(pos, device=device), draft.to(device)


def _mixed_batch(parts: list[tuple[RowStore, np.ndarray]], device: str, tok: Tokenizer):
    """``_batch`` of rows drawn from several stores of one row length, concatenated in order."""
    got = [_batch(store, idx, device, tok) for store, idx in parts if len(idx)]
    return tuple(torch.cat(xs) for xs in zip(*got))


def _lr(step: int, cfg: TrainConfig, elapsed_s: float = 0.0, opt_start: int = 0) -> float:
    """Warmup-stable-decay: linear warm-up over the steps since the optimizer started (a resumed run
    that switched optimizers warms up again), then constant, then a linear decay to 10%, from
    ``decay_start`` to ``steps`` or, with a time budget, over its last ``decay_frac``."""
    warmup = cfg.warmup_steps or min(cfg.warmup, max(1, cfg.steps // 10))  # short runs: a tenth
    if step - opt_start < warmup:
        return cfg.lr * (step - opt_start + 1) / warmup
    if cfg.time_budget_s is not None:
        stable = cfg.time_budget_s * (1.0 - cfg.decay_frac)
        p = (elapsed_s - stable) / max(1e-9, cfg.time_budget_s - stable)
    elif cfg.decay_start is None or step < cfg.decay_start:
        return cfg.lr
    else:
        p = (step - cfg.decay_start) / max(1, cfg.steps - cfg.decay_start)
    return cfg.lr * (1.0 - 0.9 * min(1.0, max(0.0, p)))


@torch.no_grad()
def evaluate(
    model: Transformer, store: RowStore, tok: Tokenizer, device: str, n: int = 256, precision: str = "auto"
) -> dict:
    """Held-out diffusion loss with uniform masking (``val_loss``, ``val_ce``: the MDLM bound, comparable
    with every earlier run) and with block-ordered masking (``val_ordered``: the mean masked-token CE
    in the states the semi-autoregressive sampler decodes; model/train/diffusion.py)."""
    model.eval()
    out = {"val_loss": 0.0, "val_ce": 0.0, "val_ordered": 0.0}
    idx = np.arange(min(n, store.n))
    batches = 0
    for share, key in ((0.0, "val_loss"), (1.0, "val_ordered")):
        g = torch.Generator().manual_seed(1234)  # the same masks at every evaluation
        for s in range(0, len(idx), 32):
            ids, ctx, lens, pos, draft = _batch(store, idx[s : s + 32], device, tok)
            with autocast(device, precision):
                loss, stats = diffusion_loss(model, ids, ctx, lens, tok.mask_id, g, pos, draft, share)
            out[key] += float(loss)
            if not share:
                out["val_ce"] += stats["ce"]
                batches += 1
    model.train()
    return {k: v / max(1, batches) for k, v in out.items()}


DRAFT_PARAMS = {"draft_gain", "copy_gate.weight", "copy_gate.bias"}  # what --canvas-draft adds


def train(cfg: TrainConfig) -> Path:
    run = Path(cfg.run_dir)
    run.mkdir(parents=True, exist_ok=True)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    data = RowStore(Path(cfg.data_dir) / "train")
    val = RowStore(Path(cfg.data_dir) / "val") if (Path(cfg.data_dir) / "val").is_dir() else None
    tok = Tokenizer.load(Path(cfg.data_dir) / "tokenizer.json")
    # a model trained on rows of L tokens sees FIM context cut to L at inference too (model/infer/engine.py)
    inference = InferenceConfig(window_tokens=data.L, edit_canvas_at_region=True)
    state_path = run / "state.pt"
    # read once: it says whether the run has the draft input, and it is what the run resumes from
    st = torch.load(state_path, map_location=cfg.device, weights_only=False) if state_path.exists() else None
    if cfg.init_from is not None:
        ck = load_checkpoint(cfg.init_from)
        model, inference = ck.model.train(), ck.inference
        inference.edit_canvas_at_region = True  # rows below are positioned so (_batch)
        if ck.tokenizer.vocab_size != tok.vocab_size:
            raise ValueError("fine-tuning data must be tokenized with the checkpoint's tokenizer")
    else:
        mcfg = PRESETS[cfg.preset]
        # a run started with the draft input keeps it when resumed without --canvas-draft
        drafted = cfg.canvas_draft or (st is not None and "draft_gain" in st["model"])
        model = Transformer(
            ModelConfig.from_dict({**mcfg.to_dict(), "vocab_size": tok.vocab_size, "canvas_draft": drafted})
        )
    model.to(cfg.device).train()
    if cfg.compile:
        model.compile(dynamic=True)
    opt = Optimizer(model, cfg.optimizer, cfg.lr, cfg.weight_decay, cfg.device)
    step, gen = 0, torch.Generator().manual_seed(cfg.seed)
    opt_start = 0  # the step the current optimizer started at: its learning rate warms up from there
    rng = np.random.default_rng(cfg.seed)
    elapsed = 0.0  # training seconds so far, across resumes (the time budget's clock)
    if st is not None:
        gained = set(model.state_dict()) - set(st["model"])
        if gained - DRAFT_PARAMS:
            raise ValueError(f"{state_path} lacks {sorted(gained - DRAFT_PARAMS)}: not this model's state")
        # a run saved before it had the draft input goes on with it (at its starting values) and a
        # fresh optimizer, since its saved state does not cover the new parameters
        model.load_state_dict(st["model"], strict=not gained)
        step = st["step"]
        opt_start = st.get("opt_start", 0)
        if gained or not opt.load_state_dict(st["opt"]):  # another optimizer: this one starts afresh
            opt_start = step
        gen.set_state(st["gen"].cpu())  # the masking generator is a CPU one (model/train/diffusion.py)
        rng = np.random.default_rng(st["rng_seed"] + step)
        elapsed = float(st.get("elapsed_s", 0.0))
    log = (run / "train.log.jsonl").open("a")
    _log(
        log,
        {
            "event": "start",
            "step": step,
            "params": model.num_parameters(),
            **{k: str(v) for k, v in vars(cfg).items()},
        },
    )

    def out_of_time() -> bool:
        return cfg.time_budget_s is not None and elapsed >= cfg.time_budget_s

    # the next batch is assembled (numpy, difflib for drafts, the copy to the device) on a thread
    # while the current step runs: 256 rows take ~14 ms of Python (measured on a CPU), which would
    # otherwise stall a GPU between steps
    prefetch = ThreadPoolExecutor(1)

    distill = RowStore(Path(cfg.distill_dir)) if cfg.distill_dir is not None else None
    if distill is not None and distill.L != data.L:
        raise ValueError(f"distill rows are {distill.L} tokens long, the corpus's {data.L}")
    n_distill = 0 if distill is None else int(round(cfg.distill_share * cfg.batch_size))
    # _mixed_batch puts the teacher rows last; they alone take the certainty term
    certain_rows = torch.arange(cfg.batch_size, device=cfg.device) >= cfg.batch_size - n_distill  # [B]

    def draw() -> tuple[int, Future]:
        parts = [(data, np.sort(rng.integers(0, data.n, cfg.batch_size - n_distill)))]
        if n_distill:
            parts.append((distill, np.sort(rng.integers(0, distill.n, n_distill))))
        n_tok = sum(int(store.meta[idx, 1].sum()) for store, idx in parts)
        return n_tok, prefetch.submit(_mixed_batch, parts, cfg.device, tok)

    t0, toks, last = time.time(), 0, time.time()
    upcoming = draw()
    while step < cfg.steps and not out_of_time():
        n_tokens, batch = upcoming
        ids, ctx, lens, pos, draft = batch.result()
        upcoming = draw()
        lr = _lr(step, cfg, elapsed, opt_start)
        for g in opt.param_groups:
            g["lr"] = lr
        with autocast(cfg.device, cfg.precision):
            loss, stats = diffusion_loss(
                model,
                ids,
                ctx,
                lens,
                tok.mask_id,
                gen,
                pos,
                draft,
                cfg.ordered_share,
                certain_rows=certain_rows,
                certainty=cfg.certainty,
                decision_t_min=cfg.decision_t_min,
                eot_id=tok.eot_id,
            )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        toks += n_tokens
        now = time.time()
        elapsed, last = elapsed + (now - last), now
        if step % 25 == 0:
            rec = {"step": step, "loss": round(float(loss.detach()), 4), "ce": round(stats["ce"], 4)}
            if "entropy" in stats:
                rec["entropy"] = round(stats["entropy"], 4)
            rec.update(gnorm=round(float(gnorm), 3), lr=lr, tok_s=round(toks / (now - t0), 1))
            _log(log, {**rec, "elapsed_s": round(elapsed, 1)})
            t0, toks = time.time(), 0
        if step % cfg.eval_every == 0 or step == cfg.steps or out_of_time():
            rec = {"step": step, "event": "eval", "elapsed_s": round(elapsed, 1)}
            if val is not None:
                # eager: inductor (torch 2.11, CUDA) fails to lower the validation batches' bool mask
                with torch.compiler.set_stance("force_eager"):
                    rec.update(evaluate(model, val, tok, cfg.device, precision=cfg.precision))
            _log(log, rec)
            state = {
                "model": model.state_dict(),
                "opt": opt.state_dict(),
                "step": step,
                "gen": gen.get_state(),
            }
            state.update(rng_seed=cfg.seed, elapsed_s=elapsed, opt_start=opt_start)
            torch.save(state, state_path.with_suffix(".tmp"))
            state_path.with_suffix(".tmp").replace(state_path)
            meta = {"step": step, "preset": cfg.preset, "recipe": "model.train.loop"}
            save_checkpoint(run / "checkpoint", model, tok, inference, meta)
            last = time.time()  # evaluation and saving are not training time
    prefetch.shutdown(cancel_futures=True)
    if out_of_time():
        _log(log, {"event": "time budget spent", "step": step, "elapsed_s": round(elapsed, 1)})
    log.close()
    return run / "checkpoint"


def _log(fh, rec: dict) -> None:
    fh.write(json.dumps(rec) + "\n")
    fh.flush()
