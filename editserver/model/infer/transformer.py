"""Bidirectional Qwen2/LLaMA-style transformer for masked diffusion.

Design decisions:
- RMSNorm, rotary positions, SwiGLU, grouped-query attention; no causal mask.
- *Context-isolated attention.* A sequence is ``[context | canvas]``. Context tokens attend only to
  context; canvas tokens attend to everything. Training uses the same rule (a boolean mask built from
  per-row context lengths), so at inference the context's keys/values are computed once and are
  *exactly* what a full forward would give at every denoising step: caching them is lossless, unlike
  Fast-dLLM's approximate prefix cache. Plain code windows use context length 0 (fully bidirectional).
- Inference never builds an L x L mask: the context pass is unmasked bidirectional attention (only a
  key-padding mask for batched rows of unequal length), and the canvas pass attends to
  ``[cached context ; canvas]`` unmasked. ``scaled_dot_product_attention`` then runs a fused
  (flash / memory-efficient) kernel, so a 32,768-token context fits in memory.
- Logits are computed only for the positions asked for (``logits_index``): the vocabulary projection
  is the most expensive matmul per token in a model this small.
- *Where the canvas sits* is a per-row choice (``canvas_pos``, the rotary position of its first
  token; default: right after the context). A next-edit rewrite starts at the position of the
  region it rewrites, so canvas token j and region token j share a rotary position and copying the
  unchanged tokens is attention at relative distance 0 (learned as early as a previous-token head),
  instead of a variable-offset lookup a small model learns late.
- *Draft input* (``canvas_draft`` models): canvas position j of a next-edit rewrite also gets the
  embedding of its draft token, the region token it would copy (model/infer/draft.py: aligned on what was
  written, end-of-text past the region's end), scaled by a learned per-channel
  gain that starts at 1: with tied embeddings, mask + draft embedding already leans the output
  toward the draft token, so copying is the starting point (a gain started at 0 moved to 0.014 in
  200 steps and changed nothing: too slow a start for CPU budgets). Most of a
  rewrite copies its region, and a 7M-parameter model trained on ~30M CPU tokens did not learn to
  copy through attention (a third of region tokens right with 90% of the canvas visible), whereas a
  token's own input is a path one layer can use. ``draft`` is -1 where there is none (context, FIM
  and plain rows), so other rows are unaffected. Which region token a position copies depends on
  what was written before it (model/infer/draft.py), so the draft is an input of every canvas step, not
  part of the context cache.
- *Copy logit* (same models): the draft token's logit also gets ``copy_gate(h)``, a learned scalar
  per position (a pointer-generator-style copy, See et al. 2017, Eq. 9, as a logit bonus instead of
  a mixture). It starts as a constant +4, so "keep the region's token" is the default answer from the
  first step, and the network learns where to close the gate (the renamed identifier, inserted
  lines) from the draft embedding above, which tells it which token the bonus would go to.
  ``draft_bias`` (a float, not a weight; the checkpoint's ``inference.draft_bias``, set by the
  engine before each decode) is added to that bonus at inference: a prior toward the draft the learned gate does not
  reach by itself, since it was fitted on edit rows where the region changes far more often than
  around a rename's other occurrences (2026-11-27: +4 took renames from 85.3% to 91.1% exact on 190
  held-out files, ``editserver bench renames --limit 200``; docs/experiments.md).
- Hot-path ops go through ``model.infer.ops``, which dispatches to ``kernels`` (Triton) or PyTorch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from editserver.model.infer import ops
from editserver.model.infer.config import ModelConfig

COPY_BONUS = 4.0  # the copy gate's starting logit bonus: the draft token is the default answer


class ContextTooLongError(ValueError):
    """Raised when context plus canvas exceed the model's window (never silently truncated)."""


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.rmsnorm(x, self.weight, self.eps)


def rope_tables(head_dim: int, positions: torch.Tensor, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin for rotary embedding; positions [B, L] -> tables [B, L, head_dim/2] (float32)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim))
    angles = positions.float()[..., None] * inv_freq  # [B, L, D/2]
    return angles.cos(), angles.sin()


