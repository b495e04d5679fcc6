"""Byte-level BPE tokenizer for code, with the special tokens of FIM and next-edit layouts.

Design decisions:
- Byte-level BPE (``tokenizers`` library): every UTF-8 string round-trips exactly, tabs, CRLF and
  long indentation runs included, because the alphabet is the 256 bytes and the decoder is the
  inverse byte map. No normalizer, no prefix space, no stripping.
- The GPT-2 split regex keeps whitespace runs as their own pre-tokens, so the merges learn
  indentation blocks (4, 8, 12 spaces...) which make up a large share of code.
- Special tokens come first (ids 0..N-1) so their ids are stable across vocabulary sizes.
- Text is text: ``encode`` never reads a special token out of a string, so code that spells
  ``<|mask|>`` or ``<|endoftext|>`` costs its characters, as any other string. The layouts insert
  their tags as ids (FIM tags in model/infer/layout.py; a next-edit prompt's tags through
  ``encode_prompt``, protocol/prompt.py ``prompt_parts``). Splitting at the tags first is what the
  ``tokenizers`` library did with the tags inline, so a prompt without such text keeps its ids.
- The vocabulary size is an argument; 8,192 was chosen by measurement (README): 16,384 compresses
  code better but its output projection and softmax cost more training time than 2 CPU cores can spare.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from editserver.protocol.prompt import EditPrompt, encode_prompt
from editserver.protocol.tokens import min_tokens, text_only_json

EOT = "<|endoftext|>"
MASK = "<|mask|>"
FIM_PREFIX = "<|fim_prefix|>"
FIM_SUFFIX = "<|fim_suffix|>"
FIM_MIDDLE = "<|fim_middle|>"
FILE_SEP = "<|file_sep|>"
REWRITE = "<|rewrite|>"  # separates a next-edit prompt from the canvas holding the rewritten region

# Inception's next-edit layout tags (see protocol/prompt.py).
EDIT_TAGS = [
    "<|recently_viewed_code_snippets|>",
    "<|/recently_viewed_code_snippets|>",
    "<|recently_viewed_code_snippet|>",
    "<|/recently_viewed_code_snippet|>",
    "<|current_file_content|>",
    "<|/current_file_content|>",
    "<|code_to_edit|>",
    "<|/code_to_edit|>",
    "<|cursor|>",
    "<|edit_diff_history|>",
    "<|/edit_diff_history|>",
]

SPECIAL_TOKENS = [EOT, MASK, FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE, FILE_SEP, REWRITE, *EDIT_TAGS]


def text_only(hf: HFTokenizer) -> HFTokenizer:
    """``hf`` without its control tokens (protocol/tokens.py ``text_only_json``: the view a client
    without the model counts with too)."""
    return HFTokenizer.from_str(text_only_json(hf.to_str()))


class Tokenizer:
    """Thin wrapper that exposes the ids the model and sampler need by name."""

    def __init__(self, hf: HFTokenizer):
        self.hf = hf
        self.plain = text_only(hf)  # reads special tokens as text (module docstring)
        ids = {tok: hf.token_to_id(tok) for tok in SPECIAL_TOKENS}
        missing = [tok for tok, i in ids.items() if i is None]
        if missing:
            raise ValueError(f"tokenizer lacks special tokens: {missing}")
        self.special_ids = ids
        self.eot_id: int = ids[EOT]
        self.mask_id: int = ids[MASK]
        self.fim_prefix_id: int = ids[FIM_PREFIX]
        self.fim_suffix_id: int = ids[FIM_SUFFIX]
        self.fim_middle_id: int = ids[FIM_MIDDLE]
        self.file_sep_id: int = ids[FILE_SEP]
        self.rewrite_id: int = ids[REWRITE]

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        """Text as text: a string spelling a special token is encoded as its characters."""
        return self.plain.encode(text, add_special_tokens=False).ids

    def encode_prompt(self, prompt: EditPrompt) -> list[int]:
        """A next-edit prompt's ids: its layout tags as ids, the user's text as text."""
        return encode_prompt(prompt, self.encode, self.special_ids.__getitem__)

    @staticmethod
    def min_tokens(text: str) -> int:
        """A lower bound on ``len(encode(text))`` that costs a split (protocol/tokens.py)."""
        return min_tokens(text)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.plain.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=False)

    def save(self, path: str | Path) -> None:
        self.hf.save(str(path))

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        return cls(HFTokenizer.from_file(str(path)))


def _empty_bpe() -> HFTokenizer:
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return tok


def train_tokenizer(texts: Iterator[str] | list[str], vocab_size: int = 8192) -> Tokenizer:
    """Train a byte-level BPE on an iterator of source texts."""
    hf = _empty_bpe()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    hf.train_from_iterator(texts, trainer=trainer)
    return Tokenizer(hf)
