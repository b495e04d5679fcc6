"""Self-distillation (model/train/distill.py): teacher rows are exactly the engine's one-token-per-step
answers in the training layout, and training takes its batches' share from them."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
import torch

from editserver.model.infer.engine import Engine, FimRequest, SamplingOptions
from editserver.model.train.data import Row, RowBuilder, RowStore
from editserver.model.train.diffusion import diffusion_loss, mask_batch
from editserver.model.train.distill import TEACHER_CANVASES, build_distill_store, fim_texts
from editserver.model.train.loop import TrainConfig, _batch, _mixed_batch, train
from tests.conftest import CORPUS, train_cli


def _corpus(tok, directory, n: int = 24, plain: int = 4) -> RowStore:
    """FIM rows of the test corpus, with a few plain rows the teacher must skip."""
    b = RowBuilder(tok, 256, random.Random(0))
    rows = [r for r in (b.fim("".join(CORPUS[i : i + 6])) for i in range(200)) if r][:n]
    rows += [b.plain(tok.encode(CORPUS[i])) for i in range(plain)]
    RowStore.write(directory, iter(rows), len(rows), 256, tok.eot_id)
    return RowStore(directory)


@pytest.fixture(scope="module")
def shipped_engine(shipped_checkpoint) -> Engine:
    return Engine.load(shipped_checkpoint)


def test_teacher_rows_are_the_sequential_answers(shipped_engine, tmp_path) -> None:
    eng, tok = shipped_engine, shipped_engine.tok
    corpus = _corpus(tok, tmp_path / "corpus")
    # batches of 3: two full ones and a partial one, each decoded together
    store = build_distill_store(eng, corpus, tmp_path / "distill", n_examples=8, seed=3, batch_size=3)
    # the same contexts, asked one by one as the LSP asks for one line, in one-token-per-step mode
    pairs = fim_texts(corpus, tok, random.Random(3))
    want = []
    for prefix, suffix in list(pairs)[:8]:
        assert tok.fim_prefix_id not in tok.encode(prefix)  # plain rows are never asked
        opts = SamplingOptions(sequential=True, stop=["\n"])
        c = eng.complete(FimRequest(prefix, suffix, max_tokens=max(TEACHER_CANVASES), options=opts))
        if c.finish_reason != "stop":
            continue
        answer = tok.encode(c.text + (c.stop_sequence or ""))
        for n in TEACHER_CANVASES:
            if len(answer) < n:  # the answer and at least one end-of-text fit the canvas
                ctx, _ = eng.fim_context(FimRequest(prefix, suffix), n)
                want.append((ctx + answer + [tok.eot_id] * (n - len(answer)), len(ctx)))
    got = [(store.ids[i, : store.meta[i, 1]].tolist(), int(store.meta[i, 0])) for i in range(store.n)]
    assert got == want and len(got) >= 8  # most answers fit both canvases: two rows each
    for ids, c in got:  # a one-line answer: at most one newline, at its end
        text = tok.decode([t for t in ids[c:] if t != tok.eot_id])
        assert "\n" not in text[:-1]


def test_a_corpus_without_fim_rows_is_an_error(shipped_engine, tmp_path) -> None:
    corpus = _corpus(shipped_engine.tok, tmp_path / "corpus", n=0, plain=4)
    with pytest.raises(ValueError, match="no FIM rows"):
        build_distill_store(shipped_engine, corpus, tmp_path / "distill", n_examples=4)


def _tiny_run(tmp_path, tok, distill_rows: list, share: float) -> TrainConfig:
    b = RowBuilder(tok, 256, random.Random(0))
    rows = [r for r in (b.fim("".join(CORPUS[i : i + 6])) for i in range(100)) if r][:24]
    RowStore.write(tmp_path / "data" / "train", iter(rows), len(rows), 256, tok.eot_id)
    tok.save(tmp_path / "data" / "tokenizer.json")
    RowStore.write(tmp_path / "distill", iter(distill_rows), len(distill_rows), 256, tok.eot_id)
    return TrainConfig(
        run_dir=tmp_path / "run",
        data_dir=tmp_path / "data",
        preset="tiny",
        steps=40,
        batch_size=8,
        lr=3e-3,
        eval_every=40,
        warmup=2,
        distill_dir=tmp_path / "distill",
        distill_share=share,
    )


@pytest.mark.parametrize("decision_t_min", [None, 0.3])  # MDLM or decision-weighted teacher rows
def test_training_learns_the_teacher_rows(tmp_path, decision_t_min: float | None) -> None:
    from editserver.model.infer.loader import load_checkpoint
    from editserver.model.infer.tokenizer import train_tokenizer

    tok = train_tokenizer(CORPUS, vocab_size=400)
    ctx = [tok.fim_prefix_id, *tok.encode("x = "), tok.fim_suffix_id, tok.fim_middle_id]
    answer = tok.encode("add(a, b)\n")
    rows = [Row(ctx + answer + [tok.eot_id] * 6, len(ctx))] * 4
    cfg = dataclasses.replace(_tiny_run(tmp_path, tok, rows, share=0.5), decision_t_min=decision_t_min)
    store = RowStore(tmp_path / "distill")

    def loss_of(model) -> float:
        ids, c, lens, pos, draft = _batch(store, np.arange(store.n), "cpu", tok)
        with torch.no_grad():
            loss, _ = diffusion_loss(model, ids, c, lens, tok.mask_id, torch.Generator().manual_seed(0), pos)
        return float(loss)

    from editserver.model.infer.config import PRESETS, ModelConfig
    from editserver.model.infer.transformer import Transformer

    torch.manual_seed(0)
    before = loss_of(
        Transformer(ModelConfig.from_dict({**PRESETS["tiny"].to_dict(), "vocab_size": tok.vocab_size}))
    )
    after = loss_of(load_checkpoint(train(cfg)).model)
    assert after < 0.5 * before  # half of every batch was this one answer


def test_mixed_batches_take_their_share_from_each_store(tmp_path) -> None:
    from editserver.model.infer.tokenizer import train_tokenizer

    tok = train_tokenizer(CORPUS, vocab_size=400)
    ctx = [tok.fim_prefix_id, tok.fim_suffix_id, tok.fim_middle_id]
    rows = [Row(ctx + [7, tok.eot_id], 3)] * 2
    _tiny_run(tmp_path, tok, rows, share=0.5)
    data, distill = RowStore(tmp_path / "data" / "train"), RowStore(tmp_path / "distill")
    ids, c, lens, _, _ = _mixed_batch([(data, np.arange(3)), (distill, np.arange(2))], "cpu", tok)
    assert ids.shape == (5, 256) and c.tolist()[3:] == [3, 3] and lens.tolist()[3:] == [5, 5]
    assert torch.equal(ids[:3], torch.from_numpy(data.ids[:3].astype(np.int64)))


def test_distill_rows_of_another_length_are_an_error(tmp_path) -> None:
    from editserver.model.infer.tokenizer import train_tokenizer

    tok = train_tokenizer(CORPUS, vocab_size=400)
    cfg = _tiny_run(tmp_path, tok, [Row([1, 2, 3], 1)], share=0.5)
    RowStore.write(tmp_path / "distill", iter([Row([1, 2], 1)]), 1, 128, 0)
    with pytest.raises(ValueError, match="128 tokens long"):
        train(cfg)


@pytest.mark.parametrize("bad", [["--distill-share", "0"], ["--distill-batch", "0"]])
def test_train_cli_rejects_bad_distill_options(tmp_path, bad: list[str]) -> None:
    r = train_cli("--run", str(tmp_path / "r"), "--distill", "10", *bad)
    assert r.returncode == 2 and bad[0] in r.stdout and not (tmp_path / "r").exists()


def test_certainty_term_is_the_entropy_of_right_predictions_on_teacher_rows() -> None:
    from editserver.model.infer.config import PRESETS, ModelConfig
    from editserver.model.infer.transformer import Transformer

    torch.manual_seed(0)
    model = Transformer(ModelConfig.from_dict({**PRESETS["tiny"].to_dict(), "vocab_size": 50}))
    ids = torch.randint(3, 50, (4, 24))  # [B, L]
    ctx, lens = torch.full((4,), 4), torch.full((4,), 24)
    model.embed.weight.data[ids[0, 4:]] *= 30  # some predictions right, so the term is not empty

    def run(rows, certainty):
        g = torch.Generator().manual_seed(5)
        return diffusion_loss(model, ids, ctx, lens, 1, g, certain_rows=rows, certainty=certainty)

    base, _ = run(None, 0.0)
    none, stats_none = run(torch.zeros(4, dtype=torch.bool), 2.0)
    some, stats = run(torch.tensor([True, True, False, False]), 2.0)
    assert torch.allclose(none, base) and "entropy" not in stats_none
    assert stats["entropy"] > 0 and torch.allclose(some, base + 2.0 * stats["entropy"], atol=1e-5)
    some.backward()  # it trains: the term has a gradient
    assert model.embed.weight.grad is not None


def _answers(eot: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Four rows: a 6-token context, answers of 3, 0, 9 and 5 tokens, then end-of-text padding."""
    ids = torch.randint(3, 50, (4, 24))  # [B, L]
    for b, n in enumerate([3, 0, 9, 5]):
        ids[b, 6 + n :] = eot
    return ids, torch.full((4,), 6), torch.full((4,), 24)


