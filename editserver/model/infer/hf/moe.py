"""A mixture-of-experts feed-forward block for open-weight families (LLaDA-MoE, LLaDA2).

Design decisions:
- One block, its differences as data (``MoeSpec``): the number of experts and how many each token
  takes, the expert width, an optional shared expert that every token passes through, the score
  function as a small pluggable piece (``Softmax``, ``Sigmoid``), whether the chosen weights are
  renormalised to sum to one (``norm_topk_prob``), a routed scaling factor, an optional per-expert
  bias, whether that bias also enters the weights or only the choice, and group-limited routing
  (``groups``/``topk_groups``: keep the best groups, choose experts only inside them).
- LLaDA-MoE-7B-A1B as its publisher's modeling code computes it (``LLaDAMoESparseMoeBlock`` in
  ``modeling_lladamoe.py``, read in the copy inclusionAI/dInfer ``tools/modeling_fused_lladamoe.py``
  @fce4e32): router logits, softmax over all experts in fp32, the expert bias (when the config
  enables it) added to those probabilities, top-k of the sum, no renormalisation (the block sets
  ``norm_topk_prob = False`` whatever the config says), the biased top-k values as the weights, cast
  to the hidden states' dtype, then the sum of weight * SwiGLU expert. ``LLADA_MOE_ROUTING`` is that.
- LLaDA2 (model/infer/hf/llada2.py) routes with a sigmoid, the bias for the choice only, 8 groups of which 4
  are kept (a group scores the sum of its two best experts), renormalised weights times 2.5 and one
  shared expert (inclusionAI/dFactory ``models/llada2_moe/modeling_llada2_moe.py``
  ``LLaDA2MoeGate`` @92b6890); the spec has every one of these as a field, and a unit test covers
  the group rule, and tests/model/test_llada2.py a whole LLaDA2 directory; its router's matmul runs
  in fp32 too (``router_fp32``), as its gate computes it.
- Gather, not dense: a step decodes a 16-row canvas, so the block visits only the experts some
  token chose. Tokens are sorted by expert once, each visited expert runs on its own rows, and the
  weighted outputs are summed back with ``index_add_``. An expert no token chose is never read,
  which is what makes a step cheaper than a dense model of the same total size (``editserver bench
  step --shape llada-moe-7b-a1b``).
- The router is not an ``nn.Linear``: weight-only quantization (model/infer/quant.py) converts the
  block's linears, and a router in int8 would change which experts are chosen; it stays in the
  weights' dtype, as the publisher computes it, with its scores in fp32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from editserver.model.infer import ops


class Softmax:
    """Scores as a softmax over all experts (LLaDA-MoE, OLMoE)."""

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.softmax(logits, dim=-1)

    def __repr__(self) -> str:
        return "Softmax()"

    def __eq__(self, other) -> bool:
        return isinstance(other, Softmax)

    def __hash__(self) -> int:
        return hash("softmax")


class Sigmoid:
    """Scores as an independent sigmoid per expert (LLaDA2, DeepSeek-V3 style)."""

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(logits)

    def __repr__(self) -> str:
        return "Sigmoid()"

    def __eq__(self, other) -> bool:
        return isinstance(other, Sigmoid)

    def __hash__(self) -> int:
        return hash("sigmoid")


@dataclass(frozen=True)
class MoeSpec:
    """How a family routes tokens to experts (module docstring)."""

    n_experts: int
    top_k: int
    expert_dim: int  # each expert's SwiGLU width
    score: Softmax | Sigmoid = Softmax()
    norm_topk_prob: bool = False  # renormalise the chosen weights to sum to one
    routed_scaling: float = 1.0  # the routed experts' sum is scaled by this
    expert_bias: bool = False  # a learned per-expert bias (a buffer in the checkpoint)
    bias_in_weight: bool = True  # the bias enters the weights too (LLaDA-MoE), or only the choice (LLaDA2)
    groups: int = 1  # experts split into this many equal groups ...
    topk_groups: int = 1  # ... of which the best this many are kept
    shared_dim: int = 0  # width of a shared expert every token passes through; 0: none
    dense_layers: tuple[int, ...] = ()  # layers whose feed-forward is the dense MLP instead
    router_fp32: bool = False  # the router's matmul itself in fp32 (LLaDA2), not only its scores


class Expert(nn.Module):
    """One SwiGLU expert: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(ops.swiglu(self.gate_proj(x), self.up_proj(x)))


