"""Open-weight directories laid out file for file as their publishers ship them (tests/hf_models.py
``PUBLISHED``): they load without running their code, tokenize and render chat templates exactly as
transformers does, use each publisher's special tokens, and read user text as text."""

from __future__ import annotations

import json

import pytest
import torch

from editserver.model.infer.engine import EditRequest, Engine, FimRequest
from editserver.model.infer.hf.tokenizer import OpenTokenizer, read_chat_template
from editserver.protocol.prompt import EditPrompt, build_prompt
from tests.hf_models import NEVER_RUN, PUBLISHED, make_published

# unicode, tabs, CRLF, digit runs, whitespace runs, NFC-sensitive text, the tags spelled in code
MIXED = [
    "def f(x):\r\n\treturn x  # é 中文 🙂\n",
    "a = 1234567890 + 007\n\n\n    \t  b\r\n\r\n",
    "  x\u00a0y\u3000z  \t\t\n        return  \n",
    "e\u0301 cafe\u0301 ﬁ Ω Å\n",
    "it's they'll WE'RE I'M\n",
    "s = '<|mask|>' + '<|endoftext|>' <|fim_middle|> <tool_call> <|eot_id|> <|dlm_pad|>",
    "".join(chr(c) for c in range(32, 127)) + "\x0b\x0c\x85\u2028",
]

# what each publisher's code uses: (canvas filler / pad, end of turn, mask); docs/open-weights.md
EXPECTED = {
    "Dream-v0-Instruct-7B": ("<|endoftext|>", "<|im_end|>", "<|mask|>"),
    "Dream-Coder-v0-Instruct-7B": ("<|endoftext|>", "<|im_end|>", "<|mask|>"),
    "DiffuCoder-7B-Base": ("<|dlm_pad|>", "<|im_end|>", "<|mask|>"),
    "DiffuCoder-7B-Instruct": ("<|dlm_pad|>", "<|im_end|>", "<|mask|>"),
    "DreamOn-v0-7B": ("<|endoftext|>", "<|im_end|>", "<|mask|>"),
    "Open-dCoder-0.5B": ("<|endoftext|>", "<|im_end|>", "<|mask|>"),
    "LLaDA-8B-Instruct": ("<|endoftext|>", "<|eot_id|>", "<|mdm_mask|>"),
    "LLaDA-1.5": ("<|endoftext|>", "<|eot_id|>", "<|mdm_mask|>"),
    "LLaDA-MoE-7B-A1B-Base": ("<|endoftext|>", "<|role_end|>", "<|mask|>"),
    "LLaDA-MoE-7B-A1B-Instruct": ("<|endoftext|>", "<|role_end|>", "<|mask|>"),
}


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    root = tmp_path_factory.mktemp("published")
    return {name: make_published(root, name)[0] for name in PUBLISHED}


_ENGINES: dict = {}


def _engine(d) -> Engine:
    """The directory's engine with default settings, loaded once per directory."""
    if d not in _ENGINES:
        _ENGINES[d] = Engine.load(d)
    return _ENGINES[d]


def _reference(d):
    """transformers' tokenizer for the directory, chosen by class, never by the directory's code."""
    from transformers import PreTrainedTokenizerFast, Qwen2Tokenizer

    if (d / "tokenizer.json").is_file():
        return PreTrainedTokenizerFast.from_pretrained(str(d))
    return Qwen2Tokenizer.from_pretrained(str(d))


