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
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from model.transformer import Transformer


def sample_t(batch: int, generator: torch.Generator, t_min: float = 1e-3) -> torch.Tensor:
    u = torch.rand((), generator=generator)
    t = (u + torch.arange(batch) / batch) % 1.0  # stratified: one per 1/B slice
    return t.clamp_min(t_min)  # [B]


def mask_batch(
    ids: torch.Tensor,  # [B, L]
    context_lens: torch.Tensor,  # [B]
    seq_lens: torch.Tensor,  # [B]
    mask_id: int,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Returns (noisy ids [B, L], masked [B, L] bool, t [B])."""
    B, L = ids.shape
    t = sample_t(B, generator)
    pos = torch.arange(L)[None, :]
    on_canvas = (pos >= context_lens[:, None]) & (pos < seq_lens[:, None])  # [B, L]
    masked = (torch.rand((B, L), generator=generator) < t[:, None]) & on_canvas
    noisy = torch.where(masked, torch.full_like(ids, mask_id), ids)
    return noisy, masked, t


def diffusion_loss(
    model: Transformer,
    ids: torch.Tensor,  # [B, L] clean tokens
    context_lens: torch.Tensor,  # [B]
    seq_lens: torch.Tensor,  # [B]
    mask_id: int,
    generator: torch.Generator,
    canvas_pos: torch.Tensor | None = None,  # [B] rotary position of each canvas start (transformer.py)
    draft: torch.Tensor | None = None,  # [B, L] draft token per position, -1 = none (transformer.py)
) -> tuple[torch.Tensor, dict]:
    noisy, masked, t = mask_batch(ids, context_lens, seq_lens, mask_id, generator)
    rows, cols = masked.nonzero(as_tuple=True)
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
    ce = F.cross_entropy(logits.float(), ids[rows, cols], reduction="none")  # [N]
    canvas_len = (seq_lens - context_lens).clamp_min(1).float()  # [B]
    weight = 1.0 / (t[rows] * canvas_len[rows])  # (1/t) / |canvas|
    loss = (ce * weight).sum() / ids.shape[0]
    return loss, {"masked": int(rows.numel()), "ce": float(ce.detach().mean())}
