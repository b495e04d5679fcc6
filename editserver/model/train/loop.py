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
- Logs are JSON lines in ``<run>/train.log.jsonl``; progress bars (corpus, steps with loss and ETA)
  go to stderr.
- Data parallel under torchrun (model/train/distributed.py, docs/scale-out.md): every process draws
  the same global batch from a generator seeded by (seed, step) and reads only its contiguous share;
  DDP (or FSDP2 with ``fsdp``) averages the gradients, so ``batch_size`` and ``lr`` mean the same at
  any world size and the batches do not depend on it. Rank 0 continues the saved masking stream,
  other ranks draw theirs from (seed, rank, step). Rank 0 alone evaluates (every rank under FSDP2,
  whose forward needs them all), logs and writes; state.pt holds full (unsharded) weights and
  optimizer state, so a run resumes at any world size. The checkpoint directory is swapped in
  whole, so a process killed mid-save leaves the previous one intact.
- The initial weights are seeded by ``seed``: every process (and every world size) starts the same.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from editserver.model.infer.checkpoint import bf16_native as bf16_supported
from editserver.model.infer.checkpoint import save_checkpoint
from editserver.model.infer.config import PRESETS, InferenceConfig, ModelConfig
from editserver.model.infer.draft import align_draft, draft_region
from editserver.model.infer.loader import load_checkpoint
from editserver.model.infer.tokenizer import Tokenizer
from editserver.model.infer.transformer import Transformer
from editserver.model.train.config import TrainConfig
from editserver.model.train.data import (
    SHARD_SEED_STRIDE,
    RowStore,
)
from editserver.model.train.diffusion import diffusion_loss
from editserver.model.train.distributed import (
    World,
    all_digests,
    full_optimizer_state,
    full_state,
    init_from_env,
    load_full_optimizer_state,
    mean_over_ranks,
    per_rank_batch,
    shard,
    unwrap,
    wrap,
)
from editserver.model.train.optim import Optimizer
from editserver.protocol.prompt import EDIT_OPEN, edit_canvas_pos


def autocast(device: str, precision: str = "auto") -> torch.autocast:
    """The training/eval autocast context for ``precision`` (see bf16_supported)."""
    if precision not in ("auto", "bf16", "fp32"):
        raise ValueError(f"precision must be auto, bf16 or fp32, got {precision!r}")
    on = precision == "bf16" or (precision == "auto" and bf16_supported(device))
    return torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16, enabled=on)


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


@dataclass
class _Run:
    """What one training process holds (``train`` builds it, the step loop reads it)."""

    cfg: TrainConfig
    world: World
    tok: Tokenizer
    data: RowStore
    val: RowStore | None
    distill: RowStore | None
    inference: InferenceConfig
    model: Transformer  # the module itself (sharded in place under FSDP2)
    trained: torch.nn.Module  # what the step calls: ``model``, or its DDP wrapper
    opt: Optimizer
    step: int = 0
    opt_start: int = 0  # the step the current optimizer started at: its LR warms up from there
    elapsed: float = 0.0  # training seconds so far, across resumes (the time budget's clock)
    gen_state: torch.Tensor | None = None  # the saved masking generator (rank 0 continues it)


