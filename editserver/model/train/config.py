"""The training run's options: ``TrainConfig``, one typed field per option.

Design decisions:
- Each field that is also an ``editserver train`` flag carries its help text (and choices, flag
  name, unit) in its metadata; editserver/options.py builds the flags from it, so an option is
  written once. Defaults here are the library's; ``cli_default`` is the command line's where it
  differs (``preset``), or None where the command fills it in from other flags (``steps``, ``lr``).
- Kept apart from the loop (model/train/loop.py, which re-exports it) so the loop stays readable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from editserver.model.infer.config import PRESETS
from editserver.model.train.optim import OPTIMIZERS


def _opt(default, help: str, **meta):
    """A TrainConfig field with its command-line help (editserver/options.py builds the flags);
    ``meta`` may hold ``choices``, ``flag`` (another flag name), ``metavar``, ``scale`` (flag value
    times scale is the field's), ``cli_default`` (the flag's default when it differs) or ``cli=False``."""
    return field(default=default, metadata={"help": help, **meta})


@dataclass
class TrainConfig:
    """One training run. Every field with help text is also an ``editserver train`` flag."""

    run_dir: Path
    data_dir: Path
    preset: str = _opt("small", "model size preset", choices=tuple(PRESETS), cli_default="mini")
    steps: int = _opt(
        20000,
        "total optimizer steps (default 100000; 300 with --repo)",
        cli_default=None,
    )
    batch_size: int = _opt(
        16,
        "global batch in rows: under torchrun each of N processes takes batch/N rows and the "
        "gradients are averaged, so it means the same at any process count",
    )
    lr: float = _opt(1.5e-3, "peak learning rate (default 1.5e-3; 3e-4 with --repo)", cli_default=None)
    weight_decay: float = _opt(0.1, "AdamW/Muon decoupled weight decay on matrices")
    warmup: int = _opt(200, "warm-up cap when warmup_steps is None", cli=False)
    # None: no decay (stable phase throughout)
    decay_start: int | None = _opt(
        None, "step where the LR starts its linear decay to 10%% at --steps (default: never; 0 with --repo)"
    )
    eval_every: int = _opt(250, "evaluate and write the checkpoint every this many steps")
    device: str = _opt("cpu", "cpu or cuda (under torchrun: cuda:LOCAL_RANK per process)")
    threads: int = _opt(0, "torch threads per process (0: torch's default)")
    seed: int = _opt(0, "seed of the model's initial weights, the batches and the masks")
    init_from: Path | None = _opt(None, "start from a checkpoint directory (fine-tuning)", cli=False)
    warmup_steps: int | None = _opt(
        None, "warm-up steps (default: 200, or a tenth of a shorter run)", flag="--warmup"
    )
    precision: str = _opt(
        "auto",
        "auto: bf16 autocast only on CUDA or CPUs with native bf16 (AVX-512 BF16/AMX)",
        choices=("auto", "bf16", "fp32"),
    )
    canvas_draft: bool = _opt(
        False,
        "give next-edit canvases the region's tokens as a draft input (model/infer/transformer.py); "
        "a run saved without it gains it on resume, one saved with it keeps it",
    )
    # share of each batch masked block-ordered (model/train/diffusion.py); 0 because a continuation
    # (2026-11-24, docs/experiments.md) at 0.5 scored worse on both validation losses and the infill CE
    ordered_share: float = _opt(
        0.0,
        "share of each batch masked block-ordered, the states the semi-autoregressive sampler decodes "
        "(model/train/diffusion.py; experimental); 0 = uniform MDLM masking only",
    )
    compile: bool = _opt(
        False,
        "torch.compile the model for training (about 20 s of compilation first; 1.08x per step on a "
        "2-core AVX2 CPU)",
    )
    time_budget_s: float | None = _opt(
        None,
        "stop after this much training time (counted across resumes), the LR decaying to 10%% over "
        "its last --decay-frac; --steps stays a cap (default: no budget)",
        flag="--time-budget",
        metavar="MINUTES",
        scale=60.0,
    )
    decay_frac: float = _opt(0.2, "with --time-budget: the share of the budget the LR decays over")
    optimizer: str = _opt(
        "adamw",
        "adamw, or muon on the blocks' weight matrices with AdamW on the rest (model/train/optim.py); "
        "a run resumed with the other one starts it afresh and re-warms the LR",
        choices=OPTIMIZERS,
    )
    # self-distillation rows (model/train/distill.py) mixed into every batch at ``distill_share``; None: off
    distill_dir: Path | None = _opt(None, "teacher rows to mix into every batch", cli=False)
    distill_share: float = _opt(0.5, "with --distill: the share of each batch taken from the teacher's rows")
    certainty: float = _opt(
        0.0,
        "with --distill: weight of the certainty-forcing term, the entropy of the teacher rows' "
        "positions the model already predicts right (model/train/diffusion.py; 0: off)",
    )
    # teacher rows: t ~ U(decision_t_min, 1) and the mean CE over their answer's masked decisions
    # (diffusion.py, decision weighting); None: the MDLM weight, like corpus rows
    decision_t_min: float | None = _opt(
        None,
        "with --distill: mask teacher rows at t ~ U(T, 1) and score only their answer's tokens and "
        "first end-of-text (default: the MDLM weight; 0.3 measured best on 2026-11-29)",
        metavar="T",
    )
    fsdp: bool = _opt(
        False,
        "under torchrun: shard weights, gradients and optimizer state over the processes with FSDP2 "
        "(for models that do not fit one device; AdamW only) instead of replicating them with DDP",
    )
    log_every: int = _opt(25, "write a training log line (global loss, tokens/s) every this many steps")
    progress: bool = _opt(True, "progress bars on stderr (corpus build and steps, with loss and ETA)")
