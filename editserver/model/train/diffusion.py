"""The masked-diffusion objective (MDLM / LLaDA).

Forward process: each token of the canvas is replaced by ``<|mask|>`` independently with probability
t, t ~ U(0, 1) per sequence. The model predicts the clean tokens at masked positions, and the loss is
the negative ELBO of MDLM (Sahoo et al. 2024, Eq. 10) / LLaDA (Nie et al. 2025, Eq. 3):

    L(theta) = - E_t E_{x_t} [ (1/t) * sum_i 1[x_t^i = M] * log p_theta(x_0^i | x_t) ] / |canvas|

Design decisions:
- Only canvas positions (``context_len <= i < seq_len``) are ever masked; the context stays clean,
  which is how FIM and next-edit prompts look at inference.
- t is drawn stratified across the batch (one uniform offset plus i/B) to lower the variance of the
  1/t-weighted estimator; t is floored at ``t_min`` so one rare tiny t cannot dominate a batch.
- Logits are computed only at masked positions (``logits_index``): the vocabulary projection and its softmax are a third of a training step.
- *Block-ordered rows* (``ordered_share`` of each batch; the rest are uniform MDLM rows). The
  sampler decodes semi-autoregressively (model/infer/sampler.py): while a block is decoded, everything
  before it is committed and everything after it is still masked. Uniform masking almost never
  draws that state (a clean prefix followed by a wholly masked tail has probability ~t^(n-c)(1-t)^c),
  so a small model meets it out of distribution: decoded left to right, the shipped CPU model wrote
  ``if not not not not ...``. An ordered row draws a block start c uniformly on the canvas and a
  block size b log-uniformly in [1, ``MAX_BLOCK``]: positions before c stay clean, position c is
  masked, each later position of [c, c+b) is masked with probability t, and every position from c+b
  on is masked (an active block always has something left to decode). The loss is taken on the block
  only (the sampler never reads predictions past the active block), weighted 1/(1 + t(b-1)), the
  block's expected masked count, so each row adds about its mean masked-token CE, the scale of the
  uniform rows' MDLM term above. This is block diffusion's training state (BD3-LM, Arriola et al.
  2025, Eq. 6, with the later blocks masked instead of absent, since our attention is bidirectional);
  b = 1 is next-token prediction, the order-restricted objective that Nie et al. (2024, "Scaling up
  Masked Diffusion Models on Text") find far more sample-efficient than learning every order.
  Off by default (``TrainConfig.ordered_share`` 0): continuing the shipped CPU model with a share
  of 0.5 made both held-out losses worse, the block-ordered one included (2026-11-24,
  docs/experiments.md).
- *Certainty forcing* (``certainty`` > 0, self-distillation rows only, model/train/distill.py): plus
  ``certainty`` times the mean entropy of the masked positions whose argmax is already the target
  (dParallel, Chen et al. 2025): CE alone makes the right token the most likely; the entropy
  term makes it likely enough to clear the parallel sampler's threshold.
- *Decision weighting* (``decision_t_min``, self-distillation rows only): a teacher row's t is drawn
  from U(t_min, 1) (the same stratified draw, rescaled) and its loss is the mean CE over its masked
  *decisions*: the answer's tokens and its first end-of-text; the end-of-text padding after it is
  masked at the same rate but not scored. The MDLM weight (1/t)/|canvas| is the likelihood bound's;
  for a deterministic teacher answer any positive weighting is a consistent target, and this one
  spends the signal where parallel decoding is decided: on mostly masked canvases (the first
  steps, which 1/t weights least) and on the answer, not on a canvas that is mostly padding the
  sampler fills in one step. On the CPU it gave the best first-step calibration measured (2026-11-29,
  docs/experiments.md: p1 >= 0.9 held 27.4% of decisions at 96.9% right, the shipped weights 22.2% at 89.0%).
- Randomness is drawn from the explicit CPU ``torch.Generator`` and moved to the rows' device, so
  a run masks the same positions on CPU and CUDA and resumes from one saved generator state.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from editserver.model.infer.transformer import Transformer
from editserver.model.infer.unmasking import first_true


def sample_t(batch: int, generator: torch.Generator, t_min: float = 1e-3) -> torch.Tensor:
    u = torch.rand((), generator=generator)
    t = (u + torch.arange(batch) / batch) % 1.0  # stratified: one per 1/B slice
    return t.clamp_min(t_min)  # [B]


MAX_BLOCK = 32  # ordered rows' largest block: the sampler's default block size (model/infer/config.py)


def mask_batch(
    ids: torch.Tensor,  # [B, L]
    context_lens: torch.Tensor,  # [B]
    seq_lens: torch.Tensor,  # [B]
    mask_id: int,
    generator: torch.Generator,
    ordered_share: float = 0.0,
    decision_rows: torch.Tensor | None = None,  # [B] bool: rows taking the decision weighting
    decision_t_min: float = 0.0,  # decision rows draw t ~ U(decision_t_min, 1)
    eot_id: int = -1,  # end-of-text, which ends a decision row's answer
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Returns (noisy ids [B, L], masked [B, L] bool, t [B], loss weight [B, L]).

    The weight is 0 where no loss is taken and otherwise the row's estimator weight: (1/t)/|canvas|
    on uniform rows (MDLM), 1/(1 + t(b-1)) on the block of an ordered row, 1/(masked decisions) on
    a decision row's masked answer tokens and first end-of-text (module docstring)."""
    B, L = ids.shape
    dev = ids.device
    t = sample_t(B, generator).to(dev)
    if decision_rows is not None:  # the same draw rescaled to U(t_min, 1): no extra randomness
        t = torch.where(decision_rows, decision_t_min + (1.0 - decision_t_min) * t, t)
    pos = torch.arange(L, device=dev)[None, :]
    on_canvas = (pos >= context_lens[:, None]) & (pos < seq_lens[:, None])  # [B, L]
    masked = (torch.rand((B, L), generator=generator).to(dev) < t[:, None]) & on_canvas
    canvas_len = (seq_lens - context_lens).clamp_min(1).float()  # [B]
    weight = (1.0 / (t * canvas_len))[:, None].expand(B, L)  # [B, L]
    if decision_rows is not None:
        first_eot = first_true((ids == eot_id) & on_canvas)  # [B]; L where a row has none
        decisions = on_canvas & (pos <= first_eot[:, None]) & masked  # [B, L]
        per_row = 1.0 / decisions.sum(dim=1).clamp_min(1).float()  # [B]
        weight = torch.where(decision_rows[:, None], decisions * per_row[:, None], weight)
    # the first round(ordered_share * B) rows are ordered (rows are drawn at random, so any rows will do)
    n_ord = int(round(ordered_share * B))
    if n_ord:
        u = torch.rand((n_ord, 2), generator=generator).to(dev)
        start = context_lens[:n_ord] + (u[:, 0] * canvas_len[:n_ord]).long()  # [n] block start
        block = torch.exp(u[:, 1] * math.log(MAX_BLOCK)).long().clamp(1, MAX_BLOCK)
        p = pos.expand(n_ord, L)
        in_block = (p >= start[:, None]) & (p < (start + block)[:, None]) & on_canvas[:n_ord]  # [n, L]
        after = (p >= (start + block)[:, None]) & on_canvas[:n_ord]
        first = (p == start[:, None]) & on_canvas[:n_ord]  # the block start is always masked
        masked[:n_ord] = (masked[:n_ord] & in_block) | first | after
        b_eff = in_block.sum(1).clamp_min(1)  # [n] block size, cut at the canvas end
        w_blk = 1.0 / (1.0 + t[:n_ord] * (b_eff - 1))  # [n] 1 / expected masked count of the block
        weight = torch.cat([torch.where(in_block, w_blk[:, None], 0.0), weight[n_ord:]])
    noisy = torch.where(masked, torch.full_like(ids, mask_id), ids)
    return noisy, masked, t, weight * masked


