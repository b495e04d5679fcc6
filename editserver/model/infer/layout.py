"""Where a request's tokens sit, per model family: the seam between the engine and the one denoising loop.

Design decisions:
- A layout builds a decode's ``Rows`` (model/infer/cache.py) from a FIM or next-edit request, names
  the cache policy the family decodes with (and its exact reference), and turns a decoded edit answer
  back into region text. The engine asks its layout and never the family; the loop
  (model/infer/sampler.py) sees only Rows and a policy.
- ``Layout`` holds what the engine asks every layout and most answer alike: the FIM route, the block
  grid (none: ``block`` 0, ``lead`` 0) and the FIM answer in the decoded text (all of it); the
  engine asks and never tests which layout it has.
- ``OwnLayout``: this project's checkpoints. FIM is ``<|fim_prefix|>P<|fim_suffix|>S<|fim_middle|>``
  then the canvas; an edit is the prompt, ``<|rewrite|>``, then the canvas (at the region's rotary
  positions when the checkpoint was trained so). The context never attends to the canvas, so the
  context cache is exact (``ContextCache``). Inputs are cut to the checkpoint's training window.
- ``InPlaceLayout``: open-weight diffusion models trained with full attention over ``prefix
  [MASK]*n suffix`` and no FIM tokens. The canvas sits between prefix and suffix at contiguous
  positions (``Rows.suffix``). Each family's ends are its publisher's evaluation's (``INFILL``,
  sources in docs/open-weights.md): the Dream family puts its begin-of-text before the prefix and,
  as DreamOn's infilling code does, its end-of-text after the suffix; Open-dCoder neither; LLaDA its
  begin-of-text; LLaDA-MoE neither (its publisher ships no infilling code: docs/open-weights.md).
  A family that shifts its logits needs a token before the canvas, so an empty prefix without a
  begin-of-text gets the end-of-text. Over the window the publishers cut the sequence from
  its start; here the prefix keeps what the suffix leaves, and at least a quarter of the budget, so an
  editor's cursor near the top of a long file still reads the lines above it. Next edit: the Inception prompt as
  the user's turn of the chat template (raw when there is none), the rewrite on a canvas after it;
  the answer's region is the inside of its code fence or region tags when it wrote them; a prompt
  longer than the context is cut as our own model's window cuts (``fit_prompt``), and the
  completion reports the tokens dropped. Decoding
  uses Fast-dLLM's dual cache (``DualCache``), approximate; ``InPlaceNoCache`` is the exact reference.
- ``BlockLayout``: block-diffusion families (SDAR, Fast-dLLM v2), instruct models with no FIM training. FIM goes
  through the chat template: the user's turn holds the file with a hole marker and asks for the
  missing code only; the answer is the inside of a code fence when it writes one (``route`` names
  this route for /v1/models and each answer's ``editserver`` field). Next edits as for the other
  instruct families. Its canvas starts ``lead = context % block`` into the first block
  (model/infer/block_cache.py), and it decodes on the exact ``BlockCache``.
- ``SpmBlockLayout``: a block-diffusion family trained on FIM tokens (Stable-DiffCoder, on Seed-Coder's
  pretraining: ``FIM_TAGS``). FIM is the way it was trained, suffix-prefix-middle (``<[fim-suffix]>``
  suffix ``<[fim-prefix]>`` prefix ``<[fim-middle]>``, Seed-Coder tech report §2.2), then the canvas on
  the block grid, decoded on the exact ``BlockCache`` with no suffix rows: in SPM order the suffix is
  context, so nothing sits after the canvas. ``route = "fim"``; the answer is the canvas as written.
  A tokenizer without the three tags (a revision that lacks them) falls back to ``BlockLayout``'s
  chat route. Next edits go through the chat template as for the other instruct families.
- A layout also names the family's canvas edit (``canvas_edit``, model/infer/canvas_edit.py), None for all
  but DreamOn: ``BOS prefix [MASK]*n suffix EOS`` as Dream's, with ``<|expand|>`` and end-of-text
  reshaping the gap (the expand id from the checkpoint's tokenizer, ``expand_id``; model/infer/hf/).
"""

