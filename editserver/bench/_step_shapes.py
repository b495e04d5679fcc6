"""The shapes ``editserver bench step`` builds, and one decode of each: in place on the dual cache, or
block diffusion on the block cache.

Design decisions:
- Block-diffusion shapes (``BLOCK_SHAPES``) are the published models' sizes with random weights, each
  with its family's attention grid (``block``), q/k norms or q/k/v biases, tied or separate head,
  shifted logits or not, and its family's per-block rule (model/infer/plan.py ``BLOCK_RULES``), so a
  decode runs what the server runs for that family: ``Decode`` with a member whose canvas starts
  ``lead = context % block`` into its first block (``BlockLayout.lead``), on ``BlockCache``.
- One token a step for every shape: each family's rule with its threshold set above 1, so no
  position ever passes it (``BlockSchedule`` then owes 1 of a 4-token block a step;
  ``SubBlockThreshold`` commits its sub-block's best), as ``TopKRule(1)`` does for the in-place
  shapes. Random weights can be confident (a tied head scores a token's own embedding highest, and
  a shifted model reads the token before), which would let one family's rule commit several tokens a
  step and another's not: with the same steps, ms per step and per answer compare the models and
  their caches, not their random weights.
- A block family takes no suffix rows: its FIM prompt holds the whole file, so a block shape's
  context is the same file text an in-place shape reads, in its layout's order
  (model/infer/layout.py): the chat template's (``BlockLayout``: SDAR, Fast-dLLM v2) is prefix,
  typed tokens, then suffix, so reusing the head of the file recomputes the suffix after the
  cursor, as it does when serving; Stable-DiffCoder's suffix-prefix-middle (``SpmBlockLayout``) is
  suffix, prefix, typed tokens, so a typed token is the prompt's end.
- ``--reuse on`` passes the prefix store to the block cache as to the dual cache (the cache's
  ``store`` field); a block cache that does not read its store yet times as ``off``.
- Sources of the sizes (config.json fields; "unchecked": not read from the published file here):
  Qwen2.5-1.5B (Qwen/Qwen2.5-1.5B-Instruct config.json: hidden_size 1536, num_hidden_layers 28,
  num_attention_heads 12, num_key_value_heads 2, intermediate_size 8960, vocab_size 151936,
  tie_word_embeddings true, rope_theta 1e6, rms_norm_eps 1e-6) for Efficient-Large-Model/
  Fast_dLLM_v2_1.5B (block ``bd_size`` 32 as in the 7B's config, tests/hf_fast_dllm.py; that the 1.5B
  keeps the tied head is unchecked); Qwen2.5-7B (hidden 3584, 28 layers, 28/4 heads, ffn 18944,
  vocab 152064, untied) for Fast_dLLM_v2_7B, as tests/hf_fast_dllm.py; Qwen3-1.7B (hidden 2048,
  28 layers, 16/8 heads, head_dim 128, ffn 6144, vocab 151936, rope 1e6) and Qwen3-8B (hidden 4096,
  36 layers, 32/8 heads, head_dim 128, ffn 12288, vocab 151936) for SDAR-1.7B-Chat / SDAR-8B-Chat,
  block 4, head untied as SDAR-4B-Chat's published config (tests/hf_sdar.py; the 1.7B's and 8B's
  own configs unchecked); Stable-DiffCoder-8B from its Base config.json as docs/open-weights.md
  quotes it (hidden 4096, 32 layers, 32/8 heads, head_dim 128, ffn 14336, vocab 155136, rope 5e5,
  no bias, untied), not shifted, block 4, its family's rule (``BLOCK_RULES``).
- Every shape's parameter count is checked against its base model's published total
  (tests/editserver/test_bench_step.py).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

from editserver.bench.kernels import OpShapes
from editserver.model.infer.hf import llada2
from editserver.model.infer.hf.moe import MoeSpec


@dataclass(frozen=True)
class BlockShape:
    """A block-diffusion model's shape and decoding (module docstring)."""

    ops: OpShapes
    family: str
    block: int
    rule: Callable  # block size -> the per-block rule (model/infer/unmasking.py)
    qk_norm: bool = False
    qkv_bias: bool = False
    tie: bool = False
    shift: bool = False
    rope_theta: float = 1e6
    spm: bool = False  # suffix-prefix-middle prompt (Stable-DiffCoder), else the chat template's order
    moe: MoeSpec | None = None  # routed experts (LLaDA2, model/infer/hf/moe.py)
    rotary_dim: int = 0  # a partial rotary's rotated dims (LLaDA2); 0: the whole head


def _rule(family: str) -> Callable:
    """Block size -> ``family``'s per-block rule, read when a decode starts (model/infer/plan.py)."""

    def rule(b: int):
        from editserver.model.infer.plan import BLOCK_RULES

        return dataclasses.replace(BLOCK_RULES[family](b), threshold=2.0)  # one token a step (docstring)

    return rule


_sdar_rule, _fast_rule = _rule("sdar"), _rule("fast-dllm-v2")