def _build(cfg: TrainConfig, world: World) -> _Run:
    data = RowStore(Path(cfg.data_dir) / "train")
    val = RowStore(Path(cfg.data_dir) / "val") if (Path(cfg.data_dir) / "val").is_dir() else None
    tok = Tokenizer.load(Path(cfg.data_dir) / "tokenizer.json")
    # a model trained on rows of L tokens sees FIM context cut to L at inference too (model/infer/engine.py)
    inference = InferenceConfig(window_tokens=data.L, edit_canvas_at_region=True)
    state_path = Path(cfg.run_dir) / "state.pt"
    # read once: it says whether the run has the draft input, and it is what the run resumes from;
    # on the CPU first, so a state written by any world size or device loads anywhere
    st = torch.load(state_path, map_location="cpu", weights_only=False) if state_path.exists() else None
    if cfg.init_from is not None:
        ck = load_checkpoint(cfg.init_from)
        model, inference = ck.model.train(), ck.inference
        inference.edit_canvas_at_region = True  # rows below are positioned so (_batch)
        if ck.tokenizer.vocab_size != tok.vocab_size:
            raise ValueError("fine-tuning data must be tokenized with the checkpoint's tokenizer")
    else:
        # a run started with the draft input keeps it when resumed without --canvas-draft
        drafted = cfg.canvas_draft or (st is not None and "draft_gain" in st["model"])
        mcfg = {**PRESETS[cfg.preset].to_dict(), "vocab_size": tok.vocab_size, "canvas_draft": drafted}
        torch.manual_seed(cfg.seed)  # the same initial weights in every process and at any world size
        model = Transformer(ModelConfig.from_dict(mcfg))
    if cfg.fsdp and cfg.optimizer != "adamw":
        raise ValueError(
            "--fsdp shards AdamW's state only (Muon needs whole matrices): use --optimizer adamw"
        )
    run = _Run(cfg, world, tok, data, val, None, inference, model, model, None)  # type: ignore[arg-type]
    gained: set[str] = set()
    if st is not None:  # weights first: DDP broadcasts and FSDP2 shards what the module holds
        gained = set(model.state_dict()) - set(st["model"])
        if gained - DRAFT_PARAMS:
            raise ValueError(f"{state_path} lacks {sorted(gained - DRAFT_PARAMS)}: not this model's state")
        # a run saved before it had the draft input goes on with it (at its starting values) and a
        # fresh optimizer, since its saved state does not cover the new parameters
        model.load_state_dict(st["model"], strict=not gained)
    model.to(world.device).train()
    if cfg.compile:
        model.compile(dynamic=True)
    run.trained = wrap(model, world, cfg.fsdp, find_unused=model.cfg.canvas_draft)
    run.opt = Optimizer(model, cfg.optimizer, cfg.lr, cfg.weight_decay, world.device)
    if st is not None:
        run.step = st["step"]
        run.opt_start = st.get("opt_start", 0)
        if not _load_opt(run, st, gained):  # another optimizer or layout: this one starts afresh
            run.opt_start = run.step
        run.elapsed = float(st.get("elapsed_s", 0.0))
        run.gen_state = st["gen"].cpu()  # the masking generator is a CPU one (model/train/diffusion.py)
    if cfg.distill_dir is not None:
        run.distill = RowStore(Path(cfg.distill_dir))
        if run.distill.L != data.L:
            raise ValueError(f"distill rows are {run.distill.L} tokens long, the corpus's {data.L}")
    return run


def _load_opt(run: _Run, st: dict, gained: set[str]) -> bool:
    """Restore the optimizer from a state: a replicated state (one process or DDP) or a sharded
    one (FSDP2, keyed by parameter names); across the two the optimizer starts afresh."""
    if gained:
        return False
    if run.cfg.fsdp and run.world.distributed:
        if "opt_full" not in st:
            return False
        load_full_optimizer_state(run.model, run.opt.parts[0], st["opt_full"])
        return True
    return "opt" in st and run.opt.load_state_dict(st["opt"])


def _masking_generator(run: _Run) -> torch.Generator:
    """Rank 0 continues the saved masking stream (a one-process run's exactly); every other rank
    draws its own stream from the seed, its rank and the step it starts at."""
    if run.world.main:
        gen = torch.Generator().manual_seed(run.cfg.seed)
        if run.gen_state is not None:
            gen.set_state(run.gen_state)
        return gen
    return torch.Generator().manual_seed(run.cfg.seed + run.world.rank * SHARD_SEED_STRIDE + run.step)


