"""Every kernel against its reference at the shapes of open-weight diffusion models of 0.5B-8B.

Shapes (heads / kv heads, head dim, hidden, FFN, vocabulary): Qwen2-0.5B 14/2, 64, 896, 4864, 151,936;
Qwen2-7B and Dream-7B 28/4, 128, 3584, 18944; LLaDA-8B 32/32, 128, 4096, 12288, 126,464. Under the
interpreter the widths and head counts are the real ones while rows, lengths and batch stay small and
odd (odd query/context lengths, rows of unequal ``kv_lens`` in one batch, far rotary positions), so
each case runs in seconds. The ``gpu`` tests at the end run the same ops compiled, in bf16, at a
denoising step's real sizes (64-token canvas, contexts up to 4096) with the tolerances stated there.
"""

from __future__ import annotations

import pytest
import torch

from editserver.kernels.attention import attention, attention_reference
from editserver.kernels.rmsnorm import rmsnorm, rmsnorm_reference
from editserver.kernels.rotary import rotary, rotary_reference
from editserver.kernels.swiglu import swiglu, swiglu_reference
from editserver.kernels.token_confidence import token_confidence, token_confidence_reference
from tests.kernels.conftest import assert_close

# name: (query heads, kv heads, head dim, hidden, ffn, vocabulary)
SHAPES = {
    "qwen2-0.5b": (14, 2, 64, 896, 4864, 151_936),
    "qwen2-7b": (28, 4, 128, 3584, 18944, 151_936),
    "llada-8b": (32, 32, 128, 4096, 12288, 126_464),
}
BIG = ["qwen2-7b", "llada-8b"]  # head dim 128: the interpreter cases that matter most
DTYPES = [pytest.param(torch.float32, id="fp32"), pytest.param(torch.bfloat16, id="bf16")]


def _randn(*shape, dtype, device, gen, scale=1.0):
    return (torch.randn(*shape, generator=gen) * scale).to(dtype=dtype, device=device)


def _tables(B, L, D, device, offsets):
    """cos/sin [B, L, D/2] with base 1e6 (Qwen2's rope theta), row b starting at position offsets[b]."""
    pos = torch.arange(L)[None, :] + torch.tensor(offsets)[:, None]  # [B, L]
    inv = 1.0 / (1e6 ** (torch.arange(0, D, 2).float() / D))
    ang = pos.float()[..., None] * inv  # [B, L, D/2]
    return ang.cos().to(device), ang.sin().to(device)


def _check_confidence(logits, penalty, tok, prob, margin):
    """The kernel's token holds the row's maximum (ties may pick either index on a GPU), and its
    probability and margin match the reference in fp32."""
    _, prob_r, margin_r = token_confidence_reference(logits, penalty, want_margin=True)
    lf = logits.float() - (penalty[:, None, :] if penalty is not None else 0.0)
    assert torch.equal(lf.gather(-1, tok[..., None]).squeeze(-1), lf.max(-1).values)
    assert_close(prob, prob_r, torch.float32)
    assert_close(margin, margin_r, torch.float32)


# ---- attention ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", BIG + ["qwen2-0.5b"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_denoising_step(device, name, dtype):
    """A block of 13 queries against cached contexts of unequal real length (45, 22, 1) plus the
    block's own keys: the call a denoising step makes, grouped-query packing at the model's ratio."""
    H, Hkv, D = SHAPES[name][:3]
    g = torch.Generator().manual_seed(0)
    B, Lq, La = 3, 13, 45
    q = _randn(B, Lq, H, D, dtype=dtype, device=device, gen=g).transpose(1, 2)  # [B, H, Lq, D] view
    k, v = (_randn(B, Hkv, La, D, dtype=dtype, device=device, gen=g) for _ in range(2))
    k2, v2 = (_randn(B, Hkv, Lq, D, dtype=dtype, device=device, gen=g) for _ in range(2))
    kv_lens = torch.tensor([45, 22, 1], device=device)
    out = attention(q, k, v, k2, v2, kv_lens)
    assert out.shape == (B, H, Lq, D) and out.dtype == dtype
    assert_close(out, attention_reference(q, k, v, k2, v2, kv_lens), dtype)


