"""CPU weight layouts (model/infer/quant.py). Weight-only int8 and w8a8 (int8 step activations too):
logits close to the unquantized model's on the open fixtures, our own transformer and the shipped
checkpoint; answers through the engine; refusals. oneDNN-packed: the same products up to float rounding, the same answers."""

from __future__ import annotations

import copy

import pytest
import torch

from editserver.model.infer.engine import Engine, FimRequest
from editserver.model.infer.loader import load_checkpoint
from editserver.model.infer.quant import PACKED_MAX_ROWS, Int8Linear, PackedLinear, W8A8Linear, quantize
from tests.hf_models import make_dream, make_llada


def divergence(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """(mean KL(softmax a || softmax b) in nats, share of positions whose argmax agrees); logits [N, V]."""
    a, b = a.detach().float(), b.detach().float()
    la, lb = a.log_softmax(-1), b.log_softmax(-1)
    kl = (la.exp() * (la - lb)).sum(-1).mean()
    return float(kl), float((a.argmax(-1) == b.argmax(-1)).float().mean())


def test_int8_linear_matches_dequantized_weights():
    torch.manual_seed(0)
    lin = torch.nn.Linear(96, 40, bias=True)
    q = Int8Linear(lin)
    x = torch.randn(3, 5, 96)
    ref = torch.nn.functional.linear(x, q.weight, q.bias)  # what the int8 weights mean
    assert torch.allclose(q(x), ref, rtol=0.02, atol=0.02)  # bf16 products (quant.py)
    assert torch.allclose(q(x), lin(x), rtol=0.05, atol=0.02)  # and they are near the originals
    # half a step of rounding, plus the bf16 scale's own rounding (at most half a step more)
    assert (q.weight - lin.weight).abs().max() <= lin.weight.abs().amax(1).max() / 127 + 1e-6


def test_w8a8_linear_is_close_in_a_step_and_weight_only_over_a_context():
    torch.manual_seed(0)
    lin = torch.nn.Linear(96, 40, bias=True)
    q = W8A8Linear(lin)
    assert torch.equal(q.qweight, Int8Linear(lin).qweight)  # the same int8 weights
    step = torch.randn(2, 8, 96)  # a step's block: int8 activations, 7-bit (quant.py)
    ref = torch.nn.functional.linear(step, q.weight, q.bias)
    assert ((q(step) - ref).abs().max() / ref.abs().max()) < 0.05
    assert not torch.allclose(q(step), ref, atol=1e-5)  # the integer kernel ran, not a float one
    context = torch.randn(1, PACKED_MAX_ROWS + 1, 96)  # a context's forward: the dequantized weights
    ref = torch.nn.functional.linear(context, q.weight, q.bias)
    assert torch.allclose(q(context), ref, atol=1e-5)


@pytest.mark.parametrize("how,layer", [("int8", Int8Linear), ("w8a8", W8A8Linear)])
@pytest.mark.parametrize("family", ["dream", "llada"])
def test_open_family_logits_stay_close(family, how, layer, tmp_path):
    make = make_dream if family == "dream" else make_llada
    d, _ = make(tmp_path / "m")
    model = load_checkpoint(d).model
    q = quantize(copy.deepcopy(model), how)
    assert any(isinstance(m, layer) for m in q.modules())
    ids = torch.randint(0, model.cfg.vocab_size - 8, (2, 40), generator=torch.Generator().manual_seed(1))
    kl, agree = divergence(model(ids).flatten(0, 1), q(ids).flatten(0, 1))
    assert kl < 0.01 and agree > 0.9


@pytest.mark.parametrize("how,bound", [("int8", 0.02), ("w8a8", 0.05)])
def test_own_model_logits_stay_close(shipped_checkpoint, how, bound):
    ck = load_checkpoint(shipped_checkpoint)
    q = quantize(copy.deepcopy(ck.model), how)
    ids = torch.tensor([ck.tokenizer.encode("import os\n\ndef list_names(path):\n    return sorted(os.")])
    kl, agree = divergence(ck.model(ids)[0], q(ids)[0])
    assert kl < bound and agree > 0.9


@pytest.mark.parametrize("how", ["int8", "w8a8"])
def test_engine_serves_an_int8_model(tiny_checkpoint, how):
    plain, q = Engine.load(tiny_checkpoint), Engine.load(tiny_checkpoint, quantize=how)
    req = FimRequest("def add(a, b):\n    return ", "\n", max_tokens=6)
    assert isinstance(q.complete(req).text, str) and plain.complete(req).steps > 0


def test_unknown_quantization_is_refused(tiny_checkpoint):
    with pytest.raises(ValueError, match="quantize must be one of"):
        Engine.load(tiny_checkpoint, quantize="int4")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_linear_is_the_same_product(dtype):
    """Packed where oneDNN can pack this dtype here, else the plain layer kept: the same product."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(96, 40, bias=True).to(dtype)
    p = PackedLinear.of(lin)
    assert p is lin or isinstance(p, PackedLinear)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    # a step's block, one row, a strided view, and a context's forward (over PACKED_MAX_ROWS: unpacked)
    for x in (
        torch.randn(3, 5, 96),
        torch.randn(1, 96),
        torch.randn(8, 192)[:, ::2],
        torch.randn(2, 150, 96),
    ):
        x = x.to(dtype)
        assert torch.allclose(p(x).float(), lin(x).float(), rtol=tol, atol=tol)
    assert torch.equal(p.weight, lin.weight)


def test_packed_open_family_logits_match(tmp_path):
    d, _ = make_dream(tmp_path / "m")
    model = load_checkpoint(d).model
    q = quantize(copy.deepcopy(model), "packed")
    assert any(isinstance(m, PackedLinear) for m in q.modules())  # fp32 packs on any x86 oneDNN
    ids = torch.randint(0, model.cfg.vocab_size - 8, (2, 40), generator=torch.Generator().manual_seed(1))
    assert torch.allclose(model(ids), q(ids), atol=1e-4, rtol=1e-4)


def test_engine_serves_a_packed_model_with_the_same_answers(tiny_checkpoint):
    plain, q = Engine.load(tiny_checkpoint), Engine.load(tiny_checkpoint, quantize="packed")
    for req in (
        FimRequest("def add(a, b):\n    return ", "\n", max_tokens=6),
        FimRequest("import os\n\nfor name in os.", "\n", max_tokens=8),
    ):
        a, b = plain.complete(req), q.complete(req)
        assert (a.text, a.steps) == (b.text, b.steps)


@pytest.mark.parametrize("how", ["none", "int8", "packed", "w8a8"])
def test_model_size_is_the_same_in_every_stored_form(tiny_checkpoint, how):
    """/v1/models and the serve banner report the model's size, not how many values it stores: packed
    and int8 layers keep their weights outside ``parameters()`` (once reported as 2.1M of 6.8M)."""
    plain = sum(p.numel() for p in Engine.load(tiny_checkpoint, quantize="none").model.parameters())
    assert Engine.load(tiny_checkpoint, quantize=how).num_parameters == plain
