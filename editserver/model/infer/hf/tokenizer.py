"""The tokenizer of an open-weight model directory, with the ids the engine needs by name.

Design decisions:
- ``tokenizer.json`` is read with the ``tokenizers`` library; ``tokenizer_config.json`` only for
  names (mask, end of text, pad, begin of text) and the chat template. No tokenizer code from the
  directory runs.
- The canvas is padded with the model's padding token (``pad_token_id``: Dream's end of text,
  DiffuCoder's own ``<|dlm_pad|>``), the end-of-text the sampler fills after an answer. Other end
  tokens (end of text, end of turn) also end the answer's text when decoded (``decode`` cuts there).
- The chat template is rendered with jinja2's ``ImmutableSandboxedEnvironment``: a template from a
  downloaded directory cannot reach Python objects. No template: the raw prompt.
- ``special_ids`` holds every token the tokenizer marks special: the sampler never proposes them
  (layout and chat tags), except the padding end-of-text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer

from editserver.model.infer.hf.families import MASK_NAMES

END_NAMES = ("<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "</s>", "<|eos|>")


def _token_name(value) -> str | None:
    """A special token as tokenizer_config.json gives it: a string or {"content": ...}."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


class OpenTokenizer:
    def __init__(self, hf: HFTokenizer, config: dict, model_cfg: dict):
        self.hf = hf
        self.config = config
        self.special_ids = {t.content: i for i, t in hf.get_added_tokens_decoder().items() if t.special}
        self.mask_id = self.find_mask(hf, config)
        eos = self._id(model_cfg.get("eos_token_id"), config.get("eos_token"), "<|endoftext|>")
        pad = self._id(model_cfg.get("pad_token_id"), config.get("pad_token"), None)
        if eos is None and pad is None:
            raise ValueError("the tokenizer names no end-of-text or padding token")
        self.eot_id: int = pad if pad is not None else eos
        self.bos_id = self._id(model_cfg.get("bos_token_id"), config.get("bos_token"), None)
        ends = {self.eot_id, eos} | {hf.token_to_id(n) for n in END_NAMES}
        self.end_ids = {i for i in ends if i is not None}
        self.chat_template = (
            config.get("chat_template") if isinstance(config.get("chat_template"), str) else None
        )

    @staticmethod
    def find_mask(hf: HFTokenizer, config: dict) -> int | None:
        name = _token_name(config.get("mask_token"))
        if name is not None and hf.token_to_id(name) is not None:
            return hf.token_to_id(name)
        for n in MASK_NAMES:
            if hf.token_to_id(n) is not None:
                return hf.token_to_id(n)
        return None

    def _id(self, from_model, name_value, fallback: str | None) -> int | None:
        if isinstance(from_model, list):
            from_model = from_model[0] if from_model else None
        if isinstance(from_model, int):
            return from_model
        name = _token_name(name_value) or fallback
        return None if name is None else self.hf.token_to_id(name)

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size()

    def encode(self, text: str) -> list[int]:
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

    def chat(self, prompt: str) -> str:
        """``prompt`` as the user's turn of the chat template, ready for the assistant's answer."""
        if self.chat_template is None:
            return prompt
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        names = {k: _token_name(self.config.get(k)) or "" for k in ("bos_token", "eos_token", "pad_token")}
        return env.from_string(self.chat_template).render(
            messages=[{"role": "user", "content": prompt}], add_generation_prompt=True, **names
        )

    @classmethod
    def load(cls, d: Path, model_cfg: dict) -> OpenTokenizer:
        cfg_path = d / "tokenizer_config.json"
        config = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
        return cls(HFTokenizer.from_file(str(d / "tokenizer.json")), config, model_cfg)
