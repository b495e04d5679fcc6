"""Triton attention under block diffusion's block-causal mask: the kernel against its references, and
an SDAR-shaped block decode with the Triton backend against the PyTorch one.

The masks are the model's own (model/infer/hf/model.py ``block_causal``, bool [B, 1, Lq, Lk]): the
prefill's (``encode``: one key segment, block-causal and key padding) and a step's (``encode_span``:
the cached keys of finished blocks, all visible, then the span's own, block-causal, each query seeing
itself). Under the interpreter (CPU) the shapes are tiny; the ``gpu`` case runs SDAR-1.7B's widths
(16/8 heads, head dim 128, hidden 2048) compiled.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from editserver.kernels.attention import attention, attention_reference
from editserver.kernels.reference import attention_sdpa
from editserver.model.infer import ops
from editserver.model.infer.hf.model import block_causal
from tests.kernels.conftest import assert_close


@pytest.fixture(autouse=True)
def _restore_backend():
    yield
    ops.set_backend("auto")


def _qkv(B, H, Hkv, Lq, Lk, D, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, Lq, D, generator=g).to(device)
    k, v = (torch.randn(B, Hkv, Lk, D, generator=g).to(device) for _ in range(2))
    return q, k, v


@pytest.mark.parametrize("splits", [1, 3])
def test_prefill_mask_block_causal_with_padding(device, splits):
    """``encode``'s mask: block-causal over 23 positions (block 4) and a shorter row's padding keys."""
    B, L, b = 2, 23, 4
    q, k, v = _qkv(B, 4, 2, L, L, 16, device)
    pos = torch.arange(L, device=device).expand(B, L)
    valid = pos < torch.tensor([[L], [14]], device=device)  # [B, L]
    mask = block_causal(pos, pos, b) & valid[:, None, None, :]  # [B, 1, L, L]
    out = attention(q, k, v, mask=mask, num_splits=splits)
    assert_close(out, attention_reference(q, k, v, mask=mask), torch.float32)
    assert_close(out, attention_sdpa(q, k, v, mask=mask), torch.float32)  # the model's PyTorch path


@pytest.mark.parametrize("splits", [1, 2])
def test_step_mask_over_cached_blocks_and_the_span(device, splits):
    """``encode_span``'s mask with ``past=``: 20 cached keys (a row with only 12 real), then an
    8-position span two blocks wide whose second block is padding past one row's canvas."""
    B, La, n, b = 2, 20, 8, 4
    q, k2, v2 = _qkv(B, 6, 2, n, n, 16, device, seed=1)
    _, k, v = _qkv(B, 6, 2, n, La, 16, device, seed=2)
    pos = 20 + torch.arange(n, device=device).expand(B, n)  # [B, n]
    fresh = torch.arange(n, device=device)[None, :] < torch.tensor([[n], [5]], device=device)  # [B, n]
    cached = torch.arange(La, device=device)[None, :] < torch.tensor([[La], [12]], device=device)  # [B, La]
    own = block_causal(pos, pos, b) & fresh[:, None, None, :]  # [B, 1, n, n]
    own = own | torch.eye(n, dtype=torch.bool, device=device)
    mask = torch.cat([cached[:, None, None, :].expand(-1, 1, n, La), own], dim=3)  # [B, 1, n, La + n]
    out = attention(q, k, v, k2, v2, mask=mask, num_splits=splits)
    assert_close(out, attention_reference(q, k, v, k2, v2, mask=mask), torch.float32)
    assert_close(out, attention_sdpa(q, k, v, k2, v2, mask=mask), torch.float32)
    # through the model's dispatch, as ``SelfAttention`` calls it
    ops.set_backend("triton")
    assert_close(ops.attention(q, k2, v2, mask, past=(k, v)), out, torch.float32)


