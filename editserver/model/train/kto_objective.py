"""The KTO objective for the masked-diffusion model: the ELBO estimator and the loss (model/train/kto.py
runs it; the equations are in its docstring).

Design decisions:
- ``shared_masks`` draws an example's K masks from a generator seeded by the example, at the row's
  own length, so policy and reference see the same masks and timesteps in whatever batch the
  example lands (VRPO, LLaDA 1.5), and the reference's ELBO can be cached per example.
- ``elbo`` sums the per-sequence MDLM bound over the answer's canvas (a log-likelihood, not divided
  by its length) and averages over the K masks; it computes logits only at masked positions.
- ``class_weights`` and ``kto_loss`` follow the KTO paper (Ethayarajh et al. 2024, sec. 4): the
  rarer class is weighted up until lambda_D * n_D / (lambda_U * n_U) lies in [1, 4/3].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from editserver.model.infer.transformer import Transformer
from editserver.model.train.diffusion import mask_batch


# ---- the ELBO estimator ------------------------------------------------------------------------
def shared_masks(
    ids: torch.Tensor,  # [B, L]
    ctx: torch.Tensor,  # [B]
    lens: torch.Tensor,  # [B]
    k: int,
    mask_id: int,
    seeds: list[int],
) -> tuple[torch.Tensor, torch.Tensor]:
    """K masked copies of each row, example-major: (noisy [B*K, L], weight [B*K, L]); the weight is
    1/t at masked canvas positions (the per-sequence MDLM bound) and 0 elsewhere.

    Each row is masked at its own length, not the batch's width, so an example gets the same masks
    in whatever batch it lands: the cached reference ELBO was computed on exactly these."""
    noisy, weight = [], []
    L = ids.shape[1]
    for b, seed in enumerate(seeds):
        g = torch.Generator().manual_seed(seed)
        n_b = int(lens[b])
        row = ids[b, :n_b].expand(k, -1)  # [K, n_b]
        n, _, _, w = mask_batch(row, ctx[b].expand(k), lens[b].expand(k), mask_id, g)
        canvas = (lens[b] - ctx[b]).clamp_min(1).float()
        # past the row's length: its padding as it was (keys there are masked), weight 0
        noisy.append(torch.cat([n, ids[b, n_b:].expand(k, -1)], dim=1))
        weight.append(F.pad(w * canvas, (0, L - n_b)))  # mask_batch divides by the canvas: undo it
    return torch.cat(noisy), torch.cat(weight)


def elbo(
    model: Transformer,
    batch: tuple,  # loop._batch: ids [B, L], ctx [B], lens [B], canvas pos [B], draft [B, L]
    noisy: torch.Tensor,  # [B*K, L]
    weight: torch.Tensor,  # [B*K, L]
    k: int,
) -> torch.Tensor:
    """The ELBO of each row's answer given its context, averaged over its K masks: [B]."""
    ids, ctx, lens, pos, draft = batch
    B = ids.shape[0]

    def rep(x: torch.Tensor) -> torch.Tensor:
        return x.repeat_interleave(k, 0)

    rows, cols = (weight > 0).nonzero(as_tuple=True)
    if rows.numel() == 0:
        return model.embed.weight.sum() * 0.0 + torch.zeros(B, device=ids.device)
    logits = model(
        noisy,
        context_lens=rep(ctx),
        seq_lens=rep(lens),
        logits_index=(rows, cols),
        canvas_pos=rep(pos),
        draft=rep(draft),
    ).float()  # [N, V]
    logp = -F.cross_entropy(logits, rep(ids)[rows, cols], reduction="none")  # [N]
    per_row = torch.zeros(B * k, device=ids.device).index_add(0, rows, logp * weight[rows, cols])
    return per_row.view(B, k).mean(1)


# ---- the loss ----------------------------------------------------------------------------------
def class_weights(n_d: int, n_u: int) -> tuple[float, float]:
    """(lambda_D, lambda_U) with lambda_D * n_D / (lambda_U * n_U) in [1, 4/3] (KTO paper, sec. 4)."""
    if n_d == 0 or n_u == 0:
        return 1.0, 1.0
    ratio = n_d / n_u
    if ratio < 1.0:
        return 1.0 / ratio, 1.0
    if ratio > 4.0 / 3.0:
        return 1.0, ratio * 3.0 / 4.0
    return 1.0, 1.0


def kto_loss(
    rewards: torch.Tensor,  # [B]
    desirable: torch.Tensor,  # [B] bool
    z0: torch.Tensor | float,
    lambda_d: float,
    lambda_u: float,
) -> tuple[torch.Tensor, dict]:
    """Mean of lambda_y - v(x, y) over the batch, and what the progress bar shows."""
    z0 = torch.as_tensor(z0, dtype=rewards.dtype, device=rewards.device)
    v = torch.where(desirable, lambda_d * torch.sigmoid(rewards - z0), lambda_u * torch.sigmoid(z0 - rewards))
    lam = torch.where(desirable, torch.full_like(rewards, lambda_d), torch.full_like(rewards, lambda_u))
    loss = (lam - v).mean()
    r = rewards.detach()
    d, u = r[desirable], r[~desirable]
    stats = {
        "loss": float(loss.detach()),
        "z0": float(z0),
        "margin": (float(d.mean()) if len(d) else 0.0) - (float(u.mean()) if len(u) else 0.0),
        "d_above": float((d > z0).float().mean()) if len(d) else float("nan"),
    }
    return loss, stats
