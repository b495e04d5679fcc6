"""KTO alignment of the masked-diffusion model (Ethayarajh et al. 2024, adapted to diffusion).

The model learns selectivity from unpaired accept/reject signals (model/train/kto_data.py). For a
prompt x and an answer y the implicit reward is

    r(x, y) = beta * (ELBO_theta(y | x) - ELBO_ref(y | x))

and the loss, with z0 the KL anchor and lambda_D / lambda_U the class weights, is

    L = E[ lambda_y - v(x, y) ],  v = lambda_D * sigmoid(r - z0) (desirable)
                                  v = lambda_U * sigmoid(z0 - r) (undesirable).

Design decisions:
- The log-likelihood of an answer (model/train/kto_objective.py, with the loss) is the MDLM/LLaDA
  bound training minimises (model/train/diffusion.py):
  ELBO(y | x) = E_t E_{y_t} [ (1/t) * sum_{i masked} log p(y_i | y_t, x) ], summed over the answer's
  canvas (not divided by its length: the bound is a log-likelihood). Masks come from diffusion.py's
  ``mask_batch`` and rows from data.py's ``RowBuilder`` (the FIM and next-edit training layouts,
  with a fixed end-of-text padding so an answer's ELBO does not depend on a random draw), and
  loop.py's ``_batch`` adds the rotary canvas positions and draft inputs training gives them.
  A next-edit prompt that does not fit the window with its answer is kept whole, as the engine
  serves it (a 12-line region and its answer alone fill most of a 256-token window): cutting
  those examples left 12 of 116 "unchanged" answers in the first run on the shipped model.
- K masks per example (``k``), stratified in t (``mask_batch`` draws t = (u + j/K) for a K-row
  batch), and the *same* masks and timesteps for policy and reference (VRPO, LLaDA 1.5; ELBO-KTO,
  arXiv 2510.23658): the reward is a difference of two estimates whose noise is mostly shared, so
  it cancels. An example's masks are drawn once, from a generator seeded by the example's index,
  so the reference's ELBO is computed once per example and cached (in ``state.pt``).
- z0, the KL anchor: by default as the KTO paper estimates it, from mismatched pairs of the batch
  (prompt i with answer i+1), ``kl_k`` masks each (shared by both models), z0 = max(0, mean of
  beta * (ELBO_theta - ELBO_ref)), detached. ``z0="mean"`` instead keeps a running mean of the
  batch's own rewards (clamped at 0, detached): no extra forward passes, but biased towards the
  examples being pushed.
- lambda_D and lambda_U from the class balance, as the paper advises: lambda_D * n_D / (lambda_U *
  n_U) is brought into [1, 4/3] by raising the weight of the rarer class (``class_weights``).
- bf16 autocast where the hardware computes it (loop.py's ``autocast``), fp32 master weights.
- Resumable: ``RUN/state.pt`` holds the weights, optimizer, step, the reference cache and the running
  z0; batches are a function of the step (a seeded permutation per epoch), so a resumed run draws
  the batches it would have drawn. The examples are written once to ``RUN/data`` (a RowStore).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from editserver.model.infer.checkpoint import Checkpoint, save_checkpoint
from editserver.model.infer.loader import load_checkpoint
from editserver.model.infer.tokenizer import Tokenizer
from editserver.model.infer.transformer import Transformer
from editserver.model.train.data import Row, RowBuilder, RowStore
from editserver.model.train.kto_data import Example
from editserver.model.train.kto_objective import class_weights, elbo, kto_loss, shared_masks
from editserver.model.train.loop import _batch, autocast
from editserver.protocol.prompt import PromptError, parse_prompt

ANSWER_PAD = 4  # end-of-text tokens after every answer (training draws 1-49; a fixed count here)
MASK_SEED_STRIDE = 1_000_003
MAX_ROW_TOKENS = 1024  # longer rows (a whole next-edit prompt past the window) are left out


class NotNativeError(ValueError):
    """The checkpoint is not one of this project's transformers."""


# ---- rows --------------------------------------------------------------------------------------
class AnswerRows(RowBuilder):
    """RowBuilder's FIM and next-edit layouts with a fixed padding after the answer."""

    def _canvas(self, target: list[int], max_extra: int) -> list[int]:
        return target + [self.tok.eot_id] * ANSWER_PAD