def _ours(d) -> OpenTokenizer:
    return OpenTokenizer.load(d, json.loads((d / "config.json").read_text()))


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_tokenizer_ids_match_transformers(published, name):
    d = published[name]
    ref, ours = _reference(d), _ours(d)
    assert ours.vocab_size == len(ref)
    for text in MIXED:
        want = ref.encode(text, add_special_tokens=False)
        assert ours.encode_control(text) == want, (
            text
        )  # the same tokenizer, tags matched as transformers does
        plain = ours.encode(text)
        assert ours.decode(plain) == text or any(c in text for c in "\u0301ﬁΩÅ"), text  # NFC may recompose
        if "<|" not in text and "<tool" not in text:
            assert plain == want, text
        control = set(ref.added_tokens_decoder)
        assert not control & set(plain), f"user text became a control token: {text!r}"


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_special_tokens_as_each_publisher_uses_them(published, name):
    d = published[name]
    ours = _ours(d)
    pad, turn, mask = (ours.hf.token_to_id(n) for n in EXPECTED[name])
    assert ours.eot_id == pad, "the canvas filler is the tokenizer's pad token"
    assert turn in ours.turn_end_ids and turn in ours.end_ids
    assert ours.mask_id == mask
    engine = _engine(d)
    suppressed = set(engine.suppressed_ids())
    assert turn not in suppressed, "an instruct model may end its turn"
    assert pad not in suppressed and mask in suppressed
    raw = json.loads((d / "config.json").read_text())
    if "DiffuCoder" in name:  # config.json names <|endoftext|>; the publisher's code reads the tokenizer
        assert raw["pad_token_id"] != pad
    assert ours.decode([*ours.encode("x = 1"), turn, *ours.encode("junk")]) == "x = 1"


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_no_code_from_the_directory_runs(published, name):
    d = published[name]
    code = sorted(p.name for p in d.glob("*.py"))
    assert all((d / f).read_text() == NEVER_RUN for f in code)  # each would raise if imported
    Engine.load(d)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_chat_template_renders_as_transformers(published, name):
    d = published[name]
    ref, ours = _reference(d), _ours(d)
    ours.chat_template = read_chat_template(d, json.loads((d / "tokenizer_config.json").read_text()))
    assert ours.chat_template is not None and ref.chat_template is not None
    chats = [
        [{"role": "user", "content": "def f():\n    pass\n"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "  hi <|im_end|>\n\n"}],
        [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c\t"},
        ],
    ]
    for chat in chats:
        for gen in (True, False):
            want = ref.apply_chat_template(chat, tokenize=False, add_generation_prompt=gen)
            assert ours.render_chat(chat, add_generation_prompt=gen) == want
    if PUBLISHED[name]["kind"] == "llada":  # its raise_exception surfaces as an error, as in transformers
        with pytest.raises(Exception, match="roles"):
            ours.render_chat([{"role": "tool", "content": "x"}])


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_chat_template_choice(published, name, tmp_path):
    d = published[name]
    engine = Engine.load(d)
    if name.endswith("-Base"):  # a base checkpoint never tuned on the template its tokenizer carries
        assert engine.tok.chat_template is None
    else:
        assert engine.tok.chat_template is not None
    from editserver.model.infer.loader import load_checkpoint

    ck = load_checkpoint(d, chat_template="none")
    assert ck.tokenizer.chat_template is None
    f = tmp_path / "t.jinja"
    f.write_text("[{{ messages[0]['content'] }}]")
    ck = load_checkpoint(d, chat_template=str(f))
    assert ck.tokenizer.chat(" x ") == "[ x ]"
    with pytest.raises(FileNotFoundError, match="auto, none or a file"):
        load_checkpoint(d, chat_template=str(tmp_path / "missing.jinja"))


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_prompt_text_that_spells_a_token_costs_its_characters(published, name):
    """FIM prefix and suffix, and every part of an edit prompt: text that spells a special token
    costs what a near-identical plain string costs (within one token), and the frame's control
    tokens are the same."""
    engine = _engine(d := published[name])
    tok = engine.tok
    control = set(_reference(d).added_tokens_decoder)
    for s in ("<|endoftext|>", "<|mask|>", "<|mdm_mask|>", "<|im_end|>", "<|eot_id|>", "<|fim_middle|>"):
        q = s[:-2] + "q|>"
        for pre, suf in ((f"x = '{s}'\n", "\n"), ("x = 1\n", f"# {s}\n")):
            a, _, _ = engine.fim_layout(FimRequest(pre, suf), 8)
            b, _, _ = engine.fim_layout(FimRequest(pre.replace(s, q), suf.replace(s, q)), 8)
            sa, sb = tok.encode(suf), tok.encode(suf.replace(s, q))
            assert abs(len(a) + len(sa) - len(b) - len(sb)) <= 1
            assert not control & set(a[len(engine.layout.head) :] + sa), "only the layout's own BOS"
        for part in ("above", "region", "below", "history"):
            kw = dict(file_path="m.py", above="a = 1\n", region="b = 2\n", cursor=0, below="", history="")
            kw[part] = f"x = '{s}'\n"
            ids_s, _, _ = engine.layout.edit(build_prompt(p := EditPrompt(**kw)), p, 8, None, 4096)
            kw[part] = f"x = '{q}'\n"
            ids_q, _, _ = engine.layout.edit(build_prompt(p := EditPrompt(**kw)), p, 8, None, 4096)
            assert abs(len(ids_s) - len(ids_q)) <= 1, (s, part)
            assert [i for i in ids_s if i in control] == [i for i in ids_q if i in control], (
                "layout unchanged"
            )


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_answers_fim_and_edit(published, name):
    engine = _engine(published[name])
    fim = engine.complete(FimRequest("def add(a, b):\n    return ", "\n", max_tokens=8))
    assert fim.finish_reason in ("stop", "length") and fim.steps >= 1
    p = EditPrompt("m.py", "x = 1\n", "y = x\n", 0, "", [], "")
    edit = engine.complete(EditRequest(build_prompt(p), max_tokens=8))
    assert edit.region == "y = x\n" and edit.steps >= 1
    assert torch.isfinite(torch.tensor(edit.score))


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_infill_layout_and_window_per_family(published, name):
    """BOS before the prefix (Dream, LLaDA), EOS after the suffix (the Dream family, as DreamOn's
    infilling code), nothing for Open-dCoder and LLaDA-MoE; the window is the publisher's evaluated length and an
    explicit max_context raises it."""
    engine = _engine(published[name])
    tok = engine.tok
    pre, suf = "def f(x):\n    return ", "\n\nprint(f(1))\n"
    ctx, tail, dropped = engine.fim_layout(FimRequest(pre, suf), 8)
    bos, eos = {"open-dcoder": (False, False), "llada": (True, False), "llada-moe": (False, False)}.get(
        PUBLISHED[name]["kind"], (True, True)
    )
    assert ctx == ([tok.bos_id] if bos else []) + tok.encode(pre)
    assert tail == tok.encode(suf) + ([tok.eos_id] if eos else [])
    assert dropped == 0
    window = 4096 if "LLaDA" in name else 2048
    assert engine.inference.window_tokens == window and engine.window == window
    if engine.context_length == window:
        return  # LLaDA: its own 4,096 positions are the window; longer input is refused (test_hf_server)
    long = "x = 1\n" * 1000  # ~5,000 tokens: over the window, within the 32K context
    ctx, tail, dropped = engine.fim_layout(FimRequest(long, suf), 8)
    assert dropped > 0 and len(ctx) + len(tail) + 8 <= window
    assert ctx[-5:] == tok.encode(long)[-5:] and tail == tok.encode(suf) + ([tok.eos_id] if eos else [])
    wide = Engine.load(published[name], max_context=8192)
    assert wide.window == 8192 and wide.fim_layout(FimRequest(long, suf), 8)[2] == 0


