"""What a client may know of a byte-level BPE tokenizer without the model: pure functions over its
``tokenizer.json`` text and over strings (standard library only).

Design decisions:
- The model's tokenizer (model/infer/tokenizer.py) reads text as text: a string that spells a tag
  (``<|mask|>``) costs its characters. ``text_only_json`` is that view of a ``tokenizer.json``: the
  added tokens that are control tokens (special, or matched verbatim) removed, so any holder of the
  ``tokenizers`` library (the language server counting a prompt's tokens, lsp/budget.py) encodes
  text exactly as the server does, without importing the model.
- ``min_tokens`` is a lower bound that costs a split, not an encode (its docstring says why it holds).
"""

from __future__ import annotations

import json


def text_only_json(tokenizer_json: str) -> str:
    """``tokenizer_json`` without its control tokens: the added tokens that are special or matched
    verbatim (``normalized`` false: tags such as ``<|mask|>``, ``<|fim_middle|>``, ``<tool_call>``).
    Added tokens that are ordinary text (normalized, not special: whitespace runs) stay. A string
    spelling a removed token then encodes as its characters: byte-level BPE never merges across the
    pre-tokenizer's pieces, so it cannot come back as the token."""
    spec = json.loads(tokenizer_json)
    spec["added_tokens"] = [
        t for t in spec.get("added_tokens") or [] if t.get("normalized") and not t.get("special")
    ]
    return json.dumps(spec)


def control_ids(tokenizer_json: str) -> dict[str, int]:
    """The control tokens ``text_only_json`` removes, by content: how a prompt's tags become ids."""
    spec = json.loads(tokenizer_json)
    return {
        t["content"]: t["id"]
        for t in spec.get("added_tokens") or []
        if not (t.get("normalized") and not t.get("special"))
    }


def min_tokens(text: str) -> int:
    """A lower bound on a byte-level BPE's token count of ``text`` that costs a split, not an encode
    (about 1/50 of one).

    Why it holds: the byte-level pre-tokenizer's pieces (GPT-2's pattern: `` ?\\p{L}+``,
    `` ?\\p{N}+``, `` ?[^\\s\\p{L}\\p{N}]+``, contractions, whitespace runs) each hold at most one
    run of non-whitespace characters, and BPE never merges across pieces; so every maximal
    non-whitespace run costs at least one token. ``bytes.split()`` splits on ASCII whitespace
    only, a subset of the pattern's ``\\s``, so its runs are never more than the pattern's
    (``str.split`` would also split on U+001C-U+001F, which the pattern does not). Special tokens
    only add splits."""
    return len(text.encode("utf-8", "surrogatepass").split())