def example_row(builder: AnswerRows, ex: Example) -> Row | None:
    """The training row of (prompt, answer), as the engine lays the request out: a next-edit prompt
    too long for the window is kept whole (model/infer/engine.py ``_edit_context``), as it is served."""
    if ex.kind == "fim":
        return builder.fim_row(ex.prefix, ex.answer, ex.suffix)
    try:
        prompt = parse_prompt(ex.prompt)
    except PromptError:
        return None
    row = builder._edit_row(prompt, ex.answer)
    if row is not None:
        return row
    tok = builder.tok
    ctx = [*tok.encode_prompt(prompt), tok.rewrite_id]
    return Row(ctx + builder._canvas(tok.encode(ex.answer), 0), len(ctx))


def examples_digest(examples: list[Example]) -> str:
    h = hashlib.sha256()
    for ex in examples:
        h.update(json.dumps(ex.to_dict(), sort_keys=True).encode())
    return h.hexdigest()[:16]


def build_store(examples: list[Example], tok: Tokenizer, seq_len: int, directory: Path) -> RowStore:
    """Write the examples' rows to ``directory`` (a RowStore plus ``labels.npy``, 1 = desirable); rows
    are laid out for a ``seq_len`` window, the store is as wide as its longest row."""
    import random

    builder = AnswerRows(tok, seq_len, random.Random(0))
    rows, labels, sources = [], [], {}
    for ex in examples:
        row = example_row(builder, ex)
        if row is None or len(row.ids) > MAX_ROW_TOKENS or row.context_len >= len(row.ids):
            continue
        rows.append(row)
        labels.append(ex.desirable)
        key = f"{ex.source}:{'D' if ex.desirable else 'U'}"
        sources[key] = sources.get(key, 0) + 1
    if not rows:
        raise ValueError("no example fits the model's rows: nothing to align on")
    info = {"examples": len(examples), "digest": examples_digest(examples), "sources": sources}
    width = max(seq_len, max(len(r.ids) for r in rows))  # whole next-edit prompts may pass the window
    RowStore.write(directory, iter(rows), len(rows), width, tok.eot_id, info)
    np.save(directory / "labels.npy", np.array(labels, dtype=bool))
    return RowStore(directory)


# ---- the run -----------------------------------------------------------------------------------
DEFAULT_RUN = Path.home() / ".cache" / "editserver-align" / "run"


def _opt(default, help: str, group: str = "training", **meta):
    """A field that is also an ``editserver align`` flag (editserver/options.py)."""
    return field(default=default, metadata={"help": help, "group": group, **meta})


@dataclass
class AlignConfig:
    """An align run's settings; fields with ``help`` in their metadata are also ``editserver align``'s
    flags (editserver/options.py builds them), so each option is written once."""

    run_dir: Path = field(
        metadata={
            "help": "run directory (examples, reference cache, state; the same command resumes)",
            "flag": "--run",
            "cli_default": DEFAULT_RUN,
            "group": "training",
        }
    )
    # the checkpoint aligned (and the frozen reference); None: shipped
    init: Path | None = _opt(
        None, "checkpoint or open-weight directory to align (default: the shipped one)", "model"
    )
    beta: float = _opt(0.1, "KTO beta: the scale of the implicit reward")
    k: int = _opt(8, "masks per example, shared by policy and reference")
    batch_size: int = _opt(8, "examples per step")
    lr: float = _opt(2e-5, "AdamW learning rate (LoRA usually wants about 1e-4)")
    weight_decay: float = 0.0
    steps: int | None = _opt(None, "optimizer steps (default: --epochs over the examples)")
    epochs: float = _opt(1.0, "passes over the examples")
    time_budget_s: float | None = _opt(
        None, "stop training after this many minutes (counted across resumes)", flag="--time-budget",
        metavar="MINUTES", scale=60.0,
    )  # fmt: skip
    z0: str = _opt(
        "mismatched", "KL anchor: mismatched pairs of the batch (the KTO paper) or a running mean",
        choices=("mismatched", "mean"),
    )  # fmt: skip
    kl_k: int = 2  # masks per mismatched pair
    lambda_d: float | None = _opt(None, "desirable weight (default: from the class balance)")
    lambda_u: float | None = _opt(None, "undesirable weight (default: from the class balance)")
    precision: str = _opt(
        "auto", "bf16 autocast where the hardware computes it natively (auto), or forced",
        choices=("auto", "bf16", "fp32"),
    )  # fmt: skip
    device: str = _opt("cpu", "cpu or cuda")
    threads: int = _opt(0, "torch threads (0: torch's default)")
    seed: int = _opt(0, "seed of the batch order and the masks")
    save_every: int = 25
    progress: bool = _opt(True, "no progress bar", flag="--no-progress", negate=True)