class Router(nn.Module):
    """The router's logits [T, E] in fp32 from hidden states [T, D] (a plain weight: module docstring)."""

    def __init__(self, dim: int, n_experts: int, fp32: bool = False):
        super().__init__()
        self.fp32 = fp32
        # random as nn.Linear's would be (a checkpoint's replaces it): equal logits would route every
        # token to the same experts in a randomly initialised benchmark model
        self.weight = nn.Parameter(torch.randn(n_experts, dim) * dim**-0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fp32:  # LLaDA2's gate: F.linear(h.float(), w.float())
            return F.linear(x.float(), self.weight.float())
        return F.linear(x, self.weight).float()


class MoE(nn.Module):
    """The routed experts (plus a shared one, if the spec has it) over hidden states [B, L, D]."""

    def __init__(self, spec: MoeSpec, dim: int):
        super().__init__()
        if spec.groups < 1 or spec.n_experts % spec.groups or not 1 <= spec.topk_groups <= spec.groups:
            raise ValueError(f"{spec.n_experts} experts cannot be split into {spec.groups} groups")
        self.spec = spec
        self.gate = Router(dim, spec.n_experts, spec.router_fp32)
        self.experts = nn.ModuleList(Expert(dim, spec.expert_dim) for _ in range(spec.n_experts))
        if spec.expert_bias:
            self.expert_bias = nn.Parameter(torch.zeros(spec.n_experts), requires_grad=False)
        self.shared_expert = Expert(dim, spec.shared_dim) if spec.shared_dim else None

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(weights [T, k] in x's dtype, expert ids [T, k]) of hidden states x [T, D]."""
        s = self.spec
        scores = s.score(self.gate(x))  # [T, E] fp32
        choice = scores + self.expert_bias.float() if s.expert_bias else scores  # [T, E]
        if s.groups > 1:
            choice = self._best_groups(choice)
        top, ids = torch.topk(choice, s.top_k, dim=-1)  # [T, k]
        weights = top if s.bias_in_weight else scores.gather(-1, ids)  # [T, k] fp32
        if s.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True).clamp_min(1e-20)
        return (weights * s.routed_scaling).to(x.dtype), ids

    def _best_groups(self, choice: torch.Tensor) -> torch.Tensor:
        """``choice`` [T, E] with the experts outside the best ``topk_groups`` groups at -inf; a group
        scores the sum of its two best experts."""
        s = self.spec
        T = choice.shape[0]
        grouped = choice.view(T, s.groups, -1)  # [T, G, E/G]
        group_score = grouped.topk(min(2, grouped.shape[-1]), dim=-1).values.sum(-1)  # [T, G]
        keep = torch.zeros_like(group_score, dtype=torch.bool)  # [T, G]
        keep.scatter_(1, group_score.topk(s.topk_groups, dim=-1).indices, True)
        return grouped.masked_fill(~keep[..., None], float("-inf")).view(T, -1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, L, D = x.shape
        flat = x.reshape(-1, D)  # [T, D]
        weights, ids = self.route(flat)  # [T, k], [T, k]
        k = ids.shape[1]
        order = ids.reshape(-1).argsort(stable=True)  # [T*k]: (token, slot) pairs sorted by expert
        counts = torch.bincount(ids.reshape(-1), minlength=self.spec.n_experts).tolist()  # [E]
        tokens = order // k  # [T*k] the token of each sorted pair
        w = weights.reshape(-1)[order]  # [T*k]
        out = torch.zeros_like(flat)  # [T, D]
        start = 0
        for e, n in enumerate(counts):
            if n == 0:
                continue  # an expert no token chose is never read
            rows = tokens[start : start + n]  # [n]
            y = self.experts[e](flat[rows]) * w[start : start + n, None]  # [n, D]
            out.index_add_(0, rows, y)
            start += n
        if self.shared_expert is not None:
            out = out + self.shared_expert(flat)
        return out.view(B, L, D)
