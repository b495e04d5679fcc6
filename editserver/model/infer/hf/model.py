"""Our transformer for open-weight diffusion families (Qwen2/Qwen3/Llama layouts, LLaDA, the MoE
families), with full or block-causal attention.

Design decisions:
- One module for every family (model/infer/hf/families.py ``OpenConfig``): q/k/v biases on or off,
  tied or separate head, GQA. Parameter names follow the Qwen2 layout without the ``model.`` prefix,
  so a Dream directory loads by stripping a prefix and LLaDA's names map one to one.
- LLaDA-MoE is the same module with two options from its config: a per-head RMSNorm of q and k
  before the rotary (``qk_norm``; ``LLaDAMoEAttention`` normalises each head_dim slice, then rotates)
  and the mixture-of-experts block (model/infer/hf/moe.py) in place of the dense MLP on every layer
  its ``moe_layer_freq`` marks. Its attention takes no mask and its logits are not shifted, as
  dense LLaDA's (``modeling_lladamoe.py`` as copied in inclusionAI/dInfer
  ``tools/modeling_fused_lladamoe.py`` @fce4e32; tests/model/test_llada_moe.py holds a plain
  reference written from it).
- LLaDA2 (model/infer/hf/llada2.py) is the same module too: its fused q/k/v weight is split at load,
  q/k norms as LLaDA-MoE's, a partial rotary (``cfg.rotary_dim``: the first dims of each head turn,
  frequencies over those dims, the rest pass through) and block-causal attention on 32-token blocks.
- Hot-path ops go through ``model.infer.ops`` (rmsnorm, rotary, attention, swiglu), so the Triton
  kernels serve these models on CUDA exactly as they serve ours; on CPU the PyTorch references run.
- No causal mask for the masked-diffusion families: they were trained with full attention over
  ``prefix [MASK]*n suffix``. Rows of unequal length are right-padded and their padding is a key
  mask; rotary positions are each row's own 0..L-1, so a padded row computes what it would alone.
- Block diffusion (``cfg.block_size`` > 0: SDAR, Fast-dLLM v2, Stable-DiffCoder): query i attends key j iff j // b <= i // b on
  absolute positions (bidirectional inside a block, causal across blocks), the mask SDAR's
  ``generate.py`` builds as ``tril(ones(nb, nb))`` tiled b x b (JetAstra/SDAR @c2041a8). It is one
  bool mask [B, 1, Lq, Lk] through the same attention op; ``encode_span`` applies it among the span's
  own keys, the cached keys (earlier, finished blocks: model/infer/block_cache.py) all visible.
- Three entry points: ``forward`` (raw logits of every position, for tests and scoring), ``encode``
  (hidden states and every layer's keys/values: the dual cache's refresh) and ``encode_span``
  (hidden states of a few positions per row against cached keys/values with those positions' own
  fresh ones: the dual cache's step). Reading logits with or without the one-position shift is the
  cache policy's job (model/infer/cache.py), told by ``cfg.shift``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from editserver.model.infer import ops
from editserver.model.infer.hf.families import OpenConfig
from editserver.model.infer.hf.moe import MoE
from editserver.model.infer.transformer import ContextTooLongError, rope_tables


def block_causal(q_pos: torch.Tensor, k_pos: torch.Tensor, block: int) -> torch.Tensor:
    """[B, 1, Lq, Lk] bool: key k visible to query q iff block(k) <= block(q) (q_pos [B, Lq], k_pos [B, Lk])."""
    return ((k_pos[:, None, :] // block) <= (q_pos[:, :, None] // block))[:, None]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.rmsnorm(x, self.weight, self.eps)


class SelfAttention(nn.Module):
    def __init__(self, cfg: OpenConfig):
        super().__init__()
        self.h, self.hkv, self.hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)
        self.rope_fp32 = cfg.family == "llada"  # LLaDA's modeling code rotates q and k in fp32
        if cfg.qk_norm:  # LLaDA-MoE: one RMSNorm over each head's q (and k) before the rotary
            self.q_norm = RMSNorm(cfg.head_dim, cfg.norm_eps)
            self.k_norm = RMSNorm(cfg.head_dim, cfg.norm_eps)
        self.qk_norm = cfg.qk_norm
        self.rot = cfg.rotary_dim if 0 < cfg.rotary_dim < cfg.head_dim else 0  # partial rotary (LLaDA2)

    def _rotate(self, q: torch.Tensor, k: torch.Tensor, cos, sin) -> tuple[torch.Tensor, torch.Tensor]:
        """The rotary on q [B, L, H, D], k [B, L, Hkv, D]; with a partial rotary only the first ``rot``
        dims of each head turn (rotate-half pairs inside them), the rest pass through (LLaDA2's
        ``apply_rotary_pos_emb``, inclusionAI/dFactory @92b6890)."""
        if not self.rot:
            return ops.rotary(q, k, cos, sin)
        r = self.rot
        qr, kr = ops.rotary(q[..., :r].contiguous(), k[..., :r].contiguous(), cos, sin)
        return torch.cat([qr, q[..., r:]], dim=-1), torch.cat([kr, k[..., r:]], dim=-1)

    def forward(self, x, cos, sin, mask, past=None):
        B, L, _ = x.shape
        q = self.q_proj(x).view(B, L, self.h, self.hd)  # [B, L, H, D]
        k = self.k_proj(x).view(B, L, self.hkv, self.hd)  # [B, L, Hkv, D]
        v = self.v_proj(x).view(B, L, self.hkv, self.hd)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope_fp32:  # cos/sin stay fp32 (OpenModel._tables); the result returns to the weights' type
            q, k = self._rotate(q.float(), k.float(), cos, sin)
            q, k = q.to(x.dtype), k.to(x.dtype)
        else:
            q, k = self._rotate(q, k, cos, sin)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, H, L, D]
        out = ops.attention(q, k, v, mask, past=past)  # [B, H, L, D]
        return self.o_proj(out.transpose(1, 2).reshape(B, L, -1)), k, v


class MLP(nn.Module):
    def __init__(self, cfg: OpenConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.up_proj = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.down_proj = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(ops.swiglu(self.gate_proj(x), self.up_proj(x)))


class Layer(nn.Module):
    def __init__(self, cfg: OpenConfig, index: int):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.self_attn = SelfAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)
        routed = cfg.moe is not None and index not in cfg.moe.dense_layers
        self.mlp = MoE(cfg.moe, cfg.dim) if routed else MLP(cfg)

    def forward(self, x, cos, sin, mask, past=None):
        h, k, v = self.self_attn(self.input_layernorm(x), cos, sin, mask, past)
        x, normed = ops.add_rmsnorm(
            x, h, self.post_attention_layernorm.weight, self.post_attention_layernorm.eps
        )
        return x + self.mlp(normed), k, v


class OpenModel(nn.Module):
    def __init__(self, cfg: OpenConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Layer(cfg, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.draft_bias = 0.0  # the engine sets it for our own models; open models have no draft

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """Logits [..., V] of hidden states [..., dim] (final norm, then the head)."""
        if self.lm_head is not None:  # a module call: an int8 head (model/infer/quant.py) stays int8
            return self.lm_head(self.norm(h))
        return F.linear(self.norm(h), self.embed_tokens.weight)

    def _check_len(self, total: int) -> None:
        if self.cfg.max_seq_len and total > self.cfg.max_seq_len:
            raise ContextTooLongError(
                f"input of {total} tokens exceeds the model's context window of {self.cfg.max_seq_len}"
            )

    def _tables(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rot = self.cfg.rotary_dim or self.cfg.head_dim  # a partial rotary's frequencies span its own dims
        cos, sin = rope_tables(rot, pos, self.cfg.rope_theta)
        dtype = torch.float32 if self.cfg.family == "llada" else self.embed_tokens.weight.dtype
        return cos.to(dtype), sin.to(dtype)

    def encode(
        self, ids: torch.Tensor, valid: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """Hidden states [B, L, dim] of right-padded rows ids [B, L] (valid [B, L]: False = padding)
        and every layer's keys/values [B, Hkv, L, D]."""
        B, L = ids.shape
        self._check_len(L)
        pos = torch.arange(L, device=ids.device).expand(B, L)
        cos, sin = self._tables(pos)
        mask = None if valid is None or bool(valid.all()) else valid[:, None, None, :]  # [B, 1, 1, L]
        if self.cfg.block_size:  # block diffusion (module docstring)
            causal = block_causal(pos, pos, self.cfg.block_size)  # [B, 1, L, L]
            mask = causal if mask is None else causal & mask
        x, kv = self.embed_tokens(ids), []
        for layer in self.layers:
            x, k, v = layer(x, cos, sin, mask)
            kv.append((k, v))
        return x, kv

    def encode_span(
        self,
        ids: torch.Tensor,  # [B, n] tokens of the span
        pos: torch.Tensor,  # [B, n] their positions (and rotary positions)
        fresh: torch.Tensor,  # [B, n] bool: span keys that exist (False: past a row's end)
        kv: list[tuple[torch.Tensor, torch.Tensor]],  # cached [B, Hkv, L, D] per layer
        cached: torch.Tensor,  # [B, L] bool: cached keys to attend (the span's own are recomputed)
        keep: list | None = None,  # given: each layer's fresh (k, v) [B, Hkv, n, D] is appended to it
    ) -> torch.Tensor:
        """Hidden states [B, n, dim] of a span attending to the cached keys plus its own fresh ones."""
        cos, sin = self._tables(pos)
        mask = (
            None if bool(cached.all() & fresh.all()) else torch.cat([cached, fresh], dim=1)[:, None, None, :]
        )
        if self.cfg.block_size:  # the span's own keys block-causally; cached ones are earlier blocks
            n, L = ids.shape[1], cached.shape[1]
            own = block_causal(pos, pos, self.cfg.block_size) & fresh[:, None, None, :]  # [B, 1, n, n]
            own = own | torch.eye(
                n, dtype=torch.bool, device=ids.device
            )  # a padded query sees itself: no NaN
            mask = torch.cat([cached[:, None, None, :].expand(-1, 1, n, L), own], dim=3)  # [B, 1, n, L + n]
        x = self.embed_tokens(ids)
        for layer, past in zip(self.layers, kv):
            x, k, v = layer(x, cos, sin, mask, past)
            if keep is not None:
                keep.append((k, v))
        return x

    def forward(self, ids: torch.Tensor, seq_lens: torch.Tensor | None = None) -> torch.Tensor:
        """Raw logits [B, L, V] of every position (no shift applied); seq_lens [B] marks padding."""
        valid = None
        if seq_lens is not None:
            valid = torch.arange(ids.shape[1], device=ids.device)[None, :] < seq_lens[:, None]
        h, _ = self.encode(ids, valid)
        return self.head(h)