@pytest.mark.parametrize("name", BIG)
def test_attention_split_kv_and_context_pass(device, name):
    """Split-KV over a longer context (3 splits, uneven rows), and the context pass itself: queries
    over their own padded keys, no block segment."""
    H, Hkv, D = SHAPES[name][:3]
    g = torch.Generator().manual_seed(1)
    q = _randn(2, H, 5, D, dtype=torch.float32, device=device, gen=g)
    k, v = (_randn(2, Hkv, 131, D, dtype=torch.float32, device=device, gen=g) for _ in range(2))
    k2, v2 = (_randn(2, Hkv, 5, D, dtype=torch.float32, device=device, gen=g) for _ in range(2))
    lens = torch.tensor([131, 70], device=device)
    ref = attention_reference(q, k, v, k2, v2, lens)
    assert_close(attention(q, k, v, k2, v2, lens, num_splits=3), ref, torch.float32)
    qc = _randn(2, H, 19, D, dtype=torch.float32, device=device, gen=g)
    kc, vc = k[:, :, :19], v[:, :, :19]
    lc = torch.tensor([19, 8], device=device)
    assert_close(
        attention(qc, kc, vc, kv_lens=lc), attention_reference(qc, kc, vc, kv_lens=lc), torch.float32
    )


# ---- rotary ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", BIG + ["qwen2-0.5b"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_rotary_head_dim_128(device, name, dtype):
    """q/k as views of one fused projection [B, L, (H + 2 Hkv) D], rows at far-apart positions."""
    H, Hkv, D = SHAPES[name][:3]
    B, L = 2, 11
    g = torch.Generator().manual_seed(2)
    proj = _randn(B, L, (H + 2 * Hkv) * D, dtype=dtype, device=device, gen=g)
    q = proj[..., : H * D].view(B, L, H, D)  # strided rows
    k = proj[..., H * D : (H + Hkv) * D].view(B, L, Hkv, D)
    cos, sin = _tables(B, L, D, device, offsets=[0, 30_001])
    q_ref, k_ref = rotary_reference(q, k, cos, sin)
    rotary(q, k, cos, sin)
    assert_close(q, q_ref, dtype)
    assert_close(k, k_ref, dtype)


# ---- rmsnorm / swiglu --------------------------------------------------------------------------
@pytest.mark.parametrize("rows,name", [(3, "qwen2-7b"), (2, "llada-8b"), (5, "qwen2-0.5b")])
@pytest.mark.parametrize("dtype", DTYPES)
def test_rmsnorm_model_widths(device, rows, name, dtype):
    N = SHAPES[name][3]
    g = torch.Generator().manual_seed(3)
    x, h = (_randn(1, rows, N, dtype=dtype, device=device, gen=g, scale=3.0) for _ in range(2))
    w = (torch.rand(N, generator=g) + 0.5).to(dtype=dtype, device=device)
    assert_close(rmsnorm(x, w, 1e-6), rmsnorm_reference(x, w, 1e-6), dtype)
    y, s = rmsnorm(x, w, 1e-6, residual=h)
    y_ref, s_ref = rmsnorm_reference(x, w, 1e-6, residual=h)
    assert_close(s, s_ref, dtype)
    assert_close(y, y_ref, dtype)


@pytest.mark.parametrize("rows,name", [(3, "qwen2-7b"), (2, "llada-8b"), (5, "qwen2-0.5b")])
@pytest.mark.parametrize("dtype", DTYPES)
def test_swiglu_ffn_widths(device, rows, name, dtype):
    F_ = SHAPES[name][4]
    g = torch.Generator().manual_seed(4)
    base = _randn(rows, 2 * F_, dtype=dtype, device=device, gen=g, scale=4.0)
    gate, up = base[:, :F_], base[:, F_:]  # halves of one fused gate/up projection
    out = swiglu(gate, up)
    assert out.shape == (rows, F_)
    assert_close(out, swiglu_reference(gate, up), dtype)


# ---- token confidence --------------------------------------------------------------------------
@pytest.mark.parametrize("V", [151_936, 126_464])
@pytest.mark.parametrize("dtype", DTYPES)
def test_token_confidence_full_vocabulary(device, V, dtype):
    g = torch.Generator().manual_seed(5)
    logits = _randn(2, 3, V, dtype=dtype, device=device, gen=g, scale=4.0)  # [B, n, V]
    logits[0, 1, V - 1] = 40.0  # a winner in the last, partial chunk
    penalty = torch.zeros(2, V)
    penalty[1, torch.randint(0, V, (500,), generator=g)] = float("inf")  # suppressed ids
    penalty[1] += 0.25
    penalty = penalty.to(device)
    tok, prob, margin = token_confidence(logits, penalty, want_margin=True)
    assert tok.shape == (2, 3) and tok[0, 1].item() == V - 1
    _check_confidence(logits, penalty, tok, prob, margin)


