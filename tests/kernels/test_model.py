"""The model through ``model.infer.ops``: the Triton path gives the PyTorch path's logits and tokens (tiny
config, interpreter on CPU), and the dispatch itself (override, autograd guard, no Triton on CPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from editserver.model.infer import ops
from editserver.model.infer.config import PRESETS, ModelConfig
from editserver.model.infer.transformer import Transformer
from editserver.model.infer.unmasking import TopKRule
from tests.helpers import denoise
from tests.kernels.conftest import assert_close

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _restore_backend():
    yield
    ops.set_backend("auto")


@pytest.fixture
def tiny(device) -> Transformer:
    torch.manual_seed(0)
    cfg = ModelConfig.from_dict({**PRESETS["tiny"].to_dict(), "vocab_size": 300})
    return Transformer(cfg).eval().to(device)


def _both(fn):
    ops.set_backend("torch")
    ref = fn()
    ops.set_backend("triton")
    got = fn()
    return ref, got


def test_cached_context_and_canvas_logits_match(tiny, device):
    ids = torch.randint(0, 300, (3, 21), device=device)
    lens = torch.tensor([21, 9, 14], device=device)  # right-padded rows of unequal length
    canvas = torch.randint(0, 300, (3, 8), device=device)

    def run():
        cache = tiny.encode_context(ids, lens)
        return cache, tiny.forward_canvas(canvas, cache)

    (c_ref, l_ref), (c_got, l_got) = _both(run)
    for got, ref in zip(c_got.keys + c_got.values, c_ref.keys + c_ref.values):
        for row, length in enumerate([21, 9, 14]):  # padding keys are never read: compare real ones
            assert_close(got[row, :, :length], ref[row, :, :length], torch.float32)
    assert l_got.shape == (3, 8, 300)
    torch.testing.assert_close(l_got, l_ref, atol=1e-4, rtol=1e-4)


def test_full_forward_with_context_mask_matches(tiny, device):
    """The generic path: a dense context-isolation mask plus key padding, as training builds it."""
    ids = torch.randint(0, 300, (2, 19), device=device)
    ctx, seq = torch.tensor([7, 0], device=device), torch.tensor([19, 12], device=device)
    with torch.no_grad():
        ref, got = _both(lambda: tiny(ids, context_lens=ctx, seq_lens=seq))
    torch.testing.assert_close(got[0], ref[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got[1, :12], ref[1, :12], atol=1e-4, rtol=1e-4)


def test_denoising_gives_the_same_tokens(tiny, device):
    ctx = torch.randint(3, 300, (2, 12), device=device)
    lens = torch.tensor([12, 8], device=device)

    def run():
        return denoise(tiny, ctx, lens, 8, mask_id=1, eot_id=2, block_size=4, rule=TopKRule(2))

    ref, got = _both(run)
    assert torch.equal(got.tokens, ref.tokens)
    assert got.steps == ref.steps
    assert_close(got.confidences, ref.confidences, torch.float32)


def test_torch_forms_equal_the_kernel_references():
    from editserver.kernels.attention import attention_reference
    from editserver.kernels.rmsnorm import rmsnorm_reference
    from editserver.kernels.rotary import rotary_reference
    from editserver.kernels.swiglu import swiglu_reference
    from editserver.kernels.token_confidence import token_confidence_reference

    ops.set_backend("torch")
    x, h, w = torch.randn(2, 5, 64), torch.randn(2, 5, 64), torch.rand(64)
    assert torch.equal(ops.rmsnorm(x, w, 1e-6), rmsnorm_reference(x, w, 1e-6))
    s, y = ops.add_rmsnorm(x, h, w, 1e-6)
    y_ref, s_ref = rmsnorm_reference(x, w, 1e-6, residual=h)
    assert torch.equal(s, s_ref) and torch.equal(y, y_ref)
    q, k = torch.randn(2, 5, 4, 16), torch.randn(2, 5, 2, 16)
    cos, sin = torch.rand(2, 5, 8), torch.rand(2, 5, 8)
    for a, b in zip(ops.rotary(q, k, cos, sin), rotary_reference(q, k, cos, sin)):
        assert torch.equal(a, b)
    assert torch.equal(ops.swiglu(x, h), swiglu_reference(x, h))
    logits, pen = torch.randn(2, 3, 50), torch.rand(2, 50)
    for a, b in zip(
        ops.token_confidence(logits, pen, want_margin=True),
        token_confidence_reference(logits, pen, want_margin=True),
    ):
        assert torch.equal(a, b)
    # attention's PyTorch form is SDPA, not the explicit-math oracle: equal within fp32 rounding
    qa, ka, va = torch.randn(2, 4, 6, 16), torch.randn(2, 2, 6, 16), torch.randn(2, 2, 6, 16)
    pk, pv, lens = torch.randn(2, 2, 9, 16), torch.randn(2, 2, 9, 16), torch.tensor([9, 4])
    got = ops.attention(qa, ka, va, past=(pk, pv), kv_lens=lens)
    assert_close(got, attention_reference(qa, pk, pv, ka, va, kv_lens=lens), torch.float32)


def test_backend_override_is_validated():
    with pytest.raises(ValueError, match="backend"):
        ops.set_backend("cuda")
    ops.set_backend("torch")
    assert ops.get_backend() == "torch" and not ops.use_triton(torch.zeros(1))


def test_forced_triton_refuses_autograd(tiny, device):
    ops.set_backend("triton")
    ids = torch.randint(0, 300, (1, 6), device=device)
    with pytest.raises(RuntimeError, match="forward-only"):
        tiny(ids)


def test_auto_on_cpu_never_imports_triton():
    """A CPU machine without Triton runs the model: "auto" takes the PyTorch forms and imports nothing."""
    code = (
        "import sys; sys.modules['triton'] = None\n"  # any `import triton` now fails
        "import torch\n"
        "from editserver.model.infer.config import PRESETS\n"
        "from editserver.model.infer.transformer import Transformer\n"
        "from editserver.model.infer import ops\n"
        "m = Transformer(PRESETS['tiny']).eval()\n"
        "c = m.encode_context(torch.randint(0, 100, (2, 9)), torch.tensor([9, 4]))\n"
        "logits = m.forward_canvas(torch.randint(0, 100, (2, 4)), c)\n"
        "tok, p, _ = ops.token_confidence(logits)\n"
        "loaded = {k for k in sys.modules if k.startswith('editserver.kernels.')}\n"
        "assert ops.get_backend() == 'auto' and loaded == {'editserver.kernels.reference'}, loaded\n"
        "print('ok', tuple(tok.shape))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["OMP_NUM_THREADS"] = "1"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok (2, 4)"


@pytest.mark.gpu
def test_bf16_model_on_cuda_auto_uses_triton(device):
    if device != "cuda":
        pytest.skip("CUDA only")
    torch.manual_seed(0)
    cfg = ModelConfig.from_dict({**PRESETS["small"].to_dict(), "vocab_size": 1000})
    model = Transformer(cfg).eval().to(device, torch.bfloat16)
    ids = torch.randint(0, 1000, (4, 300), device=device)
    lens = torch.tensor([300, 120, 7, 250], device=device)
    canvas = torch.randint(0, 1000, (4, 64), device=device)
    with torch.no_grad():
        assert ops.use_triton(ids.float()) and ops.get_backend() == "auto"
        got = model.forward_canvas(canvas, model.encode_context(ids, lens))
        ops.set_backend("torch")
        ref = model.forward_canvas(canvas, model.encode_context(ids, lens))
    torch.testing.assert_close(got.float(), ref.float(), atol=0.15, rtol=0.05)


@pytest.mark.gpu
def test_tempered_sampling_on_cuda_is_seeded_and_valid(tiny, device):
    if device != "cuda":
        pytest.skip("CUDA only")
    ctx = torch.randint(3, 300, (2, 12), device=device)
    lens = torch.tensor([12, 8], device=device)

    def run(seed):
        gen = torch.Generator(device=device).manual_seed(seed)
        return denoise(tiny, ctx, lens, 16, mask_id=1, eot_id=2, block_size=8, temperature=0.8,
                       generator=gen)  # fmt: skip

    a, b = run(7), run(7)
    assert torch.equal(a.tokens, b.tokens)  # Gumbel-max seeds come from the request's generator
    assert not (a.tokens == 1).any()  # the mask token is never proposed
    assert ((a.confidences > 0) & (a.confidences <= 1)).all()