def test_llada_rotary_in_fp32(published):
    """LLaDA's modeling code rotates q and k in fp32 whatever the weights' type; Dream's in its own."""
    from editserver.kernels import reference
    from editserver.model.infer.transformer import rope_tables

    engine = Engine.load(published["LLaDA-8B-Instruct"], dtype=torch.bfloat16)
    model = engine.model
    attn = model.layers[0].self_attn
    assert attn.rope_fp32
    torch.manual_seed(0)
    x = torch.randn(1, 4, model.cfg.dim, dtype=torch.bfloat16)
    pos = torch.tensor([[3000, 3001, 3002, 3003]])
    cos, sin = model._tables(pos)
    assert cos.dtype == torch.float32
    _, k, _ = attn(x, cos, sin, None)
    k_raw = attn.k_proj(x).view(1, 4, attn.hkv, attn.hd)
    c32, s32 = rope_tables(attn.hd, pos, model.cfg.rope_theta)
    want = reference.rotary_reference(k_raw.float(), k_raw.float(), c32, s32)[1].to(torch.bfloat16)
    assert torch.equal(k, want.transpose(1, 2))
    low = reference.rotary_reference(k_raw, k_raw, c32.to(torch.bfloat16), s32.to(torch.bfloat16))[1]
    assert not torch.equal(k, low.transpose(1, 2)), "bf16 tables rotate differently at these positions"
    dream = Engine.load(published["Dream-v0-Instruct-7B"], dtype=torch.bfloat16).model
    assert not dream.layers[0].self_attn.rope_fp32 and dream._tables(pos)[0].dtype == torch.bfloat16