def test_token_confidence_sampling_probability_is_exact(device):
    """Tempered Gumbel-max at the full vocabulary: the reported probability is the drawn token's."""
    V, T = 151_936, 0.7
    g = torch.Generator().manual_seed(6)
    logits = _randn(3, V, dtype=torch.float32, device=device, gen=g, scale=3.0)
    tok, prob, _ = token_confidence(logits, temperature=T, seed=11)
    p = torch.softmax(logits / T, dim=-1)  # [3, V]
    assert_close(prob, p.gather(-1, tok[:, None]).squeeze(-1), torch.float32)


# ---- compiled, bf16, a denoising step's real sizes --------------------------------------------
# Tolerances: outputs in bf16 within atol = rtol = 3e-2 (about 4 bf16 ulps: the kernels accumulate in
# fp32 but round P to bf16 before the PV product); token probabilities and margins in fp32 within
# 2e-5 (computed in fp32 from the same bf16 logits); tokens by value (ties may resolve either way).
GPU_TOL = dict(atol=3e-2, rtol=3e-2)


def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    return "cuda"


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["qwen2-0.5b", "qwen2-7b", "llada-8b"])
def test_open_weight_shapes_bf16_cuda(name):
    dev, bf = _cuda(), torch.bfloat16
    H, Hkv, D, hidden, ffn, V = SHAPES[name]
    g = torch.Generator().manual_seed(7)
    B, N, La = 4, 64, 4096
    q = _randn(B, N, H, D, dtype=bf, device=dev, gen=g).transpose(1, 2)  # [B, H, N, D]
    k, v = (_randn(B, Hkv, La, D, dtype=bf, device=dev, gen=g) for _ in range(2))
    k2, v2 = (_randn(B, Hkv, N, D, dtype=bf, device=dev, gen=g) for _ in range(2))
    lens = torch.tensor([4096, 1000, 37, 2501], device=dev)
    ref = attention_reference(q, k, v, k2, v2, lens)
    torch.testing.assert_close(attention(q, k, v, k2, v2, lens).float(), ref.float(), **GPU_TOL)
    qc = _randn(B, H, 512, D, dtype=bf, device=dev, gen=g)  # a context pass of 512 tokens
    kc, vc, lc = k[:, :, :512], v[:, :, :512], torch.tensor([512, 300, 37, 511], device=dev)
    ref_c = attention_reference(qc, kc, vc, kv_lens=lc)
    torch.testing.assert_close(attention(qc, kc, vc, kv_lens=lc).float(), ref_c.float(), **GPU_TOL)

    proj = _randn(B, N, (H + 2 * Hkv) * D, dtype=bf, device=dev, gen=g)
    qr, kr = proj[..., : H * D].view(B, N, H, D), proj[..., H * D : (H + Hkv) * D].view(B, N, Hkv, D)
    cos, sin = _tables(B, N, D, dev, offsets=[0, 4096, 1000, 30_001])
    q_ref, k_ref = rotary_reference(qr, kr, cos, sin)
    rotary(qr, kr, cos, sin)
    torch.testing.assert_close(qr.float(), q_ref.float(), **GPU_TOL)
    torch.testing.assert_close(kr.float(), k_ref.float(), **GPU_TOL)

    x, h = (_randn(B * N, hidden, dtype=bf, device=dev, gen=g, scale=3.0) for _ in range(2))
    w = (torch.rand(hidden, generator=g) + 0.5).to(dtype=bf, device=dev)
    y, s = rmsnorm(x, w, 1e-6, residual=h)
    y_ref, s_ref = rmsnorm_reference(x, w, 1e-6, residual=h)
    torch.testing.assert_close(s.float(), s_ref.float(), **GPU_TOL)
    torch.testing.assert_close(y.float(), y_ref.float(), **GPU_TOL)

    gu = _randn(B * N, 2 * ffn, dtype=bf, device=dev, gen=g, scale=4.0)
    gate, up = gu[:, :ffn], gu[:, ffn:]
    torch.testing.assert_close(swiglu(gate, up).float(), swiglu_reference(gate, up).float(), **GPU_TOL)

    logits = _randn(B, N, V, dtype=bf, device=dev, gen=g, scale=4.0)
    penalty = torch.zeros(B, V, device=dev)
    penalty[:, :100] = float("inf")
    tok, prob, margin = token_confidence(logits, penalty, want_margin=True)
    _check_confidence(logits, penalty, tok, prob, margin)
