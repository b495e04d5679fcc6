"""The tokenizer of an open-weight model directory, with the ids the engine needs by name.

Design decisions:
- ``tokenizer.json`` is read with the ``tokenizers`` library when the directory has one. Otherwise
  the directory ships a slow tokenizer class (Dream, Dream-Coder, DiffuCoder: ``vocab.json`` and
  ``merges.txt``) and the same tokenizer is built here as transformers' ``Qwen2Tokenizer`` builds
  it: byte-level BPE, NFC normalization, Qwen2's split pattern, then the added tokens of
  ``tokenizer_config.json``'s ``added_tokens_decoder`` at exactly the ids listed there (an id that
  cannot be placed is an error, never a silent shift), or, where it has none, ``added_tokens.json``'s
  (the older form). No tokenizer code from the directory runs.
- Text is text: ``encode`` never turns a string into a control token, whatever it spells
  (``<|endoftext|>``, ``<|mask|>``, ``<|fim_middle|>``, a chat tag; model/infer/tokenizer.py
  ``text_only``). Control tokens are matched only in strings the server builds itself
  (``encode_control``: a chat template's own tags).
- Special tokens follow the publisher's code (docs/open-weights.md lists each with its source):
  where that code reads the tokenizer, the names in ``tokenizer_config.json`` win over
  ``config.json`` ids. The canvas filler is the pad token (DiffuCoder's ``<|dlm_pad|>``, Dream's and
  LLaDA's end of text); the answer ends at the first end token (end of text, the pad, end of turn).
- End-of-turn tokens (``<|im_end|>``, ``<|eot_id|>``, Ling's ``<|role_end|>``) may be generated: an instruct model ends its
  chat answer with them (``turn_end_ids``, which the engine does not suppress).
- The chat template comes from ``tokenizer_config.json`` (a string, or the list form's ``default``)
  or ``chat_template.jinja``, and is rendered as transformers' ``apply_chat_template`` renders it:
  jinja2's ``ImmutableSandboxedEnvironment`` (a template from a downloaded directory cannot reach
  Python objects) with ``trim_blocks``, ``lstrip_blocks``, the ``loopcontrols`` extension and the
  ``raise_exception`` and ``strftime_now`` globals. ``chat_template="none"`` sends the raw prompt;
  a path reads the template from that file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from editserver.model.infer.hf.families import MASK_NAMES
from editserver.model.infer.tokenizer import text_only

END_NAMES = (
    "<|endoftext|>",
    "<|im_end|>",
    "<|eot_id|>",
    "<|role_end|>",
    "<|end_of_text|>",
    "</s>",
    "<|eos|>",
)
TURN_END_NAMES = ("<|im_end|>", "<|eot_id|>", "<|role_end|>")  # <|role_end|>: Ling's (LLaDA-MoE)
# transformers' Qwen2Tokenizer pre-tokenization pattern (transformers/models/qwen2/tokenization_qwen2.py)
QWEN2_SPLIT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
    r"""\s*[\r\n]+|\s+(?!\S)|\s+"""
)


def _token_name(value) -> str | None:
    """A special token as tokenizer_config.json gives it: a string or {"content": ...}."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def read_tokenizer(d: Path, config: dict) -> HFTokenizer:
    """``tokenizer.json``, else the slow files (module docstring); FileNotFoundError naming what lacks."""
    if (d / "tokenizer.json").is_file():
        try:
            return HFTokenizer.from_file(str(d / "tokenizer.json"))
        except Exception as exc:  # the tokenizers library raises a bare Exception
            raise ValueError(f"cannot read {d / 'tokenizer.json'}: {exc}") from None
    vocab, merges = d / "vocab.json", d / "merges.txt"
    if not (vocab.is_file() and merges.is_file()):
        raise FileNotFoundError(
            f"{d} is not a model directory (missing tokenizer.json, or vocab.json with merges.txt)"
        )
    try:
        hf = HFTokenizer(models.BPE.from_file(str(vocab), str(merges)))
    except Exception as exc:
        raise ValueError(f"cannot read {vocab.name} and {merges.name} in {d}: {exc}") from None
    hf.normalizer = normalizers.NFC()
    hf.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    hf.decoder = decoders.ByteLevel()
    added = config.get("added_tokens_decoder") or _legacy_added(d, config)
    for key in sorted(added, key=int):
        t = added[key]
        token = AddedToken(
            t["content"],
            single_word=bool(t.get("single_word", False)),
            lstrip=bool(t.get("lstrip", False)),
            rstrip=bool(t.get("rstrip", False)),
            normalized=bool(t.get("normalized", not t.get("special", False))),
            special=bool(t.get("special", False)),
        )
        hf.add_tokens([token])
        if hf.token_to_id(t["content"]) != int(key):
            raise ValueError(
                f"{d / 'tokenizer_config.json'} puts {t['content']!r} at id {key}, which the vocabulary "
                f"cannot place it at (got {hf.token_to_id(t['content'])})"
            )
    return hf