@dataclass
class KVCache:
    """Per-layer keys/values of a fixed context: k, v [B, H_kv, Lc, D]; valid [B, Lc] (False = padding)."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    valid: torch.Tensor  # [B, Lc] bool
    lengths: torch.Tensor  # [B] number of real context tokens per row
    canvas_pos: torch.Tensor  # [B] rotary position of each row's first canvas token
    # [B] real canvas positions per row (None: every row uses the whole canvas); a batch pads shorter
    # canvases to the longest, and no position attends to the padding (``forward_canvas``)
    canvas_lens: torch.Tensor | None = None
    # [B] canvas index of each row's first real position (None: 0): a row that joined a running decode
    # (sampler.py ``Decode``) leaves the positions before it out, as keys; ``canvas_lens`` counts from it
    canvas_from: torch.Tensor | None = None

    @property
    def context_len(self) -> int:
        return self.valid.shape[1]

    def rows(self, idx: torch.Tensor) -> KVCache:
        """The cache of rows ``idx`` [b] alone, its context padding cut to their longest context:
        a batch whose other rows have finished decoding computes only these (sampler.py)."""
        Lc = int(self.lengths[idx].max())
        return KVCache(
            [k[idx, :, :Lc] for k in self.keys],
            [v[idx, :, :Lc] for v in self.values],
            self.valid[idx, :Lc],
            self.lengths[idx],
            self.canvas_pos[idx],
            None if self.canvas_lens is None else self.canvas_lens[idx],
            None if self.canvas_from is None else self.canvas_from[idx],
        )


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads, self.n_kv, self.hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * self.hd, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * self.hd, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * self.hd, bias=False)
        self.wo = nn.Linear(cfg.n_heads * self.hd, cfg.dim, bias=False)

    def project(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        B, L, _ = x.shape
        q = self.wq(x).view(B, L, self.n_heads, self.hd)
        k = self.wk(x).view(B, L, self.n_kv, self.hd)
        v = self.wv(x).view(B, L, self.n_kv, self.hd)
        q, k = ops.rotary(q, k, cos, sin)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, H, L, D]

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None,
        past: tuple[torch.Tensor, torch.Tensor] | None = None,
        kv_lens: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = self.project(x, cos, sin)
        # keys: [past ; k]; kv_lens marks the real tokens of the first segment (rows are right-padded)
        out = ops.attention(q, k, v, mask, past=past, kv_lens=kv_lens)  # [B, H, L, D]
        B, _, L, _ = out.shape
        return self.wo(out.transpose(1, 2).reshape(B, L, -1)), k, v


class FeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.w_gate = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w_up = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w_down = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_down(ops.swiglu(self.w_gate(x), self.w_up(x)))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn = FeedForward(cfg)

    def forward(self, x, cos, sin, mask, past=None, kv_lens=None):
        h, k, v = self.attn(self.attn_norm(x), cos, sin, mask, past, kv_lens)
        x, normed = ops.add_rmsnorm(
            x, h, self.ffn_norm.weight, self.ffn_norm.eps
        )  # x + h and its norm, fused
        return x + self.ffn(normed), k, v


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.apply(self._init)
        # per-channel gain of the draft embedding; 1 at first, so the draft token is the default answer
        self.draft_gain = nn.Parameter(torch.ones(cfg.dim)) if cfg.canvas_draft else None
        self.copy_gate = nn.Linear(cfg.dim, 1) if cfg.canvas_draft else None
        if self.copy_gate is not None:
            nn.init.zeros_(self.copy_gate.weight)
            nn.init.constant_(self.copy_gate.bias, COPY_BONUS)
        self.draft_bias = 0.0  # extra copy-logit bonus at inference (module docstring)

    def _init(self, m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def logits(self, h: torch.Tensor, draft: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [..., V] of hidden states h [..., dim]; with ``draft`` [...] (-1 = none), each draft
        token's logit gets the copy gate's bonus."""
        normed = self.norm(h)
        # a module call: an int8 head (model/infer/quant.py) stays int8
        out = F.linear(normed, self.embed.weight) if self.lm_head is None else self.lm_head(normed)
        if draft is None or self.copy_gate is None:
            return out
        has = (draft >= 0)[..., None]  # [..., 1]
        bonus = (self.copy_gate(normed) + self.draft_bias).to(out.dtype) * has  # [..., 1]
        return out.scatter_add(-1, draft.clamp_min(0)[..., None], bonus)

    def _embed(self, ids: torch.Tensor, draft: torch.Tensor | None) -> torch.Tensor:
        """Token embeddings [B, L, dim], plus the gated draft embedding where ``draft`` [B, L] >= 0."""
        x = self.embed(ids)
        if draft is None or self.draft_gain is None:
            return x
        has = (draft >= 0)[..., None]  # [B, L, 1]
        return x + has * self.draft_gain * self.embed(draft.clamp_min(0))

    def _check_len(self, total: int) -> None:
        if total > self.cfg.max_seq_len:
            raise ContextTooLongError(
                f"input of {total} tokens exceeds the model's context window of {self.cfg.max_seq_len}"
            )

    # ---- training / full forward ------------------------------------------------------------
    def forward(
        self,
        ids: torch.Tensor,  # [B, L]
        context_lens: torch.Tensor | None = None,  # [B]; None or all-zero = fully bidirectional
        seq_lens: torch.Tensor | None = None,  # [B]; keys at or past a row's length are padding
        logits_index: tuple[torch.Tensor, torch.Tensor] | None = None,  # (rows, cols) to project
        canvas_pos: torch.Tensor | None = None,  # [B]; None: the canvas continues after the context
        draft: torch.Tensor | None = None,  # [B, L] region token per position, -1 = none
    ) -> torch.Tensor:
        B, L = ids.shape
        self._check_len(L)
        pos = torch.arange(L, device=ids.device).expand(B, L)
        if canvas_pos is not None and context_lens is not None:
            on_canvas = pos >= context_lens[:, None]  # [B, L]
            pos = torch.where(on_canvas, pos - context_lens[:, None] + canvas_pos[:, None], pos)
        cos, sin = rope_tables(self.cfg.head_dim, pos, self.cfg.rope_theta)
        mask = None
        idx = torch.arange(L, device=ids.device)
        if context_lens is not None and bool((context_lens > 0).any()):
            ctx = context_lens[:, None, None]  # [B, 1, 1]
            # query i sees key j iff i is on the canvas (i >= ctx) or j is in the context (j < ctx)
            mask = ((idx[None, :, None] >= ctx) | (idx[None, None, :] < ctx))[:, None]  # [B, 1, L, L]
        if seq_lens is not None and bool((seq_lens < L).any()):
            keep = (idx[None, :] < seq_lens[:, None])[:, None, None, :]  # [B, 1, 1, L]
            mask = keep if mask is None else mask & keep
        x = self._embed(ids, draft)
        for layer in self.layers:
            x, _, _ = layer(x, cos, sin, mask)
        if logits_index is not None:
            x = x[logits_index]  # [N, dim]
            draft = None if draft is None else draft[logits_index]  # [N]
        return self.logits(x, draft)

    # ---- inference: cached context + canvas steps --------------------------------------------
    @torch.no_grad()
    def encode_context(
        self,
        ids: torch.Tensor,
        lengths: torch.Tensor | None = None,
        canvas_pos: torch.Tensor | None = None,
    ) -> KVCache:
        """Run the context once. ids [B, Lc], left-aligned with right padding; lengths [B];
        canvas_pos [B] (default: ``lengths``, the canvas right after the context)."""
        B, Lc = ids.shape
        self._check_len(Lc)
        if lengths is None:
            lengths = torch.full((B,), Lc, device=ids.device)
        valid = torch.arange(Lc, device=ids.device)[None, :] < lengths[:, None]  # [B, Lc]
        kv_lens = None if bool(valid.all()) else lengths  # key padding only, given as lengths
        pos = torch.arange(Lc, device=ids.device).expand(B, Lc)
        cos, sin = rope_tables(self.cfg.head_dim, pos, self.cfg.rope_theta)
        x = self.embed(ids)
        keys, values = [], []
        for layer in self.layers:
            x, k, v = layer(x, cos, sin, None, kv_lens=kv_lens)
            keys.append(k)
            values.append(v)
        return KVCache(keys, values, valid, lengths, lengths if canvas_pos is None else canvas_pos)

    @torch.no_grad()
    def extend_context(
        self, ids: torch.Tensor, past: list[tuple[torch.Tensor, torch.Tensor]], positions: torch.Tensor
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Keys/values of one row's context tokens ids [1, n] at rotary ``positions`` [n], beside
        ``past`` (per layer (k, v) [1, Hkv, Lp, D], keys already rotated to their own positions, which
        may lie before, between or after the new ones): each layer's new (k, v) [1, Hkv, n, D]. The
        new tokens attend to the past keys and to each other, as context tokens do (module
        docstring); the past is not recomputed (model/infer/prefix.py)."""
        B, n = ids.shape
        self._check_len(past[0][0].shape[2] + n)
        cos, sin = rope_tables(self.cfg.head_dim, positions.expand(B, n), self.cfg.rope_theta)
        x, out = self.embed(ids), []
        for layer, (pk, pv) in zip(self.layers, past):
            x, k, v = layer(x, cos, sin, None, past=(pk, pv))
            out.append((k, v))
        return out

    @torch.no_grad()
    def forward_canvas(
        self,
        canvas: torch.Tensor,
        cache: KVCache,
        only: slice | None = None,
        draft: torch.Tensor | None = None,
        want: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits [B, N, V] for the canvas [B, N] given a cached context; ``only`` keeps the positions
        being decoded (the vocabulary projection of the others would be thrown away); draft [B, N]
        (-1 = none) for ``canvas_draft`` models. ``want`` [B, n] (bool, over ``only``'s positions)
        projects just those: logits [M, V] for its M True entries in row-major order."""
        B, N = canvas.shape
        used = N if cache.canvas_lens is None else cache.canvas_lens  # a row's real positions
        self._check_len(int((cache.lengths + used).max()))
        # canvas positions start at each row's canvas_pos (by default right after its real context)
        pos = cache.canvas_pos[:, None] + torch.arange(N, device=canvas.device)[None, :]  # [B, N]
        cos, sin = rope_tables(self.cfg.head_dim, pos, self.cfg.rope_theta)
        # keys are [cached context ; canvas]: context padding is given as lengths, canvas padding (a
        # row shorter than the batch's canvas) as a key mask, so a batched row decodes as it would alone
        kv_lens = None if bool(cache.valid.all()) else cache.lengths
        mask = None
        lo = torch.zeros_like(cache.lengths) if cache.canvas_from is None else cache.canvas_from  # [B]
        hi = lo + (N if cache.canvas_lens is None else cache.canvas_lens)  # [B]
        if bool(((lo > 0) | (hi < N)).any()):
            j = torch.arange(N, device=canvas.device)[None, :]
            on = (j >= lo[:, None]) & (j < hi[:, None])  # [B, N]
            mask = torch.cat([on.new_ones(B, cache.context_len), on], dim=1)[:, None, None, :]  # [B,1,1,Lk]
        x = self._embed(canvas, draft)
        for layer, k, v in zip(self.layers, cache.keys, cache.values):
            x, _, _ = layer(x, cos, sin, mask, past=(k, v), kv_lens=kv_lens)
        if only is not None:
            x, draft = x[:, only], None if draft is None else draft[:, only]
        if want is not None:  # [M, dim]: the still-masked positions, a fraction after the first steps
            x, draft = x[want], None if draft is None else draft[want]
        return self.logits(x, draft)