from __future__ import annotations

import torch

from editserver.model.infer.block_cache import BlockCache
from editserver.model.infer.cache import CachePolicy, ContextCache, DualCache, InPlaceNoCache, NoCache, Rows
from editserver.model.infer.canvas_edit import ExpandDelete
from editserver.protocol.prompt import (
    EDIT_CLOSE,
    EDIT_OPEN,
    EditPrompt,
    build_prompt,
    drop_cursor_tags,
    edit_canvas_pos,
    fim_window,
    fit_prompt,
    parse_edit_response,
)


def _pad(seqs: list[list[int]], fill: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded [B, L] ids and their lengths [B]."""
    L = max(1, max(len(s) for s in seqs))
    ids = torch.full((len(seqs), L), fill, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return ids.to(device), torch.tensor([len(s) for s in seqs], device=device)


class Layout:
    """What every layout answers the engine the same way unless it says otherwise."""

    route = "in-place"  # how a FIM request reaches the model (/v1/models, each answer's fim_route)
    block = 0  # the model's block grid (block diffusion); 0: none

    def lead(self, context: list[int]) -> int:
        """Canvas columns into its first block: none without a block grid."""
        return 0

    def fim_answer(self, text: str) -> str:
        """The FIM answer in the decoded text: all of it."""
        return text


class OwnLayout(Layout):
    """This project's FIM and next-edit layouts (the training layouts, model/train/data.py)."""

    family = "editserver"
    fim_overhead = 3  # the three FIM tags
    route = "fim-tokens"

    def __init__(self, tok):
        self.tok = tok
        self.cache: CachePolicy = ContextCache()
        self.exact_cache: CachePolicy = NoCache()
        self.canvas_edit: ExpandDelete | None = None

    def fim(
        self, pre: list[int], suf: list[int], canvas: int, window: int | None
    ) -> tuple[list[int], list[int] | None, int]:
        """Context ids, suffix ids (None: no text after the canvas) and prompt tokens dropped."""
        t, dropped = self.tok, 0
        if window is not None:
            # the same cut as training rows (model/train/data.py), never below half the window
            n_pre, n_suf = fim_window(len(pre), len(suf), max(window // 2, window - min(canvas, window) - 3))
            dropped = len(pre) - n_pre + len(suf) - n_suf
            pre, suf = pre[len(pre) - n_pre :], suf[:n_suf]
        return [t.fim_prefix_id, *pre, t.fim_suffix_id, *suf, t.fim_middle_id], None, dropped

    def edit(
        self, prompt: str, parsed: EditPrompt, canvas: int, window: int | None, context: int
    ) -> tuple[list[int], int, int]:
        """Context ids, the prompt's token count to hold against the ``context`` and the prompt
        tokens dropped."""
        full = self.tok.encode_prompt(parsed)  # the tags as ids, the user's text as text
        # cut as training rows were; a region too long for the window keeps the whole prompt
        fitted = (
            None
            if window is None
            else fit_prompt(parsed, self.tok.encode_prompt, window - canvas - 1, self.tok.min_tokens)
        )
        ids = full if fitted is None else fitted[1]
        return [*ids, self.tok.rewrite_id], len(full) + 1, len(full) - len(ids)

    def rows(
        self, contexts: list[list[int]], suffixes: list, canvas_lens: list[int], inference, device
    ) -> Rows:
        """The decode's rows; ``inference`` is read at every decode (a server may replace it)."""
        ids, lens = _pad(contexts, self.tok.eot_id, device)
        canvas_pos = None
        if inference.edit_canvas_at_region:
            region_open = self.tok.special_ids[EDIT_OPEN]
            canvas_pos = torch.tensor(
                [edit_canvas_pos(c, self.tok.rewrite_id, region_open) for c in contexts], device=device
            )
        return Rows(ids, lens, torch.tensor(canvas_lens, device=device), canvas_pos)

    def answer(self, text: str, region: str) -> str:
        return text


# per family: (begin-of-text before the prefix, end-of-text after the suffix); docs/open-weights.md
INFILL = {
    "dream": (True, True),
    "dreamon": (True, True),  # DreamOn's quickstart and eval/generator.py: BOS prefix masks suffix EOS
    "open-dcoder": (False, False),
    "llada": (True, False),
    "llada-moe": (False, False),
}


class InPlaceLayout(Layout):
    """Open-weight diffusion models: the canvas in place between prefix and suffix (module docstring)."""

    def __init__(self, tok, family: str, shift: bool):
        self.tok = tok
        self.family = family
        self.shift = shift
        self.cache: CachePolicy = DualCache()
        self.exact_cache: CachePolicy = InPlaceNoCache()
        bos, eos = INFILL.get(family, (False, False))
        self.head = [tok.bos_id] if bos and tok.bos_id is not None else []
        self.tail = [tok.eos_id] if eos and getattr(tok, "eos_id", None) is not None else []
        self.fim_overhead = max(1, len(self.head)) + len(self.tail)  # [B|E] prefix canvas suffix [E]
        expand = getattr(tok, "expand_id", None)
        self.canvas_edit = (
            ExpandDelete(expand, tok.eos_id) if family == "dreamon" and expand is not None else None
        )

    def _cut(
        self, pre: list[int], suf: list[int], canvas: int, window: int | None
    ) -> tuple[list[int], list[int], int]:
        """(prefix, suffix, tokens dropped) within ``window`` beside the canvas and the layout's own
        tokens (``fim_overhead``): the prefix keeps what the suffix leaves, and at least a quarter."""
        if window is None:
            return pre, suf, 0
        budget = max(window // 2, window - min(canvas, window) - self.fim_overhead)
        n_suf, n_pre = fim_window(len(suf), len(pre), budget)
        return pre[len(pre) - n_pre :], suf[:n_suf], len(pre) - n_pre + len(suf) - n_suf

    def _lead(self, ids: list[int]) -> list[int]:
        """A shifted family reads the canvas's first token from the position before it."""
        if ids or not self.shift:
            return ids
        return [self.tok.bos_id if self.tok.bos_id is not None else self.tok.eot_id]

    def fim(
        self, pre: list[int], suf: list[int], canvas: int, window: int | None
    ) -> tuple[list[int], list[int] | None, int]:
        pre, suf, dropped = self._cut(pre, suf, canvas, window)
        ctx = self.head + pre if self.head else self._lead(pre)
        return ctx, suf + self.tail, dropped

    def edit(
        self, prompt: str, parsed: EditPrompt, canvas: int, window: int | None, context: int
    ) -> tuple[list[int], int, int]:
        """A prompt longer than the window (else the context) leaves room for the canvas by the cuts our
        own model's window uses (snippets, outer file lines, old diffs; ``fit_prompt``); one that no
        cut fits is returned whole, for the engine to reject."""
        context = min(context, window) if window is not None else context

        def encode(p: EditPrompt) -> list[int]:  # the template's tags as ids, the prompt as text
            return self._lead(self.tok.encode_chat(build_prompt(p)))

        full = encode(parsed)
        if len(full) + canvas <= context:
            return full, len(full), 0
        fitted = fit_prompt(parsed, encode, context - canvas)
        if fitted is None:
            return full, len(full), 0
        return fitted[1], len(fitted[1]), len(full) - len(fitted[1])

    def rows(
        self, contexts: list[list[int]], suffixes: list, canvas_lens: list[int], inference, device
    ) -> Rows:
        ids, lens = _pad(contexts, self.tok.eot_id, device)
        suf, suf_lens = _pad([s or [] for s in suffixes], self.tok.eot_id, device)
        return Rows(ids, lens, torch.tensor(canvas_lens, device=device), None, suf, suf_lens)

    def answer(self, text: str, region: str) -> str:
        """The rewritten region in a chat answer: inside its code fence or region tags, else as written;
        an echoed cursor tag is dropped, the ``region``'s own spellings of it kept."""
        fenced = parse_edit_response(text)
        if fenced is not None:
            text = fenced
        elif EDIT_OPEN in text:
            text = text.split(EDIT_OPEN, 1)[1].split(EDIT_CLOSE, 1)[0].removeprefix("\n")
        return drop_cursor_tags(text, region)


HOLE = "<FILL_HERE>"
FIM_ASK = (
    "Write the code that replaces {hole} in this file. Answer with that code only, "
    "nothing before or after it.\n\n```\n{text}\n```"
)


class BlockLayout(InPlaceLayout):
    """Block-diffusion families: FIM through the chat template, canvas on the block grid (module docstring)."""

    route = "chat"  # how a FIM request reaches the model

    def __init__(self, tok, family: str, block: int):
        super().__init__(tok, family, False)
        self.block = block
        self.cache, self.exact_cache = BlockCache(), InPlaceNoCache()
        self.fim_overhead = len(tok.encode_chat(FIM_ASK.format(hole=HOLE, text=HOLE)))

    def lead(self, context: list[int]) -> int:
        """Canvas columns into its first block: the context's tokens past its last whole block."""
        return len(context) % self.block

    def fim(
        self, pre: list[int], suf: list[int], canvas: int, window: int | None
    ) -> tuple[list[int], list[int] | None, int]:
        pre, suf, dropped = self._cut(pre, suf, canvas, window)
        text = self.tok.decode(pre) + HOLE + self.tok.decode(suf)
        return self.tok.encode_chat(FIM_ASK.format(hole=HOLE, text=text)), None, dropped

    def fim_answer(self, text: str) -> str:
        """The code of a chat FIM answer: inside its fence when it wrote one."""
        fenced = parse_edit_response(text)
        return text if fenced is None else fenced


# per family: its FIM tags in the order they open the prompt (suffix, prefix, middle); module docstring
FIM_TAGS = {"stable-diffcoder": ("<[fim-suffix]>", "<[fim-prefix]>", "<[fim-middle]>")}


class SpmBlockLayout(BlockLayout):
    """Block diffusion with FIM tokens in suffix-prefix-middle order (module docstring)."""

    route = "fim"

    def __init__(self, tok, family: str, block: int, tags: tuple[int, int, int]):
        super().__init__(tok, family, block)
        self.tags = tags  # ids of the suffix, prefix and middle tags
        # a begin-of-text only where the tokenizer would add one to a raw prompt (its add_bos_token)
        bos = getattr(tok, "config", {}).get("add_bos_token") and tok.bos_id is not None
        self.head = [tok.bos_id] if bos else []
        self.fim_overhead = len(self.head) + 3

    def fim(
        self, pre: list[int], suf: list[int], canvas: int, window: int | None
    ) -> tuple[list[int], list[int] | None, int]:
        pre, suf, dropped = self._cut(pre, suf, canvas, window)
        s, p, m = self.tags
        return [*self.head, s, *suf, p, *pre, m], None, dropped

    def fim_answer(self, text: str) -> str:
        """The canvas is the middle itself: no fence to look inside."""
        return text


def fim_tags(tok, family: str) -> tuple[int, int, int] | None:
    """The ids of ``family``'s FIM tags in its tokenizer; None when it has none or lacks one."""
    names = FIM_TAGS.get(family)
    hf = getattr(tok, "hf", None)
    if names is None or hf is None:
        return None
    ids = tuple(hf.token_to_id(n) for n in names)
    return None if any(i is None for i in ids) else ids  # type: ignore[return-value]


def layout_for(checkpoint) -> Layout:
    """The layout of a loaded checkpoint (model/infer/checkpoint.py)."""
    block = getattr(checkpoint.model.cfg, "block_size", 0)
    if block and checkpoint.family != "editserver":
        tags = fim_tags(checkpoint.tokenizer, checkpoint.family)
        if tags is not None:  # trained on FIM tokens: FIM the way it was trained
            return SpmBlockLayout(checkpoint.tokenizer, checkpoint.family, block, tags)
        return BlockLayout(checkpoint.tokenizer, checkpoint.family, block)
    if checkpoint.family == "editserver":
        return OwnLayout(checkpoint.tokenizer)
    return InPlaceLayout(checkpoint.tokenizer, checkpoint.family, checkpoint.model.cfg.shift)