def _legacy_added(d: Path, config: dict) -> dict:
    """``added_tokens.json`` (content to id) as an ``added_tokens_decoder``, for a directory whose
    tokenizer_config.json has none: the older form transformers still reads. A token the config
    names (bos/eos/pad/unk/mask, ``additional_special_tokens``) is special, as transformers makes it.
    Every one is matched verbatim (not normalized): with no decoder to say which are ordinary text,
    each is treated as a control tag, so user text that spells one stays text."""
    path = d / "added_tokens.json"
    if not path.is_file():
        return {}
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    if not isinstance(table, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in table.items()
    ):
        raise ValueError(f"{path} is not an object of token to id")
    named = {
        _token_name(config.get(k)) for k in ("bos_token", "eos_token", "pad_token", "unk_token", "mask_token")
    }
    named |= {_token_name(t) for t in config.get("additional_special_tokens") or []}
    return {str(i): {"content": c, "special": c in named, "normalized": False} for c, i in table.items()}


def read_chat_template(d: Path, config: dict) -> str | None:
    """The directory's chat template: tokenizer_config.json's, else chat_template.jinja, else None."""
    tpl = config.get("chat_template")
    if isinstance(tpl, list):  # the named-templates form: [{"name": ..., "template": ...}]
        named = {t.get("name"): t.get("template") for t in tpl if isinstance(t, dict)}
        tpl = named.get("default")
    if isinstance(tpl, str):
        return tpl
    path = d / "chat_template.jinja"
    return path.read_text(encoding="utf-8") if path.is_file() else None


def _raise(message: str):
    from jinja2.exceptions import TemplateError

    raise TemplateError(message)