def _block_decode(model, ctx: torch.Tensor, lens: torch.Tensor, canvas: int, rule):
    """Tokens and confidences of one decode on the block cache (rows of one lead: lens % block equal)."""
    from editserver.model.infer.block_cache import BlockCache
    from editserver.model.infer.cache import Rows
    from editserver.model.infer.loop_types import Member, Tokens
    from editserver.model.infer.plan import DecodePlan
    from editserver.model.infer.sampler import Decode

    b, V = model.cfg.block_size, model.cfg.vocab_size
    plan = DecodePlan("fim", "t", rule, b, BlockCache(), fixed_canvas=True)
    d = Decode(model, plan, Tokens(V - 1, V - 2, ()))
    m = Member(Rows(ctx, lens), canvas, lead=int(lens[0]) % b)
    d.join(m)
    d.run()
    return m.result


def _both_backends(model, ctx, lens, canvas, rule):
    out = []
    for backend in ("torch", "triton"):
        ops.set_backend(backend)
        with torch.no_grad():
            logits = model(ctx, lens)  # [B, L, V] the prefill's block-causal mask with padding
        out.append((logits, _block_decode(model, ctx, lens, canvas, rule)))
    return out


@pytest.mark.parametrize("shape", ["sdar", "fast-dllm-v2"])
def test_block_decode_triton_equals_torch(device, shape):
    """A tiny SDAR-shaped (q/k norms, block 4) and Fast-dLLM-v2-shaped (biases, shifted logits, block
    32, sub-blocks of 8) decode: the same tokens with Triton as with PyTorch, logits close."""
    from editserver.bench._step_shapes import BLOCK_SHAPES, block_model

    spec = BLOCK_SHAPES["tiny-block"]
    if shape == "fast-dllm-v2":
        spec = dataclasses.replace(BLOCK_SHAPES["fast-dllm-v2-1.5b"], ops=spec.ops, block=8)
    model = block_model(spec, spec.ops, device, torch.float32)
    g = torch.Generator().manual_seed(3)
    ctx = torch.randint(0, 500, (2, 13), generator=g).to(device)
    lens = torch.tensor([13, 5], device=device)  # one lead (13 % 4 == 5 % 4 == 1): padding in row 1
    (l_ref, ref), (l_got, got) = _both_backends(model, ctx, lens, 7, spec.rule(spec.block))
    torch.testing.assert_close(l_got[0], l_ref[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(l_got[1, :5], l_ref[1, :5], atol=1e-4, rtol=1e-4)
    assert torch.equal(got.tokens, ref.tokens) and got.steps == ref.steps
    assert_close(got.confidences, ref.confidences, torch.float32)


@pytest.mark.gpu
def test_sdar_shaped_block_decode_on_cuda():
    """SDAR-1.7B's widths (two layers, a 4096-token vocabulary) compiled on CUDA: fp32 tokens equal
    and logits close; bf16 logits close at bf16's tolerance."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from editserver.bench._step_shapes import BLOCK_SHAPES, block_model

    spec = BLOCK_SHAPES["sdar-1.7b"]
    small = dataclasses.replace(spec.ops, n_layers=2, vocab_size=4096)
    g = torch.Generator().manual_seed(4)
    ctx = torch.randint(0, 4000, (3, 301), generator=g).cuda()
    lens = torch.tensor([301, 177, 9], device="cuda")  # one lead (1), unequal padding
    model = block_model(spec, small, "cuda", torch.float32)
    (l_ref, ref), (l_got, got) = _both_backends(model, ctx, lens, 16, spec.rule(spec.block))
    for row, n in enumerate(lens.tolist()):
        torch.testing.assert_close(l_got[row, :n], l_ref[row, :n], atol=2e-3, rtol=2e-3)
    assert torch.equal(got.tokens, ref.tokens) and got.steps == ref.steps
    model = model.to(torch.bfloat16)
    (l_ref, _), (l_got, _) = _both_backends(model, ctx, lens, 16, spec.rule(spec.block))
    for row, n in enumerate(lens.tolist()):
        torch.testing.assert_close(l_got[row, :n].float(), l_ref[row, :n].float(), atol=6e-2, rtol=6e-2)