def load_native(path: Path | None, device: str = "cpu") -> Checkpoint:
    """The checkpoint, or NotNativeError when it is not this project's transformer: an open-weight
    family (model/infer/hf/) has its own layouts, logit shift and tokenizer, which this loss does not
    build rows for yet."""
    from editserver.model.infer.hf import is_open_dir

    if path is not None and is_open_dir(Path(path)):
        raise NotNativeError(
            f"{path} is an open-weight model directory (model/infer/hf/), not a native editserver "
            "checkpoint; align trains native checkpoints only"
        )
    ck = load_checkpoint(path, device=device)
    if not isinstance(ck.model, Transformer):
        raise NotNativeError(f"{path} holds a {type(ck.model).__name__}, not a native editserver checkpoint")
    return ck


def _mem_store(ids: np.ndarray, meta: np.ndarray) -> SimpleNamespace:
    return SimpleNamespace(ids=ids, meta=meta)


def mismatched_batch(store: RowStore, idx: np.ndarray, device: str, tok: Tokenizer) -> tuple:
    """Rows pairing example i's context with example i+1's answer (batch order), loop._batch-shaped."""
    L = store.L
    ids = np.full((len(idx), L), tok.eot_id, dtype=np.uint16)
    meta = np.zeros((len(idx), 2), dtype=np.int32)
    for n, i in enumerate(idx):
        j = idx[(n + 1) % len(idx)]
        c_i, (c_j, l_j) = int(store.meta[i, 0]), store.meta[j]
        row = np.concatenate([store.ids[i, :c_i], store.ids[j, c_j:l_j]])[:L]
        ids[n, : len(row)] = row
        meta[n] = (c_i, len(row))
    return _batch(_mem_store(ids, meta), np.arange(len(idx)), device, tok)


def _trim(batch: tuple) -> tuple:
    """Cut the padding columns past the batch's longest row (rows are right-padded)."""
    ids, ctx, lens, pos, draft = batch
    n = int(lens.max())
    return ids[:, :n], ctx, lens, pos, draft[:, :n]