def diffusion_loss(
    model: Transformer,
    ids: torch.Tensor,  # [B, L] clean tokens
    context_lens: torch.Tensor,  # [B]
    seq_lens: torch.Tensor,  # [B]
    mask_id: int,
    generator: torch.Generator,
    canvas_pos: torch.Tensor | None = None,  # [B] rotary position of each canvas start (transformer.py)
    draft: torch.Tensor | None = None,  # [B, L] draft token per position, -1 = none (transformer.py)
    ordered_share: float = 0.0,
    certain_rows: torch.Tensor | None = None,  # [B] bool: teacher rows (certainty, decision weighting)
    certainty: float = 0.0,
    decision_t_min: float | None = None,  # None: teacher rows take the MDLM weight like the rest
    eot_id: int = -1,
) -> tuple[torch.Tensor, dict]:
    decision = None if decision_t_min is None else certain_rows
    noisy, masked, t, weight = mask_batch(
        ids,
        context_lens,
        seq_lens,
        mask_id,
        generator,
        ordered_share,
        decision,
        decision_t_min or 0.0,
        eot_id,
    )
    # only positions that carry loss are projected (an ordered row's tail is masked but not scored)
    rows, cols = (weight > 0).nonzero(as_tuple=True)
    if rows.numel() == 0:
        zero = model.embed.weight.sum() * 0.0
        return zero, {"masked": 0, "ce": 0.0}
    logits = model(
        noisy,
        context_lens=context_lens,
        seq_lens=seq_lens,
        logits_index=(rows, cols),
        canvas_pos=canvas_pos,
        draft=draft,
    )  # [N, V]
    logits = logits.float()
    ce = F.cross_entropy(logits, ids[rows, cols], reduction="none")  # [N]
    loss = (ce * weight[rows, cols]).sum() / ids.shape[0]
    stats = {"masked": int(rows.numel()), "ce": float(ce.detach().mean())}
    if certainty and certain_rows is not None:
        # certainty forcing (dParallel, Chen et al. 2025): the entropy of the positions the model
        # already gets right, so that what it would commit anyway clears the unmasking threshold
        right = (logits.argmax(-1) == ids[rows, cols]) & certain_rows[rows]  # [N]
        if bool(right.any()):
            logp = logits[right].log_softmax(-1)  # [n, V]
            ent = -(logp.exp() * logp).sum(-1)  # [n]
            loss = loss + certainty * ent.mean()
            stats["entropy"] = float(ent.detach().mean())
    return loss, stats