def train(cfg: TrainConfig, world: World | None = None) -> Path:
    """Train (or resume) ``cfg``'s run; under torchrun every process calls this, rank 0 alone
    evaluates, logs and writes ``<run>/state.pt`` and ``<run>/checkpoint``."""
    world = world if world is not None else init_from_env(cfg.device)
    run_dir = Path(cfg.run_dir)
    if world.main:
        run_dir.mkdir(parents=True, exist_ok=True)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    run = _build(cfg, world)
    rows_per_rank = per_rank_batch(cfg.batch_size, world)
    n_distill = 0 if run.distill is None else int(round(cfg.distill_share * cfg.batch_size))
    per_rank_batch(n_distill, world, "the teacher rows of a batch")
    log = (run_dir / "train.log.jsonl").open("a") if world.main else None
    start = {"event": "start", "step": run.step, "params": run.model.num_parameters(), "world": world.size}
    _log(log, {**start, **{k: str(v) for k, v in vars(cfg).items()}})
    _steps(run, log, rows_per_rank, n_distill)
    digests = all_digests(run.trained, world)
    _log(log, {"event": "done", "step": run.step, "world": world.size, "weights_sha256": digests})
    if log is not None:
        log.close()
    return run_dir / "checkpoint"


def _steps(run: _Run, log, rows_per_rank: int, n_distill: int) -> None:
    """The step loop: draw the global batch, take this rank's rows, step, log, evaluate and save."""
    cfg, world, data, distill, tok = run.cfg, run.world, run.data, run.distill, run.tok
    gen = _masking_generator(run)
    rng = np.random.default_rng(cfg.seed + run.step)  # the global batches depend on the step alone
    # _mixed_batch puts the teacher rows last; they alone take the certainty term
    mine_distill = n_distill // world.size
    certain_rows = torch.arange(rows_per_rank, device=world.device) >= rows_per_rank - mine_distill  # [b]
    # the next batch is assembled (numpy, difflib for drafts, the copy to the device) on a thread
    # while the current step runs: 256 rows take ~14 ms of Python (measured on a CPU), which would
    # otherwise stall a GPU between steps
    prefetch = ThreadPoolExecutor(1)

    def draw() -> tuple[int, Future]:
        # the whole global batch is drawn in every process (same generator, same rows at any world
        # size); each reads only its contiguous share of the corpus rows and of the teacher rows
        parts = [(data, np.sort(rng.integers(0, data.n, cfg.batch_size - n_distill)))]
        if n_distill:
            parts.append((distill, np.sort(rng.integers(0, distill.n, n_distill))))
        n_tok = sum(int(store.meta[idx, 1].sum()) for store, idx in parts)  # the global batch's
        mine = [(store, shard(idx, world)) for store, idx in parts]
        return n_tok, prefetch.submit(_mixed_batch, mine, world.device, tok)

    def out_of_time() -> bool:
        return cfg.time_budget_s is not None and run.elapsed >= cfg.time_budget_s

    bar = _bar(cfg.progress and world.main, total=cfg.steps, initial=run.step, desc="train", unit="step")
    t0, toks, last = time.time(), 0, time.time()
    upcoming = draw()
    while run.step < cfg.steps and not out_of_time():
        n_tokens, batch = upcoming
        ids, ctx, lens, pos, draft = batch.result()
        upcoming = draw()
        lr = _lr(run.step, cfg, run.elapsed, run.opt_start)
        for g in run.opt.param_groups:
            g["lr"] = lr
        with autocast(world.device, cfg.precision):
            loss, stats = diffusion_loss(
                run.trained, ids, ctx, lens, tok.mask_id, gen, pos, draft, cfg.ordered_share,
                certain_rows=certain_rows, certainty=cfg.certainty,
                decision_t_min=cfg.decision_t_min, eot_id=tok.eot_id,
            )  # fmt: skip
        run.opt.zero_grad(set_to_none=True)
        loss.backward()  # DDP/FSDP2 average the gradients over the processes here
        gnorm = torch.nn.utils.clip_grad_norm_(run.trained.parameters(), 1.0)
        run.opt.step()
        run.step += 1
        toks += n_tokens
        now = time.time()
        # every process must agree on the clock: the LR and the stop follow it
        run.elapsed = _agreed_clock(run.elapsed + (now - last), world, cfg)
        last = now
        bar.update(1)
        if run.step % 10 == 0 or run.step == cfg.steps:
            bar.set_postfix(loss=f"{float(loss.detach()):.3f}", refresh=False)
        if run.step % cfg.log_every == 0:
            vals = {
                "loss": float(loss.detach()),
                "ce": stats["ce"],
                **{k: stats[k] for k in ("entropy",) if k in stats},
            }
            vals = mean_over_ranks(vals, world)  # the global batch's loss, not one shard's
            rec = {"step": run.step, **{k: round(v, 4) for k, v in vals.items()}}
            rec.update(gnorm=round(float(gnorm), 3), lr=lr, tok_s=round(toks / max(1e-9, now - t0), 1))
            _log(log, {**rec, "elapsed_s": round(run.elapsed, 1)})
            t0, toks = time.time(), 0
        if run.step % cfg.eval_every == 0 or run.step == cfg.steps or out_of_time():
            _evaluate_and_save(run, log, gen)
            last = time.time()  # evaluation and saving are not training time
    bar.close()
    prefetch.shutdown(cancel_futures=True)
    if out_of_time():
        _log(log, {"event": "time budget spent", "step": run.step, "elapsed_s": round(run.elapsed, 1)})


