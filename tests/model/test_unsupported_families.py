"""Every family this server does not run is answered with one true line: what the directory is, that it
is not served yet, and which families are (model/infer/hf/unserved.py). The configs below carry the
keys each publisher's config.json has (docs/open-weights.md, "Families not served")."""

from __future__ import annotations

import json

import pytest

from editserver.model.infer.hf.families import SUPPORTED, UnsupportedModelError, detect
from editserver.model.infer.loader import load_checkpoint
from tests.helpers import serve_refusal

CONFIGS = {
    "WeDLM-8B-Instruct": (
        {"model_type": "wedlm", "architectures": ["WeDLMForCausalLM"], "qk_norm": True},
        ["WeDLM", "causal attention"],
    ),
    "CoDA-1.7B": (
        {"model_type": "CoDA", "architectures": ["CoDALanguageModel"], "mask_token_id": 151669},
        ["CoDA", "bidirectional diffusion model on Qwen3", "CC-BY-NC-4.0"],
    ),
    "diffusiongemma-26B-A4B-it": (
        {"model_type": "diffusion_gemma", "architectures": ["DiffusionGemmaForBlockDiffusion"],
         "canvas_length": 256},
        ["DiffusionGemma", "uniform-state diffusion", "no mask token"],
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_each_unserved_family_gets_one_true_line(name):
    cfg, words = CONFIGS[name]
    with pytest.raises(UnsupportedModelError) as err:
        detect(cfg, None)
    line = str(err.value)
    assert "\n" not in line and "not served yet" in line, line
    assert all(w in line for w in words), line
    assert all(s.split(" (")[0] in line for s in SUPPORTED), "the served families are named"
    assert len(line) <= 400, "editserver serve shows 400 characters of a reason"
    assert f"model_type {cfg['model_type']!r}" in line and cfg["architectures"][0] in line


def test_a_plain_autoregressive_model(tmp_path):
    """A Qwen2 whose tokenizer has no mask token: autoregressive, not served; refused before its
    weights are looked for."""
    from tests.hf_models import QWEN_SPECIALS, train_tokenizer

    d = tmp_path / "Qwen2.5-Coder-0.5B"
    d.mkdir()
    cfg = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 64}
    (d / "config.json").write_text(json.dumps(cfg))
    train_tokenizer([t for t in QWEN_SPECIALS if t != "<|mask|>"]).save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))
    with pytest.raises(UnsupportedModelError) as err:
        load_checkpoint(d)
    line = str(err.value)
    assert "autoregressive model" in line and "without a mask token" in line and "\n" not in line
    assert "'qwen2'" in line and "Qwen2ForCausalLM" in line and "LLaDA-MoE" in line


def test_a_served_llada_is_not_taken_for_an_unserved_one():
    assert detect({"model_type": "Dream", "architectures": ["DreamModel"], "hidden_size": 8, "vocab_size": 9,
                   "num_hidden_layers": 1, "num_attention_heads": 1, "intermediate_size": 8}, 1).family == "dream"  # fmt: skip


def test_fast_dllm_v2_is_served_now():
    """The config once refused here (third-party converters' keys) is detected as its family."""
    cfg = {"model_type": "Fast_dLLM_Qwen", "architectures": ["Fast_dLLM_QwenForCausalLM"], "bd_size": 32}
    shape = {"hidden_size": 8, "vocab_size": 9, "num_hidden_layers": 1, "num_attention_heads": 1}
    got = detect({**cfg, **shape, "intermediate_size": 8}, None)
    assert (got.family, got.block_size, got.mask_id, got.shift) == ("fast-dllm-v2", 32, 151665, True)


def test_llada2_is_served_now():
    """The LLaDA2 config once refused here is detected as its family (tests/model/test_llada2.py)."""
    cfg = {"model_type": "llada2_moe", "architectures": ["LLaDA2MoeModelLM"], "num_experts": 8}
    shape = {"hidden_size": 8, "vocab_size": 9, "num_hidden_layers": 1, "num_attention_heads": 1}
    got = detect({**cfg, **shape, "moe_intermediate_size": 4, "num_experts_per_tok": 2}, None)
    assert (got.family, got.block_size, got.mask_id, got.shift) == ("llada2", 32, 156895, False)


@pytest.mark.parametrize(
    "cfg",
    [
        {"model_type": "llama", "architectures": ["StableDiffcoderForCausalLM"]},
        # the transformers-4.46 revision: a Llama class, its own code named in auto_map
        {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
         "auto_map": {"AutoModelForCausalLM": "modeling_seed_diffcoder.SeedDiffcoderForCausalLM"}},
    ],
)  # fmt: skip
def test_stable_diffcoder_is_served_now(cfg):
    """The configs once refused here are detected as their family (tests/model/test_stable_diffcoder.py)."""
    shape = {"hidden_size": 8, "vocab_size": 9, "num_hidden_layers": 1, "num_attention_heads": 1}
    got = detect({**cfg, **shape, "intermediate_size": 8}, None)
    assert (got.family, got.block_size, got.mask_id, got.shift) == ("stable-diffcoder", 4, 5, False)


def test_serve_says_it_in_one_line_and_exits_2(tmp_path):
    """Through the real CLI: only config.json is needed to know, so nothing else is looked for."""
    d = tmp_path / "CoDA-1.7B"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(CONFIGS["CoDA-1.7B"][0]))
    line = serve_refusal("--model", str(d))
    assert "(…)" not in line and "CoDA" in line and "not served yet" in line, line
