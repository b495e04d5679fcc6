"""Open-weight families: our forward against transformers', family detection and load errors.

Each tiny directory is built in its family's on-disk layout (tests/hf_models.py); the reference is the
transformers model that wrote it, run with a full (non-causal) attention mask.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from editserver.model.infer.checkpoint import serving_dtype
from editserver.model.infer.hf import UnsupportedModelError
from editserver.model.infer.loader import load_checkpoint
from tests.hf_models import full_attention_logits, make_dream, make_llada


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return {
        "dream": make_dream(root / "dream"),
        "dream-tied": make_dream(root / "dream-tied", tied=True),
        "open-dcoder": make_dream(root / "odc", family="open-dcoder", chat=False),
        "llada": make_llada(root / "llada"),
        "sharded": make_dream(root / "sharded", shard="60KB"),
    }


@pytest.mark.parametrize("name", ["dream", "dream-tied", "open-dcoder", "llada", "sharded"])
def test_forward_matches_transformers_full_attention(dirs, name):
    d, ref = dirs[name]
    ck = load_checkpoint(d)
    assert ck.family == {"dream-tied": "dream", "sharded": "dream"}.get(name, name)
    V = ck.model.cfg.vocab_size
    g = torch.Generator().manual_seed(1)
    for lens in ([7], [11, 5, 9]):  # odd lengths; batched rows of unequal length
        L = max(lens)
        ids = torch.randint(0, V, (len(lens), L), generator=g)
        lens_t = torch.tensor(lens)
        ours = ck.model(ids, seq_lens=lens_t)
        theirs = full_attention_logits(ref, ids, lens_t)
        keep = torch.arange(L)[None, :] < lens_t[:, None]
        diff = (ours - theirs)[keep].abs().max().item()
        assert diff <= 1e-4, f"{name}: max abs difference {diff}"
        # a padded row computes what it computes alone
        alone = ck.model(ids[-1:, : lens[-1]])
        assert (alone[0] - ours[-1, : lens[-1]]).abs().max().item() <= 1e-4


def test_sharded_directory_has_shards(dirs):
    d, _ = dirs["sharded"]
    assert (d / "model.safetensors.index.json").is_file()
    assert len(list(d.glob("model-*-of-*.safetensors"))) >= 2


def test_families_shift_as_published(dirs):
    assert load_checkpoint(dirs["dream"][0]).model.cfg.shift
    assert load_checkpoint(dirs["open-dcoder"][0]).model.cfg.shift
    assert not load_checkpoint(dirs["llada"][0]).model.cfg.shift


def test_shifted_reading_takes_the_previous_position(dirs):
    """The policy reads canvas position j from hidden state j - 1 for a shifted family."""
    from editserver.model.infer.cache import InPlaceNoCache, Rows

    for name, shift in (("dream", 1), ("llada", 0)):
        ck = load_checkpoint(dirs[name][0])
        m, mask = ck.model, ck.model.cfg.mask_id
        pre, suf, n = [5, 6, 7], [8, 9], 4
        rows = Rows(
            torch.tensor([pre]),
            torch.tensor([3]),
            torch.tensor([n]),
            None,
            torch.tensor([suf]),
            torch.tensor([2]),
        )
        policy = InPlaceNoCache()
        state = policy.prepare(m, rows)
        got = policy.logits(
            m, state, torch.full((1, n), mask), slice(0, n), None, torch.ones(1, n, dtype=torch.bool)
        )
        full = m(torch.tensor([pre + [mask] * n + suf]))[0]  # [L, V]
        want = full[3 - shift : 3 - shift + n]
        assert (got - want).abs().max().item() <= 1e-5


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_load_errors_are_clear(dirs, tmp_path):
    d = _copy(dirs["sharded"][0], tmp_path / "missing-shard")
    next(d.glob("model-00002-*.safetensors")).unlink()
    with pytest.raises(FileNotFoundError, match="lacks the shard"):
        load_checkpoint(d)

    d = _copy(dirs["dream"][0], tmp_path / "bad-shape")
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "intermediate_size": 80}))
    with pytest.raises(ValueError, match="has shape"):
        load_checkpoint(d)

    d = _copy(dirs["dream"][0], tmp_path / "small-vocab")
    (d / "config.json").write_text(json.dumps({**cfg, "vocab_size": 100}))
    with pytest.raises(ValueError, match="tokens but the model's vocabulary"):
        load_checkpoint(d)

    d = _copy(dirs["open-dcoder"][0], tmp_path / "autoregressive")
    (d / "tokenizer_config.json").write_text("{}")
    tok = json.loads((d / "tokenizer.json").read_text())
    tok["added_tokens"] = [t for t in tok["added_tokens"] if t["content"] != "<|mask|>"]
    tok["model"]["vocab"].pop("<|mask|>")
    (d / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(UnsupportedModelError, match="autoregressive model .* without a mask token"):
        load_checkpoint(d)

    d = _copy(dirs["dream"][0], tmp_path / "unknown")
    (d / "config.json").write_text(
        json.dumps({**cfg, "model_type": "mamba", "architectures": ["MambaModel"]})
    )
    with pytest.raises(UnsupportedModelError, match="supported families: Dream"):
        load_checkpoint(d)


def test_dtypes_and_context_cap(dirs):
    d, _ = dirs["llada"]
    ck = load_checkpoint(d, dtype=torch.bfloat16, max_context=100)
    assert next(ck.model.parameters()).dtype == torch.bfloat16
    assert ck.model.cfg.max_seq_len == 100 and ck.model.cfg.max_position_embeddings == 4096
    assert serving_dtype("fp16", "cpu") == torch.float16
    assert serving_dtype("auto", "cuda") == torch.bfloat16
    with pytest.raises(ValueError, match="dtype must be one of"):
        serving_dtype("int8", "cpu")
    with pytest.raises(ValueError, match="max_context"):
        load_checkpoint(d, max_context=0)