def _agreed_clock(elapsed: float, world: World, cfg: TrainConfig) -> float:
    """The slowest process's clock, when a time budget makes the clock matter (one all-reduce)."""
    if cfg.time_budget_s is None or not world.distributed:
        return elapsed
    import torch.distributed as dist

    t = torch.tensor([elapsed], dtype=torch.float64, device=world.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _evaluate_and_save(run: _Run, log, gen: torch.Generator) -> None:
    """Rank 0 evaluates and writes state + checkpoint; under FSDP2 every process takes part in
    gathering the weights (and the evaluation's forward passes), rank 0 alone writes."""
    cfg, world = run.cfg, run.world
    rec = {"step": run.step, "event": "eval", "elapsed_s": round(run.elapsed, 1)}
    if run.val is not None and (world.main or cfg.fsdp):
        # eager: inductor (torch 2.11, CUDA) fails to lower the validation batches' bool mask
        with torch.compiler.set_stance("force_eager"):
            module = run.model if cfg.fsdp else unwrap(run.trained)
            rec.update(evaluate(module, run.val, run.tok, world.device, precision=cfg.precision))
    _log(log, rec)
    weights = full_state(run.trained, cfg.fsdp)
    opt_full = full_optimizer_state(run.model, run.opt.parts[0]) if cfg.fsdp and world.distributed else None
    if not world.main:
        return
    state = {"model": weights, "step": run.step, "gen": gen.get_state()}
    if opt_full is not None:
        state["opt_full"] = opt_full
    else:
        state["opt"] = run.opt.state_dict()
    state.update(rng_seed=cfg.seed, elapsed_s=run.elapsed, opt_start=run.opt_start, world=world.size)
    state_path = Path(cfg.run_dir) / "state.pt"
    torch.save(state, state_path.with_suffix(".tmp"))
    state_path.with_suffix(".tmp").replace(state_path)
    plain = Transformer(run.model.cfg)  # a plain module of the full weights, whatever the wrapping
    plain.load_state_dict(weights)
    meta = {
        "step": run.step,
        "preset": cfg.preset,
        "recipe": "editserver.model.train.loop",
        "world": world.size,
    }
    _save_checkpoint_atomically(Path(cfg.run_dir) / "checkpoint", plain, run.tok, run.inference, meta)


def _save_checkpoint_atomically(target: Path, model: Transformer, tok: Tokenizer, inf, meta: dict) -> None:
    """Write next to ``target`` and swap it in, so a process killed mid-write leaves the previous
    checkpoint whole (``checkpoint.new`` is then the torn one, overwritten by the next save)."""
    new, old = target.with_name(target.name + ".new"), target.with_name(target.name + ".old")
    shutil.rmtree(new, ignore_errors=True)
    save_checkpoint(new, model, tok, inf, meta)
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.replace(old)
    new.replace(target)
    shutil.rmtree(old, ignore_errors=True)


def _bar(enabled: bool, **kw) -> tqdm:
    """A tqdm bar on stderr (a no-op object when disabled: other ranks, ``progress=False``)."""
    return tqdm(disable=not enabled, file=sys.stderr, mininterval=0.5, dynamic_ncols=True, **kw)


def _log(fh, rec: dict) -> None:
    """One JSON line in the run's log (rank 0 holds the file; other ranks pass None)."""
    if fh is None:
        return
    fh.write(json.dumps(rec) + "\n")
    fh.flush()