def _strftime_now(fmt: str) -> str:
    import datetime

    return datetime.datetime.now().strftime(fmt)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    # transformers' tojson: json.dumps without HTML escaping (jinja2's own escapes <, >, &)
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class OpenTokenizer:
    def __init__(self, hf: HFTokenizer, config: dict, model_cfg: dict, chat_template: str | None = None):
        self.hf = hf
        self.config = config
        self.plain = text_only(hf)  # user text never becomes a control token
        self.special_ids = {t.content: i for i, t in hf.get_added_tokens_decoder().items() if t.special}
        self.mask_id = self.find_mask(hf, config)
        eos = self._id(config.get("eos_token"), model_cfg.get("eos_token_id"), "<|endoftext|>")
        pad = self._id(config.get("pad_token"), model_cfg.get("pad_token_id"), None)
        if eos is None and pad is None:
            raise ValueError("the tokenizer names no end-of-text or padding token")
        self.eot_id: int = pad if pad is not None else eos
        self.bos_id = self._id(config.get("bos_token"), model_cfg.get("bos_token_id"), None)
        self.eos_id = eos
        self.turn_end_ids = {i for i in (hf.token_to_id(n) for n in TURN_END_NAMES) if i is not None}
        ends = {self.eot_id, eos} | {hf.token_to_id(n) for n in END_NAMES}
        self.end_ids = {i for i in ends if i is not None}
        self.chat_template = chat_template

    @staticmethod
    def find_mask(hf: HFTokenizer, config: dict) -> int | None:
        name = _token_name(config.get("mask_token"))
        if name is not None and hf.token_to_id(name) is not None:
            return hf.token_to_id(name)
        for n in MASK_NAMES:
            if hf.token_to_id(n) is not None:
                return hf.token_to_id(n)
        return None

    def _id(self, name_value, from_model, fallback: str | None) -> int | None:
        """The tokenizer's named token (the publisher's code reads it), else config.json's id."""
        name = _token_name(name_value)
        if name is not None and self.hf.token_to_id(name) is not None:
            return self.hf.token_to_id(name)
        if isinstance(from_model, list):
            from_model = from_model[0] if from_model else None
        if isinstance(from_model, int):
            return from_model
        return None if fallback is None else self.hf.token_to_id(fallback)

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        """User text as text: a string that spells a special token is encoded as its characters."""
        return self.plain.encode(text, add_special_tokens=False).ids

    def encode_control(self, text: str) -> list[int]:
        """A string the server built (a rendered chat template's frame): its tags become their ids."""
        return self.hf.encode(text, add_special_tokens=False).ids

    @staticmethod
    def min_tokens(text: str) -> int:
        """A lower bound on the token count: 0 (this tokenizer's pieces are not known to be bounded)."""
        return 0

    def decode(self, ids: Iterable[int]) -> str:
        ids = list(ids)
        for j, i in enumerate(ids):
            if i in self.end_ids:
                ids = ids[:j]
                break
        return self.hf.decode(ids, skip_special_tokens=False)

    def names(self) -> dict[str, str]:
        """The special-token names a template may use, as transformers passes them."""
        keys = ("bos_token", "eos_token", "pad_token", "unk_token", "mask_token")
        return {k: _token_name(self.config[k]) for k in keys if _token_name(self.config.get(k)) is not None}

    def render_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """The template rendered as transformers' ``apply_chat_template(..., tokenize=False)`` does."""
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = _strftime_now
        return env.from_string(self.chat_template or "").render(
            messages=messages, add_generation_prompt=add_generation_prompt, **self.names()
        )

    def chat(self, prompt: str) -> str:
        """``prompt`` as the user's turn of the chat template, ready for the assistant's answer."""
        if self.chat_template is None:
            return prompt
        return self.render_chat([{"role": "user", "content": prompt}])

    def encode_chat(self, prompt: str) -> list[int]:
        """``prompt`` as the user's turn: the template's frame with its tags as ids, the prompt as text.

        The frame is found by rendering a sentinel in the prompt's place; a template that reshapes its
        content (``| trim``) is matched by cutting the real rendering at the frame's two ends."""
        if self.chat_template is None:
            return self.encode(prompt)
        sentinel = "\x00editserver-content\x00"
        head, sep, tail = self.chat(sentinel).partition(sentinel)
        full = self.chat(prompt)
        if (
            not sep
            or not full.startswith(head)
            or not full.endswith(tail)
            or len(head) + len(tail) > len(full)
        ):
            raise ValueError("the chat template does not render the user's message once, as given")
        body = full[len(head) : len(full) - len(tail)]
        return [*self.encode_control(head), *self.encode(body), *self.encode_control(tail)]

    @classmethod
    def load(cls, d: Path, model_cfg: dict, chat_template: str = "auto") -> OpenTokenizer:
        cfg_path = d / "tokenizer_config.json"
        config = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
        return cls(read_tokenizer(d, config), config, model_cfg, choose_template(d, config, chat_template))


def is_base(d: Path, config: dict) -> bool:
    """A base checkpoint (not tuned on a chat template) by its published name: ``...-Base...``."""
    import re

    names = [d.resolve().name, str(config.get("name_or_path", "")), str(config.get("_name_or_path", ""))]
    return any(re.search(r"(^|[-_/.])base($|[-_/.])", n, re.IGNORECASE) for n in names)


def choose_template(d: Path, config: dict, choice: str) -> str | None:
    """``auto``: the directory's template unless the checkpoint is a base one; ``none``; or a file."""
    if choice == "none":
        return None
    if choice == "auto":
        return None if is_base(d, config) else read_chat_template(d, config)
    path = Path(choice).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"chat template {choice!r} is not auto, none or a file")
    return path.read_text(encoding="utf-8")
