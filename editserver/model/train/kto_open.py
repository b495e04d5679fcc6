"""KTO alignment of open-weight diffusion models (model/infer/hf/) through LoRA adapters.

The loss, the class weights, the z0 anchor and the shared-mask scheme are model/train/kto.py's; what
differs is where an answer sits and what trains.

Design decisions:
- Rows are the engine's own in-place layout (model/infer/layout.py ``InPlaceLayout``): a FIM example
  is ``prefix, answer canvas, suffix`` at contiguous positions (the begin-of-text before an empty
  prefix of a shifted family), a next-edit example the chat-templated prompt then the canvas. The
  canvas is the answer's tokens and ``kto.ANSWER_PAD`` end-of-text (padding) tokens, so an answer's
  ELBO does not depend on a random draw. An edit answer is the region as plain text, one of the
  forms the layout's ``answer`` reads back. FIM context is cut as a window of ``row_tokens`` would
  cut it (``fim_window``), a next-edit prompt as the engine cuts one past the context
  (``fit_prompt``); rows are at most half the model's context, so a mismatched pair (z0) fits too.
- The ELBO is read exactly as the engine reads logits: ``cache.in_place`` lays the rows out and
  ``cache._read`` picks each canvas position's hidden state (position j, or j - 1 for a family whose
  logits are shifted: Dream, DiffuCoder, Open-dCoder). ELBO = E_t E_mask [(1/t) * sum over masked
  canvas positions of log p(answer token)], as kto.py.
- Masks: kto.py's ``shared_masks`` on each example's canvas alone (its own width), from a generator
  seeded by the example's index: K stratified timesteps per example, the same masks for policy and
  reference, and the same masks at every visit whatever batch the example falls in, so the cached
  reference ELBO stays the one the policy is compared with.
- Only LoRA adapters train (model/train/lora.py); the reference is the same module with the
  adapters off, so one copy of the base weights sits in memory. The base runs in the precision
  asked (``auto``: bf16 where the hardware computes it), the adapters in fp32 with AdamW.
- The run directory holds ``data/rows.json`` (the rows, token ids), ``data/labels.npy``,
  ``data/info.json`` and ``state.pt`` (adapters, optimizer, step, reference cache, running z0);
  the training loop, the batch order, the warm-up/decay schedule and the progress bar are kto.py's
  ``Aligner``'s, so a resumed run draws the batches it would have drawn.
- Export: a copy of the input directory (config.json, tokenizer and other small files) whose weights
  are one ``model.safetensors`` under the input's own tensor names and dtypes: every tensor is read
  back from the input files and the adapted projections get their merged update, so nothing the
  adapters did not touch changes by a bit. ``config.json`` gains a top-level ``editserver_aligned``
  record, which the loader ignores (it reads only the keys it knows).
"""

from __future__ import annotations

import contextlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file

from editserver.model.infer.cache import _read, in_place
from editserver.model.infer.checkpoint import serving_dtype
from editserver.model.infer.hf.families import renamer
from editserver.model.infer.hf.loader import INDEX, WEIGHTS, shard_files
from editserver.model.infer.layout import InPlaceLayout, layout_for
from editserver.model.infer.loader import load_checkpoint
from editserver.model.train.kto import ANSWER_PAD, AlignConfig, Aligner, examples_digest
from editserver.model.train.kto_data import Example
from editserver.model.train.kto_objective import shared_masks
from editserver.model.train.lora import LoRA
from editserver.protocol.prompt import PromptError, parse_prompt

DEFAULT_LORA_R = 8
ROW_TOKENS = 1024  # at most this many tokens a row (and at most half the model's context)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt")
WEIGHT_INDEXES = (INDEX, "pytorch_model.bin.index.json")


@dataclass
class OpenRow:
    ctx: list[int]  # prefix (FIM) or chat-templated prompt (edit)
    suf: list[int] | None  # FIM suffix; None for edits
    ans: list[int]  # the canvas: answer tokens then ANSWER_PAD end-of-text tokens


def open_row(layout: InPlaceLayout, ex: Example, limit: int) -> OpenRow | None:
    """The in-place row of an example, or None when it cannot be laid out within ``limit`` tokens."""
    tok = layout.tok
    ans = [*tok.encode(ex.answer), *[tok.eot_id] * ANSWER_PAD]
    if ex.kind == "fim":
        ctx, suf, _ = layout.fim(tok.encode(ex.prefix), tok.encode(ex.suffix), len(ans), limit)
    else:
        try:
            parsed = parse_prompt(ex.prompt)
        except PromptError:
            return None
        ctx, _, _ = layout.edit(ex.prompt, parsed, len(ans), None, limit)
        suf = None
    if len(ctx) + len(ans) + len(suf or []) > limit:
        return None
    return OpenRow(ctx, suf, ans)


