"""Token-confidence kernel: argmax, softmax max and top-2 margin in one pass vs the PyTorch reference;
penalties (including +inf), ties, several vocabulary chunks; Gumbel-max sampling in law."""

from __future__ import annotations

import pytest
import torch

from editserver.kernels.token_confidence import token_confidence, token_confidence_reference
from tests.kernels.conftest import assert_close


@pytest.mark.parametrize("V", [1, 7, 33, 1000, 9000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_greedy_matches_reference(device, V, dtype):
    logits = (torch.randn(3, 5, V) * 4).to(dtype=dtype, device=device)
    tok, prob, margin = token_confidence(logits, want_margin=True)
    tok_r, prob_r, margin_r = token_confidence_reference(logits, want_margin=True)
    assert tok.shape == prob.shape == margin.shape == (3, 5)
    assert torch.equal(tok, tok_r)
    # probabilities come from fp32 math on the (exact) low-precision logits: fp32 tolerance
    assert_close(prob, prob_r, torch.float32)
    assert_close(margin, margin_r, torch.float32)


def test_penalty_per_request_row(device):
    """penalty [B, V] applies to every position of its row; +inf forbids a token outright."""
    B, n, V = 2, 4, 300
    logits = torch.randn(B, n, V, device=device)
    logits[:, :, 7] = 50.0  # the unpenalised winner everywhere
    penalty = torch.zeros(B, V, device=device)
    penalty[0, 7] = float("inf")
    penalty[1, :] = 0.5
    tok, prob, margin = token_confidence(logits, penalty, want_margin=True)
    tok_r, prob_r, margin_r = token_confidence_reference(logits, penalty, want_margin=True)
    assert torch.equal(tok, tok_r)
    assert (tok[0] != 7).all() and (tok[1] == 7).all()
    assert_close(prob, prob_r, torch.float32)
    assert_close(margin, margin_r, torch.float32)


def test_ties_pick_the_first_index_across_chunks(device):
    V = 9000  # more than one 4096-wide chunk
    logits = torch.zeros(3, V, device=device)
    logits[0, [10, 5000, 8999]] = 3.0
    logits[1, [4096, 4097]] = 3.0
    logits[2, [8999]] = 3.0
    tok, prob, margin = token_confidence(logits, want_margin=True)
    assert tok.tolist() == [10, 4096, 8999]
    assert margin[0].item() == pytest.approx(0.0, abs=1e-7) and margin[1].item() == pytest.approx(
        0.0, abs=1e-7
    )
    assert_close(prob, token_confidence_reference(logits)[1], torch.float32)


def test_flat_rows_with_their_own_penalty(device):
    logits = torch.randn(6, 50, device=device)
    penalty = torch.rand(6, 50, device=device)
    tok, prob, _ = token_confidence(logits, penalty)
    tok_r, prob_r, _ = token_confidence_reference(logits, penalty)
    assert torch.equal(tok, tok_r)
    assert_close(prob, prob_r, torch.float32)


def test_sampling_follows_the_tempered_distribution(device):
    """Gumbel-max draws agree in law with softmax(l / T); the reported probability is exact."""
    V, rows, T = 6, 300, 0.8  # the interpreter draws ~100 rows/s: enough to tell law from argmax
    base = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, 0.3], device=device)
    logits = base.expand(rows, V).contiguous()
    penalty = torch.zeros(rows, V, device=device)
    penalty[:, 3] = float("inf")  # never drawn
    tok, prob, _ = token_confidence(logits, penalty, temperature=T, seed=1234)
    p = torch.softmax((base - penalty[0]) / T, dim=-1)
    assert_close(prob, p[tok], torch.float32)
    counts = torch.bincount(tok.cpu(), minlength=V).float()
    expected = p.cpu() * rows
    assert counts[3] == 0
    sigma = (expected * (1 - p.cpu())).sqrt()
    assert ((counts - expected).abs() <= 5 * sigma + 1).all(), (counts, expected)
    again, _, _ = token_confidence(logits[:40], penalty[:40], temperature=T, seed=1234)
    assert torch.equal(tok[:40], again)  # the seed fixes the draw (per row: rows are independent)
    other, _, _ = token_confidence(logits[:40], penalty[:40], temperature=T, seed=99)
    assert not torch.equal(tok[:40], other)


def test_seed_drawn_from_generator_is_reproducible(device):
    logits = torch.randn(4, 3, 40, device=device)
    a = token_confidence(logits, temperature=1.0, generator=torch.Generator().manual_seed(5))[0]
    b = token_confidence(logits, temperature=1.0, generator=torch.Generator().manual_seed(5))[0]
    assert torch.equal(a, b)


def test_bad_penalty_is_rejected(device):
    with pytest.raises(ValueError, match="penalty"):
        token_confidence(torch.randn(2, 3, 10, device=device), torch.zeros(3, 10, device=device))


def test_block_slice_of_canvas_logits_is_read_in_place(device):
    """The sampler passes logits[:, block] of a whole-canvas tensor: strided rows, no copy needed."""
    canvas = torch.randn(3, 20, 77, device=device)
    block = canvas[:, 4:12]  # [3, 8, 77], row stride 20 * 77
    penalty = torch.rand(3, 77, device=device)
    tok, prob, margin = token_confidence(block, penalty, want_margin=True)
    tok_r, prob_r, margin_r = token_confidence_reference(block, penalty, want_margin=True)
    assert torch.equal(tok, tok_r)
    assert_close(prob, prob_r, torch.float32)
    assert_close(margin, margin_r, torch.float32)