_QWEN25_7B = OpShapes(3584, 28, 4, 128, 18944, 152_064, 28)
# LLaDA2.0/2.1-mini (inclusionAI/dFactory @92b6890 configs/model_configs/llada2_mini/config.json): 20
# layers, hidden 2048, 16 heads of 128, 4 kv heads, the first layer dense (5120), then 256 experts of
# 512, 8 a token, one shared, sigmoid routing in 8 groups of which 4 are kept; half of each head
# rotated; 32-token blocks and 2.0's rule
LLADA2_MINI = OpShapes(2048, 16, 4, 128, 5120, 157_184, 20, norm_eps=1e-6)
LLADA2_MINI_MOE = llada2.spec(
    {"num_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 512, "routed_scaling_factor": 2.5,
     "n_group": 8, "topk_group": 4, "num_shared_experts": 1, "first_k_dense_replace": 1}
)  # fmt: skip
BLOCK_SHAPES = {
    "fast-dllm-v2-1.5b": BlockShape(
        OpShapes(1536, 12, 2, 128, 8960, 151_936, 28), "fast-dllm-v2", 32, _fast_rule,
        qkv_bias=True, tie=True, shift=True,
    ),
    "fast-dllm-v2-7b": BlockShape(_QWEN25_7B, "fast-dllm-v2", 32, _fast_rule, qkv_bias=True, shift=True),
    "sdar-1.7b": BlockShape(OpShapes(2048, 16, 8, 128, 6144, 151_936, 28), "sdar", 4, _sdar_rule, qk_norm=True),
    "sdar-8b": BlockShape(OpShapes(4096, 32, 8, 128, 12288, 151_936, 36), "sdar", 4, _sdar_rule, qk_norm=True),
    "stable-diffcoder-8b": BlockShape(
        OpShapes(4096, 32, 8, 128, 14336, 155_136, 32), "stable-diffcoder", 4, _rule("stable-diffcoder"),
        rope_theta=5e5, spm=True,
    ),
    "tiny-spm-block": BlockShape(
        OpShapes(64, 4, 2, 16, 128, 512, 2), "stable-diffcoder", 4, _rule("stable-diffcoder"), spm=True
    ),
    "llada2-mini": BlockShape(
        LLADA2_MINI, "llada2", 32, _rule("llada2"), qk_norm=True, moe=LLADA2_MINI_MOE, rotary_dim=64
    ),
    # a tiny block shape for tests: SDAR's options at block 4
    "tiny-block": BlockShape(OpShapes(64, 4, 2, 16, 128, 512, 2), "sdar", 4, _sdar_rule, qk_norm=True),
}  # fmt: skip


def block_model(spec: BlockShape, ops: OpShapes, device: str, dtype):
    """A random ``OpenModel`` of ``spec``'s family options at ``ops``' sizes (``ops``: layers cut)."""
    import torch

    from editserver.model.infer.hf.families import OpenConfig
    from editserver.model.infer.hf.model import OpenModel

    cfg = OpenConfig(
        family=spec.family, vocab_size=ops.vocab_size, dim=ops.dim, n_layers=ops.n_layers,
        n_heads=ops.n_heads, n_kv_heads=ops.n_kv_heads, head_dim=ops.head_dim, ffn_dim=ops.ffn_dim,
        rope_theta=spec.rope_theta, norm_eps=ops.norm_eps, qkv_bias=spec.qkv_bias,
        tie_embeddings=spec.tie, max_position_embeddings=32768, shift=spec.shift,
        mask_id=ops.vocab_size - 1, max_seq_len=32768, qk_norm=spec.qk_norm, block_size=spec.block,
        moe=spec.moe, rotary_dim=spec.rotary_dim,
    )  # fmt: skip
    torch.manual_seed(0)
    with torch.device(device):
        model = OpenModel(cfg)
    return model.to(dtype).eval()


def decode_ms(
    model,
    batch: int,
    args,
    device: str,
    store=None,
    canvas: int | None = None,
    typed: int = 0,
    rule=None,
    spm: bool = False,
) -> tuple[float, int]:
    """(wall ms, steps) of one decode of ``batch`` rows of ``canvas`` tokens (default ``args.canvas``),
    the context's prefill included, whose prefix ends in ``typed`` more tokens; block shapes on the
    block cache with ``rule`` (suffix first with ``spm``; module docstring), the others in place on
    the dual cache."""
    import torch

    from editserver.model.infer.block_cache import BlockCache
    from editserver.model.infer.cache import DualCache, Rows
    from editserver.model.infer.loop_types import Member, Tokens
    from editserver.model.infer.plan import DecodePlan
    from editserver.model.infer.sampler import Decode
    from editserver.model.infer.unmasking import TopKRule

    V, b = model.cfg.vocab_size, model.cfg.block_size
    g = torch.Generator().manual_seed(batch)
    pre = torch.randint(0, V - 2, (batch, args.context), generator=g)
    suf = torch.randint(0, V - 2, (batch, args.suffix), generator=g)
    pre = torch.cat([pre, torch.arange(typed).expand(batch, typed) % (V - 2)], dim=1)  # [B, P]
    canvas = canvas or args.canvas
    if b:  # the whole file in the prompt, the canvas on the block grid
        ctx = torch.cat([suf, pre] if spm else [pre, suf], dim=1).to(device)  # [B, P + S]
        rows = Rows(ctx, torch.full((batch,), ctx.shape[1], device=device))
        plan = DecodePlan("line", "bench", rule or TopKRule(1), b, BlockCache(store=store), fixed_canvas=True)
        lead = ctx.shape[1] % b
    else:
        rows = Rows(
            pre.to(device), torch.full((batch,), pre.shape[1], device=device), None, None, suf.to(device),
            torch.full((batch,), args.suffix, device=device),
        )  # fmt: skip
        plan = DecodePlan("fim", "bench", TopKRule(1), canvas, DualCache(store=store))
        lead = 0
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    # end-of-text is never proposed (suppressed), so every decode takes ``canvas`` steps
    d = Decode(model, plan, Tokens(V - 1, V - 2, (V - 2,)))
    m = Member(rows, canvas, lead=lead)
    d.join(m)
    d.run()
    if device == "cuda":
        torch.cuda.synchronize()
    return 1000 * (time.perf_counter() - t0), m.result.steps
