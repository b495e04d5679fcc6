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
    "Open-dCoder-0.5B": ("<|endoftext|>", "<|im_end|>", "<|mask|>"),
    "LLaDA-8B-Instruct": ("<|endoftext|>", "<|eot_id|>", "<|mdm_mask|>"),
    "LLaDA-1.5": ("<|endoftext|>", "<|eot_id|>", "<|mdm_mask|>"),
}


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    root = tmp_path_factory.mktemp("published")
    return {name: make_published(root, name)[0] for name in PUBLISHED}


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
    engine = Engine.load(d)
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
    if "LLaDA" in name:  # the template's raise_exception surfaces as an error, as in transformers
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
    from editserver.model.infer.checkpoint import load_checkpoint

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
    engine = Engine.load(d := published[name])
    tok = engine.tok
    control = set(_reference(d).added_tokens_decoder)
    for s in ("<|endoftext|>", "<|mask|>", "<|mdm_mask|>", "<|im_end|>", "<|eot_id|>", "<|fim_middle|>"):
        q = s[:-2] + "q|>"
        for pre, suf in ((f"x = '{s}'\n", "\n"), ("x = 1\n", f"# {s}\n")):
            a, _, _ = engine.fim_layout(FimRequest(pre, suf), 8)
            b, _, _ = engine.fim_layout(FimRequest(pre.replace(s, q), suf.replace(s, q)), 8)
            sa, sb = tok.encode(suf), tok.encode(suf.replace(s, q))
            assert abs(len(a) + len(sa) - len(b) - len(sb)) <= 1
            assert not control & set(a + sa)
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
    engine = Engine.load(published[name])
    fim = engine.complete(FimRequest("def add(a, b):\n    return ", "\n", max_tokens=8))
    assert fim.finish_reason in ("stop", "length") and fim.steps >= 1
    p = EditPrompt("m.py", "x = 1\n", "y = x\n", 0, "", [], "")
    edit = engine.complete(EditRequest(build_prompt(p), max_tokens=8))
    assert edit.region == "y = x\n" and edit.steps >= 1
    assert torch.isfinite(torch.tensor(edit.score))