def test_decision_rows_score_each_masked_answer_token_and_the_first_end_of_text() -> None:
    eot, mask = 2, 1
    ids, ctx, lens = _answers(eot)
    rows = torch.tensor([False, True, True, True])

    def draw(decision):
        return mask_batch(ids, ctx, lens, mask, torch.Generator().manual_seed(3), 0.0, decision, 0.6, eot)

    base = mask_batch(ids, ctx, lens, mask, torch.Generator().manual_seed(3))
    for a, b in zip(draw(torch.zeros(4, dtype=torch.bool)), base):  # no decision row: MDLM exactly
        assert torch.equal(a, b)
    noisy, masked, t, weight = draw(rows)
    assert torch.equal(t[0], base[2][0]) and bool((t[1:] >= 0.6).all())  # the same draw, rescaled
    assert torch.equal(weight[0], base[3][0])  # a corpus row keeps its MDLM weight
    pos = torch.arange(24)
    for b, n in [(1, 0), (2, 9), (3, 5)]:
        decisions = masked[b] & (pos >= 6) & (pos <= 6 + n)  # the answer and its first end-of-text
        assert torch.equal(weight[b] > 0, decisions)  # padding after it may be masked, never scored
        if decisions.any():
            assert torch.isclose(weight[b].sum(), torch.tensor(1.0))  # each row: its mean CE
    assert bool((masked[1:, 6:] & (weight[1:, 6:] == 0)).any())  # masked padding exists unscored


