"""The draft of a next-edit rewrite: which region token each canvas position would copy.

A rewrite mostly copies its region, so each canvas position gets the region token it would copy as an
extra input and a copy logit (model/infer/transformer.py). Where the rewrite changes the token count (a
rename to a longer name, an inserted line) a fixed index-to-index draft is off by the difference for
every later token, so the draft is *aligned*: the tokens written so far are matched against the
region (difflib opcodes), and the positions after them continue the region from where the match
ends, as a speculative-edit draft does after a divergence.

Design decisions:
- One pure function, ``align_draft(region, written, length)``, serves training and inference alike:
  training rows align the whole answer (every opcode known); the sampler aligns the committed prefix
  of each row before every denoising step (model/infer/sampler.py ``draft`` hook), so a position sees the
  draft training showed it once the tokens before it are written.
- Inside an ``equal`` block a position's draft is the very token it matches. Inside a ``replace`` or
  ``insert`` block (the new name, an added line) it is the region's continuation from the block's
  start, the same rule the positions after a partial prefix follow, so a half-written change gets
  the draft training gave its positions. Region tokens a ``delete`` drops are skipped.
- Past the region's end the draft is end-of-text: the answer ends where the region does, unless the
  model overrides the copy.
- *The history's renames are applied to the draft.* A diff line pair in the edit history that differs
  only by identifiers (``width`` -> ``size``) is a rename; the draft region has it applied, whole
  word, everywhere (``apply_renames``). The LSP already asks about the other occurrences of a removed
  name for the same reason (lsp/nextedit.py). Carrying the new name from the history into a copy is
  the induction a small model learns last: the `mini` run predicted the new name's tokens with
  log-probability -8.3 (chance over the vocabulary) after 400 steps with the plain draft, while
  copying was already right for 100% of unchanged tokens. With the rename in the draft the model
  still decides, token by token, whether to keep it: not in strings, comments or another object's
  attribute (synthetic rows rename code only; model/train/synth.py), not when the history's change was not
  a rename of this name. ``editserver bench renames`` reports the draft alone next to the model.
- Region and history are read back from the row's context tokens (training rows hold only tokens),
  so training and the engine build the same draft from the same prompt.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable, Sequence
from difflib import SequenceMatcher

import torch
from torch import Tensor

from editserver.model.infer.unmasking import first_true
from editserver.protocol.prompt import CURSOR, EDIT_CLOSE, EDIT_OPEN, HIST_CLOSE, HIST_OPEN, strip_one_newline

_WORD = re.compile(r"\w+")
# reserved words of the languages the LSP serves are never names, so never half of a rename
# (`echo(x)` -> `yield(x)` turns a call into a yield); words that are also common names elsewhere
# (`type`, `match`, `map`, `range`, `new`, `self`) are left out
_KEYWORDS = frozenset(
    keyword.kwlist
    + "catch chan const defer do enum export extends fn func function goto impl instanceof interface "
    "let mut nil null pub static struct super switch this throw typeof undefined var void".split()
)


def history_renames(history: str) -> list[tuple[str, str]]:
    """(old, new) identifier pairs of the history's renames, oldest first: a removed line followed by
    an added line with the same words, differing only in identifiers (not keywords) that map one to
    one, every old name gone from the added line and every new name absent from the removed one."""
    out: list[tuple[str, str]] = []
    removed: list[str] = []
    for line in history.splitlines():
        if line.startswith("-") and not line.startswith("---"):
            removed.append(line[1:])
            continue
        if line.startswith("+") and not line.startswith("+++") and removed:
            a, b = _WORD.findall(removed.pop(0)), _WORD.findall(line[1:])
            pairs = {(x, y) for x, y in zip(a, b) if x != y}
            olds, news = {x for x, _ in pairs}, {y for _, y in pairs}
            # a rename replaces every use of the old name on the line with a name the line did not
            # have: `f(a, b)` -> `f(b, a)` swaps arguments, `a + b` -> `b + b` reuses one
            ok = len(a) == len(b) and pairs and len(olds) == len(pairs)
            ok = ok and not (olds & set(b)) and not (news & set(a)) and not (olds | news) & _KEYWORDS
            if ok and all(not x[0].isdigit() and not y[0].isdigit() for x, y in pairs):
                out += sorted(pairs - set(out))
            continue
        removed = []
    return out


def apply_renames(text: str, renames: Sequence[tuple[str, str]]) -> str:
    """``text`` with each (old, new) applied as a whole word, in order."""
    for old, new in renames:
        text = re.sub(r"(?<!\w)" + re.escape(old) + r"(?!\w)", lambda _m, n=new: n, text)
    return text


def draft_region(context: Sequence[int], tok) -> list[int] | None:
    """The draft region of a next-edit row, tokenized as its answer would be: the region without the
    cursor tag (which splits a token in the prompt), the history's renames applied; read back from
    the row's context (``tok``: model.infer.tokenizer.Tokenizer). None for any other row."""
    ctx = list(context)
    if not ctx or ctx[-1] != tok.rewrite_id:
        return None
    ids = tok.special_ids
    if ids[EDIT_OPEN] not in ctx or ids[EDIT_CLOSE] not in ctx:
        return None
    a = ctx.index(ids[EDIT_OPEN]) + 1
    region = tok.decode(t for t in ctx[a : ctx.index(ids[EDIT_CLOSE], a)] if t != ids[CURSOR])
    region = strip_one_newline(region)  # the tag's own line break (prompt.build_prompt)
    history = ""
    if ids[HIST_OPEN] in ctx and ids[HIST_CLOSE] in ctx:
        h = ctx.index(ids[HIST_OPEN]) + 1
        history = tok.decode(ctx[h : ctx.index(ids[HIST_CLOSE], h)])
    return tok.encode(apply_renames(region, history_renames(history)))


def align_draft(region: Sequence[int], written: Sequence[int], length: int, eot_id: int) -> list[int]:
    """``length`` draft tokens for a canvas whose first ``len(written)`` tokens are ``written``."""
    region, written = list(region), list(written)[:length]
    out: list[int] = []
    nxt = 0  # region index the next unwritten position continues from
    ops = SequenceMatcher(None, region, written, autojunk=False).get_opcodes() if written else []
    for tag, i1, i2, j1, j2 in ops:
        if tag == "delete":
            continue
        out += [region[i] if i < len(region) else eot_id for i in range(i1, i1 + j2 - j1)]
        nxt = i2 if tag == "equal" else i1 + (j2 - j1)
    tail = length - len(out)
    out += [region[i] if i < len(region) else eot_id for i in range(nxt, nxt + tail)]
    return out


def step_drafts(regions: Sequence[Sequence[int] | None], eot_id: int) -> Callable[[Tensor, Tensor], Tensor]:
    """The sampler's ``draft`` hook for rows with these regions (None: a row without a draft, -1).

    Before each step a row's draft is aligned on its committed prefix (the positions before its first
    undecided one). Committed tokens never change, so a row's draft is computed once per prefix length.
    """
    memo: dict[tuple[int, int], list[int]] = {}

    def draft(canvas: Tensor, fixed: Tensor) -> Tensor:  # [B, N] x2 -> [B, N]
        B, N = canvas.shape
        out = torch.full((B, N), -1, dtype=torch.long)
        first = first_true(~fixed).tolist()  # [B]
        for b, region in enumerate(regions):
            if region is None:
                continue
            key = (b, first[b])
            if key not in memo:
                memo[key] = align_draft(region, canvas[b, : first[b]].tolist(), N, eot_id)
            out[b] = torch.tensor(memo[key])
        return out.to(canvas.device)

    return draft