class Aligner:
    """Holds the policy, the frozen reference, the examples and the optimizer of one run."""

    def __init__(self, cfg: AlignConfig, examples: list[Example] | None = None):
        self._open_run(cfg)
        self.ck = load_native(cfg.init, cfg.device)
        self.ref = self.ck.model.eval()
        for p in self.ref.parameters():
            p.requires_grad_(False)
        self.policy = load_native(cfg.init, cfg.device).model.train()
        self.tok = self.ck.tokenizer
        seq_len = self.ck.inference.window_tokens or 256
        data_dir = self.run / "data"
        if (data_dir / "info.json").exists():
            self.store = RowStore(data_dir)
            if examples is not None and self.store_digest() != examples_digest(examples):
                raise ValueError(
                    f"{self.run} holds a run on other examples; use another --run directory (or delete it)"
                )
        elif examples is None:
            raise ValueError(f"{self.run} holds no examples to align on")
        else:
            self.store = build_store(examples, self.tok, seq_len, data_dir)
        self.labels = np.load(data_dir / "labels.npy")
        self._start(self.store.n, self.policy.parameters())

    def _open_run(self, cfg: AlignConfig) -> None:
        """The run directory, threads and the options every kind of run checks."""
        self.cfg = cfg
        self.run = Path(cfg.run_dir)
        self.run.mkdir(parents=True, exist_ok=True)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        if cfg.k < 1 or cfg.batch_size < 2 or cfg.beta <= 0 or cfg.z0 not in ("mismatched", "mean"):
            raise ValueError("need k >= 1, batch size >= 2, beta > 0 and z0 'mismatched' or 'mean'")

    def _start(self, n: int, params) -> None:
        """Class weights, schedule, the optimizer over ``params`` and the reference cache of ``n``
        rows (``self.labels``), resumed from ``RUN/state.pt`` when there is one."""
        cfg = self.cfg
        if n < 2:
            raise ValueError("align needs at least two examples that fit the model's rows")
        self.n_d, self.n_u = int(self.labels.sum()), int((~self.labels).sum())
        auto = class_weights(self.n_d, self.n_u)
        self.lambda_d = cfg.lambda_d if cfg.lambda_d is not None else auto[0]
        self.lambda_u = cfg.lambda_u if cfg.lambda_u is not None else auto[1]
        self.steps = cfg.steps or max(1, math.ceil(cfg.epochs * n / cfg.batch_size))
        self.opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.step, self.elapsed, self.z0_mean = 0, 0.0, 0.0
        self.ref_cache = torch.full((n,), float("nan"))  # [N] reference ELBO per example
        state = self.run / "state.pt"
        if state.exists():
            st = torch.load(state, map_location=cfg.device, weights_only=False)
            self._load_weights(st)
            self.opt.load_state_dict(st["opt"])
            self.step, self.elapsed, self.z0_mean = st["step"], st["elapsed_s"], st["z0_mean"]
            self.ref_cache = st["ref_cache"]
        self.kl_gen = torch.Generator().manual_seed(cfg.seed * MASK_SEED_STRIDE + 7 + self.step)

    def _load_weights(self, state: dict) -> None:
        self.policy.load_state_dict(state["model"])

    def _weights_state(self) -> dict:
        """What ``save`` keeps of the trained weights (the adapters alone for LoRA, kto_open.py)."""
        return {"model": self.policy.state_dict()}

    def store_digest(self) -> str:
        return json.loads((self.run / "data" / "info.json").read_text()).get("digest", "")

    def batch_indices(self, step: int) -> np.ndarray:
        """The examples of ``step``: a seeded permutation per epoch, so a resumed run draws the same."""
        n = self.store.n
        B = min(self.cfg.batch_size, n)
        out: list[int] = []
        pos = step * B
        while len(out) < B:
            epoch, off = divmod(pos, n)
            perm = np.random.default_rng(self.cfg.seed + 1000 * epoch).permutation(n)
            take = perm[off : off + B - len(out)]
            out += take.tolist()
            pos += len(take)
        return np.array(out)

    def mask_seeds(self, idx: np.ndarray) -> list[int]:
        return [self.cfg.seed * MASK_SEED_STRIDE + int(i) for i in idx]

    # what a model family changes: the ELBO's inputs, their masks and which model scores them
    def _inputs(self, idx: np.ndarray):
        """The ELBO's inputs for examples ``idx``: a trimmed training batch here."""
        return _trim(_batch(self.store, idx, self.cfg.device, self.tok))

    def _mismatched(self, idx: np.ndarray):
        """Prompt i with answer i + 1 (batch order), for the KL anchor."""
        return _trim(mismatched_batch(self.store, idx, self.cfg.device, self.tok))

    def _masks(self, inputs, k: int, seeds: list[int]) -> tuple:
        return shared_masks(inputs[0], inputs[1], inputs[2], k, self.tok.mask_id, seeds)

    @staticmethod
    def _subset(inputs, rows: list[int]):
        return tuple(x[rows] for x in inputs)

    def _elbo_of(self, inputs, masks: tuple, k: int, reference: bool) -> torch.Tensor:
        """[B] ELBO of the policy, or of the frozen reference, under ``masks``."""
        with autocast(self.cfg.device, self.cfg.precision):
            return elbo(self.ref if reference else self.policy, inputs, *masks, k).float()

    def rewards(self, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(rewards [B] with grad through the policy, policy ELBO [B]) of examples ``idx``."""
        cfg = self.cfg
        inputs = self._inputs(idx)
        masks = self._masks(inputs, cfg.k, self.mask_seeds(idx))
        todo = [n for n, i in enumerate(idx) if math.isnan(float(self.ref_cache[i]))]
        if todo:  # the reference sees the same masks, once per example (module docstring)
            rows = torch.cat([torch.arange(n * cfg.k, (n + 1) * cfg.k) for n in todo])
            with torch.no_grad():
                sub = tuple(m[rows] for m in masks)
                ref = self._elbo_of(self._subset(inputs, todo), sub, cfg.k, reference=True).cpu()
            self.ref_cache[torch.as_tensor(idx[todo])] = ref
        pol = self._elbo_of(inputs, masks, cfg.k, reference=False)
        ref = self.ref_cache[torch.as_tensor(idx)].to(pol.device)
        return cfg.beta * (pol - ref), pol

    @torch.no_grad()
    def kl_anchor(self, idx: np.ndarray, rewards: torch.Tensor) -> float:
        cfg = self.cfg
        if cfg.z0 == "mean":
            self.z0_mean = 0.9 * self.z0_mean + 0.1 * float(rewards.detach().mean())
            return max(0.0, self.z0_mean)
        inputs = self._mismatched(idx)
        seeds = torch.randint(0, 2**62, (len(idx),), generator=self.kl_gen).tolist()
        masks = self._masks(inputs, cfg.kl_k, seeds)
        pol = self._elbo_of(inputs, masks, cfg.kl_k, reference=False)
        ref = self._elbo_of(inputs, masks, cfg.kl_k, reference=True)
        return max(0.0, float((cfg.beta * (pol - ref)).mean()))

    def lr_at(self, step: int) -> float:
        """Linear warm-up over a tenth of the run, then a linear decay to 10%."""
        warm = max(1, self.steps // 10)
        if step < warm:
            return self.cfg.lr * (step + 1) / warm
        return self.cfg.lr * (1.0 - 0.9 * (step - warm) / max(1, self.steps - warm))

    def trainable_parameters(self):
        """What the optimizer moves: the whole policy here, adapters only for LoRA (kto_open.py)."""
        return self.policy.parameters()

    def train_step(self) -> dict:
        idx = self.batch_indices(self.step)
        rewards, _ = self.rewards(idx)
        z0 = self.kl_anchor(idx, rewards)
        desirable = torch.as_tensor(self.labels[idx], device=rewards.device)
        loss, stats = kto_loss(rewards, desirable, z0, self.lambda_d, self.lambda_u)
        for g in self.opt.param_groups:
            g["lr"] = self.lr_at(self.step)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.trainable_parameters(), 1.0)
        self.opt.step()
        self.step += 1
        return stats

    def save(self) -> None:
        state = {
            **self._weights_state(),
            "opt": self.opt.state_dict(),
            "step": self.step,
            "elapsed_s": self.elapsed,
            "z0_mean": self.z0_mean,
            "ref_cache": self.ref_cache,
        }
        tmp = self.run / "state.tmp"
        torch.save(state, tmp)
        tmp.replace(self.run / "state.pt")

    def train(self) -> dict:
        """Run to ``steps`` (or the time budget), saving every ``save_every`` steps and at the end."""
        from tqdm import tqdm

        cfg = self.cfg
        log = (self.run / "align.log.jsonl").open("a")
        bar = tqdm(total=self.steps, initial=self.step, desc="align", unit="step", disable=not cfg.progress)
        last = time.time()
        stats: dict = {}
        try:
            while self.step < self.steps:
                if cfg.time_budget_s is not None and self.elapsed >= cfg.time_budget_s:
                    break
                stats = self.train_step()
                now = time.time()
                self.elapsed, last = self.elapsed + (now - last), now
                bar.update(1)
                bar.set_postfix(
                    loss=f"{stats['loss']:.4f}",
                    margin=f"{stats['margin']:+.3f}",
                    d_above_z0=f"{stats['d_above']:.2f}",
                    z0=f"{stats['z0']:.3f}",
                )
                log.write(
                    json.dumps({"step": self.step, **stats, "elapsed_s": round(self.elapsed, 1)}) + "\n"
                )
                log.flush()
                if self.step % cfg.save_every == 0:
                    self.save()
                    last = time.time()
        finally:
            bar.close()
            self.save()
            log.close()
        return {"step": self.step, "steps": self.steps, "elapsed_s": self.elapsed, **stats}

    def info(self) -> dict:
        return json.loads((self.run / "data" / "info.json").read_text())

    def export(self, directory: Path, meta: dict, dtype: torch.dtype = torch.bfloat16) -> Path:
        """The aligned weights as a checkpoint (the init's tokenizer and inference settings)."""
        save_checkpoint(directory, self.policy, self.tok, self.ck.inference, {**self.ck.meta, **meta}, dtype)
        return Path(directory)