def test_decision_loss_is_the_mean_of_each_teacher_rows_mean_decision_ce() -> None:
    from editserver.model.infer.config import PRESETS, ModelConfig
    from editserver.model.infer.transformer import Transformer

    torch.manual_seed(0)
    model = Transformer(ModelConfig.from_dict({**PRESETS["tiny"].to_dict(), "vocab_size": 50}))
    eot, mask = 2, 1
    ids, ctx, lens = _answers(eot)
    rows = torch.tensor([False, False, True, True])
    loss, _ = diffusion_loss(
        model,
        ids,
        ctx,
        lens,
        mask,
        torch.Generator().manual_seed(4),
        certain_rows=rows,
        decision_t_min=0.3,
        eot_id=eot,
    )
    noisy, masked, t, weight = mask_batch(
        ids, ctx, lens, mask, torch.Generator().manual_seed(4), 0.0, rows, 0.3, eot
    )
    with torch.no_grad():
        logits = model(noisy, context_lens=ctx, seq_lens=lens).float()  # [B, L, V]
    ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids, reduction="none")  # [B, L]
    pos = torch.arange(24)
    want = []
    for b in range(4):
        if rows[b]:
            first = 6 + int((ids[b, 6:] != eot).sum())
            d = masked[b] & (pos >= 6) & (pos <= first)
            want.append(ce[b][d].mean() if d.any() else torch.tensor(0.0))
        else:  # MDLM: (1/t) * summed masked CE / |canvas|
            want.append(ce[b][masked[b]].sum() / (t[b] * 18))
    assert torch.isclose(loss, torch.stack(want).sum() / 4, rtol=1e-4)


@pytest.mark.parametrize("bad", [["--decision-t-min", "0.3"], ["--distill", "10", "--decision-t-min", "1"]])
def test_train_cli_rejects_decision_weighting_without_teacher_rows_or_out_of_range(tmp_path, bad) -> None:
    r = train_cli("--run", str(tmp_path / "r"), *bad)
    assert r.returncode == 2 and "--decision-t-min" in r.stdout and not (tmp_path / "r").exists()


def test_prepare_only_builds_the_teacher_rows_and_does_not_train(shipped_engine, tmp_path) -> None:
    tok = shipped_engine.tok
    _corpus(tok, tmp_path / "data" / "train", n=6)
    tok.save(tmp_path / "data" / "tokenizer.json")
    run = tmp_path / "r"
    args = ["--run", str(run), "--data", str(tmp_path / "data"), "--distill", "3", "--distill-batch", "3"]
    r = train_cli(*args, "--threads", "1", "--prepare-only")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "not training" in r.stdout
    assert RowStore(run / "distill").n >= 3  # one or two canvases per answered context
    assert not (run / "state.pt").exists() and not (run / "checkpoint").exists()