# Files each publisher's directory lists (docs/open-weights.md, "Files read"); a fixture may hold more
# shards than its publisher (its size is what shrinks), never other files.
LISTED = {
    "LLaDA-8B-Instruct": {
        "config.json", "configuration_llada.py", "generation_config.json", "model.safetensors.index.json",
        "modeling_llada.py", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json",
        *(f"model-{i:05d}-of-00006.safetensors" for i in range(1, 7)),
    },
    "DiffuCoder-7B-Base": {
        "added_tokens.json", "chat_template.jinja", "config.json", "configuration_dream.py",
        "generation_config.json", "generation_utils.py", "merges.txt",
    },
}  # fmt: skip
LISTED["DiffuCoder-7B-Instruct"] = LISTED["DiffuCoder-7B-Base"]
LISTED["LLaDA-MoE-7B-A1B-Base"] = {
    "config.json", "configuration_lladamoe.py", "generation_config.json", "model.safetensors.index.json",
    "modeling_lladamoe.py", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json",
    *(f"model-{i:05d}-of-00003.safetensors" for i in range(1, 4)),
}  # fmt: skip
LISTED["LLaDA-MoE-7B-A1B-Instruct"] = LISTED["LLaDA-MoE-7B-A1B-Base"]


@pytest.mark.parametrize("name", sorted(LISTED))
def test_files_as_the_publisher_lists_them(published, name):
    d = published[name]
    files = {p.name for p in d.iterdir()}
    if name.startswith("LLaDA"):
        assert files == LISTED[name]
    else:
        assert LISTED[name] <= files
        added = json.loads((d / "added_tokens.json").read_text())
        decoder = json.loads((d / "tokenizer_config.json").read_text())["added_tokens_decoder"]
        assert added == {v["content"]: int(k) for k, v in decoder.items()}
        assert _reference(d).convert_tokens_to_ids("<|dlm_pad|>") == added["<|dlm_pad|>"]


@pytest.mark.parametrize("name", ["LLaDA-8B-Instruct", "LLaDA-1.5"])
def test_llada_config_as_published(published, name):
    """LLaDA-8B: plain multi-head attention, RMSNorm eps 1e-5, 4,096 positions, rotary in fp32."""
    raw = json.loads((published[name] / "config.json").read_text())
    assert raw["n_kv_heads"] == raw["n_heads"] and raw["rms_norm_eps"] == 1e-5
    assert raw["max_sequence_length"] == 4096 and raw["rope_full_precision"] is True
    cfg = _engine(published[name]).model.cfg
    assert cfg.n_kv_heads == cfg.n_heads and cfg.norm_eps == 1e-5


def test_added_tokens_json_stands_in_for_a_missing_decoder(published, tmp_path):
    """The older form: tokenizer_config.json without ``added_tokens_decoder`` and ``added_tokens.json``
    beside it tokenizes as the full config does, special tokens included."""
    import shutil

    src = published["DiffuCoder-7B-Instruct"]
    d = shutil.copytree(src, tmp_path / "DiffuCoder-7B-Instruct")
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    del cfg["added_tokens_decoder"]
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    full, legacy = _ours(src), _ours(d)
    assert legacy.vocab_size == full.vocab_size
    assert (legacy.mask_id, legacy.eot_id, legacy.eos_id) == (full.mask_id, full.eot_id, full.eos_id)
    for text in MIXED:
        assert legacy.encode_control(text) == full.encode_control(text), text
        assert legacy.encode(text) == full.encode(text), text
        assert not set(legacy.encode(text)) & set(legacy.special_ids.values()), text
    (d / "added_tokens.json").write_text('{"<|dlm_pad|>": "x"}')
    with pytest.raises(ValueError, match="added_tokens.json"):
        _ours(d)