# ---- the ELBO under the in-place layout --------------------------------------------------------
def open_masks(
    rows: list[OpenRow], k: int, mask_id: int, seeds: list[int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """K masked copies of each row's canvas, example-major: (noisy [B*K, W], weight [B*K, W],
    answer [B*K, W]); weight is 1/t at masked canvas positions, 0 elsewhere (padding included)."""
    W = max(len(r.ans) for r in rows)
    noisy = torch.zeros(len(rows) * k, W, dtype=torch.long)
    weight = torch.zeros(len(rows) * k, W)
    answer = torch.zeros(len(rows) * k, W, dtype=torch.long)
    for b, (row, seed) in enumerate(zip(rows, seeds)):
        n = len(row.ans)
        ids = torch.tensor([row.ans])  # [1, n]: the canvas alone, so its masks ignore the batch
        nz, w = shared_masks(ids, torch.zeros(1, dtype=torch.long), torch.tensor([n]), k, mask_id, [seed])
        noisy[b * k : (b + 1) * k, :n] = nz
        weight[b * k : (b + 1) * k, :n] = w
        answer[b * k : (b + 1) * k, :n] = ids
    return noisy, weight, answer


def open_elbo(
    model: torch.nn.Module,
    layout: InPlaceLayout,
    rows: list[OpenRow],
    noisy: torch.Tensor,  # [B*K, W]
    weight: torch.Tensor,  # [B*K, W]
    answer: torch.Tensor,  # [B*K, W]
    k: int,
    inference=None,
) -> torch.Tensor:
    """The ELBO of each row's answer given its prefix (and suffix), averaged over its K masks: [B]."""
    dev = model.embed_tokens.weight.device
    rep = [r for r in rows for _ in range(k)]
    laid = layout.rows([r.ctx for r in rep], [r.suf for r in rep], [len(r.ans) for r in rep], inference, dev)
    state = in_place(laid)
    h, _ = model.encode(state.sequence(noisy.to(dev)), state.valid)  # [B*K, L, dim]
    want = weight.to(dev) > 0  # [B*K, W]
    if not bool(want.any()):
        return h.sum() * 0.0 + torch.zeros(len(rows), device=dev)
    logits = _read(model, state, h, slice(0, noisy.shape[1]), want).float()  # [N, V]
    logp = -F.cross_entropy(logits, answer.to(dev)[want], reduction="none")  # [N]
    at = want.nonzero(as_tuple=True)[0]
    per = torch.zeros(len(rep), device=dev).index_add(0, at, logp * weight.to(dev)[want])
    return per.view(len(rows), k).mean(1)


# ---- the run -----------------------------------------------------------------------------------
@dataclass
class OpenAlignConfig(AlignConfig):
    lora_r: int = DEFAULT_LORA_R
    lora_alpha: float | None = None  # None: 2 * r


def _base_dtype(precision: str, device: str) -> torch.dtype:
    if precision not in ("auto", "bf16", "fp32"):
        raise ValueError(f"precision must be auto, bf16 or fp32, got {precision!r}")
    return serving_dtype(precision, device)


class OpenAligner(Aligner):
    """kto.py's Aligner for an open-weight directory: in-place rows, LoRA adapters, the reference
    being the adapters switched off. ``train``, the batch order and the schedule are inherited."""

    def __init__(self, cfg: OpenAlignConfig, examples: list[Example] | None = None):
        self._open_run(cfg)
        if cfg.init is None:
            raise ValueError("an open-weight alignment needs --init DIR")
        self.ck = load_checkpoint(cfg.init, cfg.device, _base_dtype(cfg.precision, cfg.device))
        if self.ck.family == "editserver":
            raise ValueError(f"{cfg.init} is a native checkpoint: align it without LoRA (kto.Aligner)")
        self.model = self.ck.model.eval()
        self.lora = LoRA(self.model, cfg.lora_r, cfg.lora_alpha, cfg.seed)
        self.tok = self.ck.tokenizer
        self.layout = layout_for(self.ck)
        self.limit = min(ROW_TOKENS, self.model.cfg.max_seq_len // 2)
        self.rows, self.labels = self._rows(examples)
        self.store = SimpleNamespace(n=len(self.rows))  # what the inherited batch order reads
        self._start(len(self.rows), self.lora.parameters())

    def _load_weights(self, state: dict) -> None:
        if state.get("lora_r") != self.lora.r or state.get("lora_alpha") != self.lora.alpha:
            raise ValueError(
                f"{self.run} holds adapters of rank {state.get('lora_r')}; use the same --lora or another --run"
            )
        self.lora.load_state_dict(state["lora"])

    def _weights_state(self) -> dict:
        return {"lora": self.lora.state_dict(), "lora_r": self.lora.r, "lora_alpha": self.lora.alpha}

    def _rows(self, examples: list[Example] | None) -> tuple[list[OpenRow], np.ndarray]:
        """The run's rows: read from ``RUN/data``, or laid out from ``examples`` and written there."""
        data = self.run / "data"
        if (data / "info.json").exists():
            if examples is not None and self.store_digest() != examples_digest(examples):
                raise ValueError(
                    f"{self.run} holds a run on other examples; use another --run directory (or delete it)"
                )
            rows = [OpenRow(**r) for r in json.loads((data / "rows.json").read_text())]
            return rows, np.load(data / "labels.npy")
        if examples is None:
            raise ValueError(f"{self.run} holds no examples to align on")
        rows, labels, sources = [], [], {}
        for ex in examples:
            row = open_row(self.layout, ex, self.limit)
            if row is None:
                continue
            rows.append(row)
            labels.append(ex.desirable)
            key = f"{ex.source}:{'D' if ex.desirable else 'U'}"
            sources[key] = sources.get(key, 0) + 1
        if not rows:
            raise ValueError("no example fits the model's rows: nothing to align on")
        data.mkdir(parents=True, exist_ok=True)
        (data / "rows.json").write_text(json.dumps([r.__dict__ for r in rows]))
        np.save(data / "labels.npy", np.array(labels, dtype=bool))
        info = {"examples": len(examples), "digest": examples_digest(examples), "sources": sources}
        info["family"] = self.ck.family
        (data / "info.json").write_text(json.dumps(info, indent=2) + "\n")
        return rows, np.array(labels, dtype=bool)

    def _inputs(self, idx: np.ndarray) -> list[OpenRow]:
        return [self.rows[i] for i in idx]

    def _mismatched(self, idx: np.ndarray) -> list[OpenRow]:
        return [
            OpenRow(self.rows[i].ctx, self.rows[i].suf, self.rows[idx[(n + 1) % len(idx)]].ans)
            for n, i in enumerate(idx)
        ]

    def _masks(self, inputs: list[OpenRow], k: int, seeds: list[int]) -> tuple:
        return open_masks(inputs, k, self.tok.mask_id, seeds)

    @staticmethod
    def _subset(inputs: list[OpenRow], rows: list[int]) -> list[OpenRow]:
        return [inputs[n] for n in rows]

    def _elbo_of(self, inputs: list[OpenRow], masks: tuple, k: int, reference: bool) -> torch.Tensor:
        """[B] ELBO with the adapters on, or off for the reference (the same module)."""
        with self.lora.disabled() if reference else contextlib.nullcontext():
            return open_elbo(self.model, self.layout, inputs, *masks, k, self.ck.inference).float()

    def trainable_parameters(self):
        return self.lora.parameters()

    def export(self, directory: Path, meta: dict, dtype: torch.dtype | None = None) -> Path:
        """The input directory with merged weights (module docstring); ``dtype`` is not used: every
        tensor keeps the input's dtype."""
        return export_open(Path(self.cfg.init), Path(directory), self.ck.family, self.lora, meta)


def export_open(src: Path, dst: Path, family: str, lora: LoRA, meta: dict) -> Path:
    """Copy ``src`` to ``dst`` with ``lora``'s updates merged into the weights, under the input's own
    tensor names; ``meta`` becomes config.json's ``editserver_aligned``."""
    if dst.resolve() == src.resolve():
        raise ValueError("the export directory must differ from the input directory")
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and not (f.name.endswith(WEIGHT_SUFFIXES) or f.name in WEIGHT_INDEXES):
            shutil.copy2(f, dst / f.name)
    rename = renamer(family)  # input name -> ours; the adapted projections are found by ours
    adapted = {f"{name}.weight": name for name in lora.names}
    state: dict[str, torch.Tensor] = {}
    for path in shard_files(src):
        with safe_open(str(path), framework="pt", device="cpu") as f:
            for name in f.keys():
                t = f.get_tensor(name)
                ours = rename(name)
                if ours in adapted:
                    t = (t.float() + lora.delta(adapted[ours]).cpu()).to(t.dtype)
                state[name] = t.contiguous()
    missing = set(adapted) - {rename(n) for n in state}
    if missing:
        raise ValueError(f"{src} holds no tensor for the adapted {sorted(missing)[0]}")
    save_file(state, str(dst / WEIGHTS), metadata={"format": "pt"})
    raw = json.loads((src / "config.json").read_text())
    raw["editserver_aligned"] = meta
    (dst / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
    return dst
