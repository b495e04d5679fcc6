"""The model's entry point: ``Engine.complete(request) -> Completion``.

Design decisions:
- Two request types, both plain dataclasses with no HTTP in sight (model/infer/requests.py):
  ``FimRequest`` (prefix/suffix) and ``EditRequest`` (an Inception next-edit prompt). The server,
  the replay harness and the benchmarks all call this one function, so they measure what users get.
- Where the tokens sit is the model family's layout (model/infer/layout.py): for this project's
  checkpoints ``<|fim_prefix|>P<|fim_suffix|>S<|fim_middle|>`` then a canvas of ``max_tokens`` masks,
  and for an edit the prompt, ``<|rewrite|>``, then a canvas as long as the region plus slack; for
  open-weight families (model/infer/hf/) the canvas in place between prefix and suffix, and an edit
  as a chat turn. The layout also names the family's cache policy; ``Engine(..., cache="exact")``
  takes its exact reference instead. Nothing below asks which family it serves.
  With the checkpoint's ``window_tokens`` set (the row length it was trained on), inputs are cut to
  fit it exactly as training rows were: FIM keeps the prefix and suffix tokens nearest the cursor
  (``fim_window``); an edit prompt loses snippets, outer file lines and old diffs (``fit_prompt``).
  A checkpoint trained so (``edit_canvas_at_region``) places a rewrite's canvas at the rotary
  positions of its region (``edit_canvas_pos``), exactly as its training rows were; a
  ``canvas_draft`` model also gets the region's tokens as the canvas's draft, aligned on what each
  row has written before every step (model/infer/draft.py).
  Both are exactly the training layouts (model/train/data.py).
- Every decode setting comes from one decode plan (model/infer/plan.py ``plan_for``), resolved once
  per request from its options and the checkpoint's ``InferenceConfig``; ``Engine.plan`` is also the
  scheduler's batch key. The one loop (model/infer/sampler.py) runs it.
- Over-window input is treated the same on both endpoints: beyond the model's context window
  (``context_length`` tokens of prompt) it is rejected with ``ContextTooLongError``; within it, a
  checkpoint with ``window_tokens`` reads only that many (the cut training used) and the completion
  says how many prompt tokens were dropped (``dropped_tokens``).
- The canvas grows: a FIM request's canvas starts at the checkpoint's ``fim_max_tokens`` (a one-line
  request's at ``line_max_tokens``), or the request's ``max_tokens`` if smaller, and gains a block at
  a time only while the answer goes on, so a short answer costs the same whatever larger
  ``max_tokens`` a client sends.
- Stop sequences cut the decoded text, and they also end decoding early: once the committed start of
  a row's answer (every position up to the first undecided one) holds a stop sequence, nothing after
  it can change the returned text, so the row ends there (the sampler's ``done`` hook). The text is
  the same as decoding the whole canvas and cutting afterwards; the steps are fewer (the LSP's
  mid-line completions stop at the first newline).
- Context reuse across requests (``prefix_cache_mb``, model/infer/prefix.py) hands the family's cache
  policy a store of recent contexts' keys/values; a CPU weight layout (``Engine.load(quantize=...)``,
  int8 or packed, model/infer/quant.py) changes the weights, not the engine.
- ``complete_batch`` decodes several same-kind requests in one batch (rows padded, key-padding
  masked); ``complete`` is the batch of one. ``open(plan)`` starts such a batch that requests can
  join while it runs, at its block boundaries (model/infer/joinable.py), each answer
  delivered as soon as its request is done: the server's scheduler (server/scheduler.py).
- A single-line FIM request (its stops include "\n") is also decoded on the checkpoint's
  ``line_canvases`` shorter than its own canvas, as extra rows of the same batch, and the answer the
  model finds likeliest wins: the highest sum of log-confidences over what the score aggregates
  (the answer's tokens and its end). Training pads each answer with 1-49 end-of-text tokens, so the
  canvas length is a length prior, and the best length differs per line (docs/experiments.md). Each
  row keeps its own canvas, so the extra rows do not change the request's own row (sampler.py). A
  row ends as soon as another row of its request has finished with a likelihood its committed start
  already falls below (model/infer/early_stop.py): it could not win, so that saves steps and changes no answer.
- A FIM row also ends once the shared trimming (protocol/postprocess.py ``settled``) has cut its
  committed text for good (a dedent out of the hole, a repeated line, runaway repetition): what it
  would write next is never shown, so a runaway answer costs what its trimmed text costs, whatever
  ``max_tokens`` says. The raw text is then the committed start; the shown text is the same.
- A family whose model chooses its answer's length (DreamOn, model/infer/canvas_edit.py) decodes
  FIM on a canvas that starts at the publisher's 4 masks and that the model widens (``<|expand|>``)
  and narrows (end-of-text in the gap): ``max_tokens`` is only the bound on its width, checked
  against the context window up front.
- A single-line FIM request also gets its effort's step budget (``line_steps``, unmasking.StepBudget):
  each block takes at most that many steps, the last committing whatever is still masked. Multi-line
  requests keep no budget (a 32-token block of code in 4 steps would be 8 tokens a step, far past
  what one line's measurements cover), so they plan, and batch, apart.
- Edit completions carry a score (aggregate of the per-token confidences, model/infer/scoring.py) and
  whether it clears the checkpoint's threshold for its kind (in-file, or cross-file when the request
  says ``cross_file``: config.py ``edit_threshold``); an answer equal to the region, or one
  that moves only its layout (model/infer/scoring.py ``layout_only``), is reported as ``unchanged``.
- FIM completions carry the same score and whether it clears the checkpoint's ``fim_threshold``. A
  blank answer (nothing, or only whitespace) proposes nothing, so it never counts as above the
  threshold, as an unchanged rewrite never does for edits. The text is always the model's: hiding
  it is the caller's decision (the server answers "", editserver/server/outcome.py).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable
from pathlib import Path

import torch

from editserver.model.infer import lengths, quant
from editserver.model.infer.checkpoint import Checkpoint
from editserver.model.infer.draft import draft_region, step_drafts
from editserver.model.infer.early_stop import done_hook
from editserver.model.infer.joinable import Running
from editserver.model.infer.layout import layout_for
from editserver.model.infer.loader import load_checkpoint
from editserver.model.infer.loop_types import Hooks, Member, SampleResult, Tokens
from editserver.model.infer.plan import (
    BLOCK_EDITS,
    DecodePlan,
    block_plan,
    block_rule,
    plan_for,
    published_plan,
    resolve_effort,
)
from editserver.model.infer.prefix import DEFAULT_MB, PrefixStore
from editserver.model.infer.requests import Completion, EditRequest, FimRequest, SamplingOptions
from editserver.model.infer.scoring import aggregate, layout_only
from editserver.model.infer.transformer import ContextTooLongError
from editserver.protocol.postprocess import settled
from editserver.protocol.prompt import EditPrompt, parse_prompt

__all__ = ["Completion", "EditRequest", "Engine", "FimRequest", "SamplingOptions", "line_likelihood"]


class Engine:
    def __init__(
        self,
        checkpoint: Checkpoint,
        device: str = "cpu",
        cache: str = "default",
        max_context: int | None = None,
        prefix_cache_mb: float | None = None,
        prefix_cache_suffix: bool = False,
    ):
        if cache not in ("default", "exact"):
            raise ValueError(f"cache must be default or exact, got {cache!r}")
        self.ck = checkpoint
        self.model = checkpoint.model.to(device).eval()
        self.tok = checkpoint.tokenizer
        self.inference = checkpoint.inference
        self.device = device
        self.context_length = min(self.model.cfg.max_seq_len, max_context or self.model.cfg.max_seq_len)
        self.layout = layout_for(checkpoint)
        self.cache = self.layout.exact_cache if cache == "exact" else self.layout.cache
        self.prefix: PrefixStore | None = None
        if cache == "default":
            self.use_prefix_cache(prefix_cache_mb, prefix_cache_suffix)

    def use_prefix_cache(self, mb: float | None, suffix: bool = False) -> None:
        """Keep up to ``mb`` MiB of recent contexts' keys/values for later requests to reuse
        (model/infer/prefix.py); 0 turns reuse off, None takes the family's default
        (``prefix.DEFAULT_MB``); ``suffix`` reuses the text after a change too (not for block
        families, where nothing after a change is reusable). Reused keys/values are approximate for
        bidirectional models, so each default follows ``editserver bench keystrokes``
        (docs/experiments.md); for block-diffusion models they are exact and reuse is on."""
        if mb is None:
            # block diffusion's reuse is exact (model/infer/block_cache.py)
            mb = DEFAULT_MB.get(self.family, DEFAULT_MB["block" if self.block_size else "open"])
        if mb < 0:
            raise ValueError(f"prefix cache size must be at least 0 MiB, got {mb}")
        if suffix and self.block_size:  # a no-op option is an error: every block after a change depends on it
            raise ValueError(
                f"--prefix-cache-suffix reuses nothing for a block-diffusion model ({self.family})"
            )
        self.prefix = PrefixStore(int(mb * 2**20), suffix=suffix) if mb > 0 else None
        self.cache = dataclasses.replace(self.cache, store=self.prefix)

    @classmethod
    def load(
        cls,
        path: str | Path | None = None,
        device: str = "cpu",
        dtype: torch.dtype | str = torch.float32,
        max_context: int | None = None,
        chat_template: str = "auto",
        prefix_cache_mb: float | None = None,
        quantize: str = "none",
        prefix_cache_suffix: bool = False,
        block_size: int | None = None,
    ) -> Engine:
        """``quantize``: "int8" (weight-only int8), "w8a8" (int8 step activations too) or "packed"
        (oneDNN layout) on the CPU (model/infer/quant.py)."""
        kw = {} if max_context is None else {"max_context": max_context}
        kw.update({} if block_size is None else {"block_size": block_size})
        ck = load_checkpoint(path, device=device, dtype=dtype, chat_template=chat_template, **kw)
        quant.quantize(ck.model, quantize)
        return cls(
            ck,
            device,
            max_context=max_context,
            prefix_cache_mb=prefix_cache_mb,
            prefix_cache_suffix=prefix_cache_suffix,
        )

    @property
    def family(self) -> str:
        return self.ck.family

    @property
    def block_size(self) -> int | None:
        """A block-diffusion model's block in use (model/infer/layout.py ``BlockLayout``); None otherwise."""
        return self.layout.block or None

    @property
    def fim_route(self) -> str:
        """How FIM requests reach the model: fim-tokens (ours), in-place or chat (the chat template)."""
        return self.layout.route

    @property
    def dtype(self) -> str:
        return str(next(self.model.parameters()).dtype).removeprefix("torch.")

    @property
    def num_parameters(self) -> int:
        return quant.parameter_count(self.model)  # the size, not the stored form (--quantize)

    @property
    def max_output_tokens(self) -> int:
        return 1024

    # ---- layout --------------------------------------------------------------------------------
    @property
    def window(self) -> int:
        """Prompt tokens the model actually reads: the checkpoint's training window, else its context."""
        return self.inference.window_tokens or self.context_length

    def _fim_canvas(self, req: FimRequest) -> int:
        """The request's canvas cap: its ``max_tokens`` (else the checkpoint's), at most
        ``max_output_tokens``; not validated here (``_layout`` rejects one below 1)."""
        n = req.max_tokens if req.max_tokens is not None else self.inference.fim_max_tokens
        return min(n, self.max_output_tokens)

    def _check_prompt(self, prompt_tokens: int) -> None:
        if prompt_tokens > self.context_length:
            raise ContextTooLongError(
                f"prompt of {prompt_tokens} tokens exceeds the context window of {self.context_length} tokens"
            )

    def fim_layout(self, req: FimRequest, canvas: int) -> tuple[list[int], list[int] | None, int]:
        """Context ids, suffix ids (in-place layouts; None otherwise) and the prompt tokens the window
        dropped, of a FIM request decoded on a ``canvas``-token canvas (model/infer/layout.py)."""
        pre, suf = self.tok.encode(req.prefix), self.tok.encode(req.suffix)
        self._check_prompt(len(pre) + len(suf) + self.layout.fim_overhead)
        return self.layout.fim(pre, suf, canvas, self.inference.window_tokens)

    def fim_context(self, req: FimRequest, canvas: int) -> tuple[list[int], int]:
        """The context ids of a FIM request on a ``canvas``-token canvas and the prompt tokens dropped."""
        ctx, _, dropped = self.fim_layout(req, canvas)
        return ctx, dropped

    def _edit_context(self, req: EditRequest) -> tuple[list[int], EditPrompt, int, int]:
        """Context ids, the parsed prompt, the canvas length and the prompt tokens dropped."""
        parsed = parse_prompt(req.prompt, req.cursor_index)  # raises PromptError on malformed prompts
        region_tokens = len(self.tok.encode(parsed.region))
        canvas = region_tokens + self.inference.edit_slack_tokens
        if req.max_tokens is not None:
            canvas = min(canvas, req.max_tokens)
        ids, full, dropped = self.layout.edit(
            req.prompt, parsed, canvas, self.inference.window_tokens, self.context_length
        )
        self._check_prompt(full)
        return ids, parsed, canvas, dropped

    def _check_fits(self, prompt_tokens: int, canvas: int) -> None:
        if prompt_tokens + canvas > self.context_length:
            raise ContextTooLongError(
                f"prompt of {prompt_tokens} tokens plus {canvas} output tokens exceeds the "
                f"context window of {self.context_length} tokens"
            )

    # ---- the decode plan -----------------------------------------------------------------------
    @staticmethod
    def kind_of(req: FimRequest | EditRequest) -> str:
        if isinstance(req, EditRequest):
            return "edit"
        return "line" if "\n" in req.options.stop else "fim"

    def plan(self, req: FimRequest | EditRequest) -> DecodePlan:
        """Everything the request's decode needs (model/infer/plan.py); ValueError on bad options."""
        kind = self.kind_of(req)
        edit = self.layout.canvas_edit if kind != "edit" else None  # FIM only: what the family was tuned for
        if self.layout.block:  # block diffusion (model/infer/plan.py ``block_plan``)
            cache = self.layout.exact_cache if req.options.published else self.cache
            rule = block_rule(self.family, self.layout.block, req.options.published)
            revise = BLOCK_EDITS.get(self.family)  # LLaDA2.1's token editing (model/infer/token_edit.py)
            o, b = req.options, self.layout.block
            return block_plan(self.inference, o, kind, cache, b, rule, o.published, revise)
        if req.options.published:
            return published_plan(self.family, req.options, kind, self.layout.exact_cache, edit)
        return plan_for(self.inference, req.options, kind, self.cache, edit)

    def resolve_effort(self, effort: str | None, edit: bool = False) -> str:
        """The effort a request runs at (model/infer/plan.py ``resolve_effort``)."""
        return resolve_effort(self.inference, effort, "edit" if edit else "fim")

    # ---- entry point ---------------------------------------------------------------------------
    def complete(self, req: FimRequest | EditRequest) -> Completion:
        return self.complete_batch([req])[0]

    def complete_batch(self, reqs: list[FimRequest] | list[EditRequest]) -> list[Completion]:
        """Answers to requests that share one decode plan (ValueError otherwise)."""
        if not reqs:
            return []
        plan = self.plan(reqs[0])
        if any(self.plan(r) != plan for r in reqs[1:]):
            raise ValueError("a batch holds requests of one decode plan")
        if plan.fixed_canvas and plan.line_canvases:  # fixed lengths side by side (model/infer/lengths.py)

            def decode(rows: list, _groups: list[list[int]]) -> list[Completion]:
                return self._decode(plan, rows)

            return lengths.complete(reqs, plan.line_canvases, self._fim_canvas, decode, line_likelihood)
        return self._decode(plan, reqs)

    def _decode(self, plan: DecodePlan, reqs: list) -> list[Completion]:
        """Every request's answer from one decode of them all."""
        run = self.open(plan)
        out: list[Completion | None] = [None] * len(reqs)
        for i, r in enumerate(reqs):
            run.join(r, functools.partial(out.__setitem__, i))
        run.run()
        return out

    def open(self, plan: DecodePlan) -> Running:
        """A decode of requests planned ``plan`` that more can join while it runs (``Running``)."""
        # read at every decode, not once at load: ``self.inference`` may be replaced (server overrides)
        self.model.draft_bias = self.inference.draft_bias
        keep = plan.edit.proposes if plan.edit is not None else ()  # a canvas edit's own ids
        tokens = Tokens(
            self.tok.mask_id, self.tok.eot_id, tuple(i for i in self.suppressed_ids() if i not in keep)
        )
        return Running(self.model, plan, tokens, self.device, self.plan, self._member)

    def _member(self, req: FimRequest | EditRequest, plan: DecodePlan, deliver: Callable) -> Member:
        """The rows of one request (its own canvas first, then its extra one-line canvases) as a member
        of a decode; ``deliver`` gets its answer once they are done: the likeliest of its rows'."""
        t0 = time.perf_counter()
        rows: list[FimRequest | EditRequest] = [req]
        own = self._fim_canvas(req) if isinstance(req, FimRequest) else 0
        if not plan.fixed_canvas:  # fixed lengths are rows of their own (model/infer/lengths.py)
            rows += [dataclasses.replace(req, max_tokens=n) for n in plan.line_canvases if n < own]
        contexts, suffixes, canvas_lens, parsed, dropped = self._layout(rows)
        canvas_len = max(canvas_lens)
        first = None
        if plan.edit is not None:  # the model widens its canvas up to max_tokens (canvas_edit.py)
            first = min(plan.edit.start, canvas_len)
        elif plan.kind != "edit" and not plan.fixed_canvas:  # the canvas grows (module docstring)
            start = self.inference.line_max_tokens if plan.kind == "line" else self.inference.fim_max_tokens
            first = max(min(n, start) for n in canvas_lens)
        for ctx, suf in zip(contexts, suffixes):
            fits = canvas_len if first is None or plan.edit is not None else first
            self._check_fits(len(ctx) + len(suf or ()), fits)

        def done(m: Member) -> None:
            latency = time.perf_counter() - t0
            outs = self._completions(m.result, rows, contexts, canvas_lens, parsed, dropped, latency)
            # max keeps the first of equals: a tie goes to the request's own canvas
            deliver(max(outs, key=line_likelihood))

        hooks = self._hooks(rows, contexts, [list(range(len(rows)))])
        decode_rows = self.layout.rows(contexts, suffixes, canvas_lens, self.inference, self.device)
        lead = self.layout.lead(contexts[0])  # into its first block (block grid; else 0)
        return Member(decode_rows, canvas_len, first, hooks, done, lead)

    def _layout(self, reqs: list[FimRequest | EditRequest]) -> tuple[list, list, list[int], list, list[int]]:
        """Each row's context ids, suffix ids (or None), canvas length, parsed edit prompt (None for
        FIM) and prompt tokens dropped."""
        contexts, suffixes, canvas_lens, parsed, dropped = [], [], [], [], []
        for r in reqs:
            suf, p = None, None
            if isinstance(r, FimRequest):
                n = self._fim_canvas(r)
                if n < 1:
                    raise ValueError("max_tokens must be at least 1")
                ctx, suf, d = self.fim_layout(r, n)
            else:
                ctx, p, n, d = self._edit_context(r)
            contexts.append(ctx)
            suffixes.append(suf)
            canvas_lens.append(n)
            parsed.append(p)
            dropped.append(d)
        return contexts, suffixes, canvas_lens, parsed, dropped

    @staticmethod
    def _ends(reqs: list) -> list:
        """Per row, when a FIM answer is decided: once the shared trimming (protocol/postprocess.py
        ``settled``) cuts its committed text for good, nothing more it writes can be shown."""
        return [
            functools.partial(settled, prefix=r.prefix, suffix=r.suffix)
            if isinstance(r, FimRequest)
            else None
            for r in reqs
        ]

    def _hooks(self, reqs: list, contexts: list[list[int]], groups: list[list[int]]) -> Hooks:
        o = reqs[0].options
        observe = None
        if o.on_step is not None:
            cb = o.on_step

            def observe(canvas: torch.Tensor) -> None:
                cb(self._draft(canvas[0]))

        draft = None
        if self.model.cfg.canvas_draft:  # FIM rows have no region: None, no draft
            draft = step_drafts([draft_region(c, self.tok) for c in contexts], self.tok.eot_id)
        return Hooks(
            observe=observe,
            done=done_hook(
                [r.options.stop for r in reqs],
                groups,
                self.tok.decode,
                self.tok.eot_id,
                self._ends(reqs),
                frozenset(getattr(self.tok, "turn_end_ids", ())),
            ),
            draft=draft,
            should_stop=(o.cancel.is_set if o.cancel is not None else None),
        )

    def _completions(
        self,
        res: SampleResult,
        reqs: list,
        contexts: list,
        canvas_lens: list,
        parsed: list,
        dropped: list,
        latency,
    ) -> list[Completion]:
        """Each row of a member's result as a completion."""
        out = []
        for i, r in enumerate(reqs):
            c = self._completion(res, i, r, len(contexts[i]), canvas_lens[i], latency)
            c.dropped_tokens = dropped[i]
            p = parsed[i]
            if p is not None:
                c.text = self.layout.answer(c.text, p.region)
                c.region = p.region
                c.unchanged = c.text == p.region or layout_only(p.region, c.text)
                c.threshold = self.inference.edit_threshold(r.cross_file)
                c.above_threshold = (not c.unchanged) and c.score >= c.threshold
            else:
                c.text = self.layout.fim_answer(c.text)  # inside a chat answer's fence (BlockLayout)
                c.threshold = self.inference.fim_threshold
                c.above_threshold = bool(c.text.strip()) and c.score >= c.threshold
            out.append(c)
        return out

    def _completion(
        self, res: SampleResult, i: int, r: FimRequest | EditRequest, prompt: int, canvas: int, latency: float
    ) -> Completion:
        """Row ``i`` of a decode as text, cut at its first stop sequence."""
        n = min(int(res.lengths[i]), canvas)
        toks = res.tokens[i, :n].tolist()
        confs = res.confidences[i, :n].tolist()
        text = self.tok.decode(toks)
        finish = "stop" if bool(res.finished[i]) and int(res.lengths[i]) < canvas else "length"
        matched = None
        for s in r.options.stop:
            cut = text.find(s) if s else -1
            if cut >= 0:
                text, finish, matched = text[:cut], "stop", s
        if res.cancelled:
            finish = "cancelled"
        scored = self._scored(res, i, n, confs)
        return Completion(
            text=text,
            finish_reason=finish,
            prompt_tokens=prompt,
            completion_tokens=n,
            score=aggregate(scored, self.inference.score_aggregate),
            token_confidences=confs,
            steps=res.steps,
            model_calls=res.model_calls,
            row_steps=res.row_steps,
            latency_s=latency,
            scored_confidences=scored,
            stop_sequence=matched,
            canvas_tokens=canvas,
        )

    def suppressed_ids(self) -> list[int]:
        """Layout tags the sampler never proposes: every special token but the canvas filler
        (end-of-text or pad) and an end-of-turn, which an instruct model writes to end its answer
        (the tokenizer's ``turn_end_ids``; decoding cuts the text there)."""
        allowed = {self.tok.eot_id, *getattr(self.tok, "turn_end_ids", ())}
        return [i for i in self.tok.special_ids.values() if i not in allowed]

    @staticmethod
    def _scored(res, i: int, n: int, confs: list[float]) -> list[float]:
        """Confidences that make the score: the answer's tokens and the decision to stop there.

        The first end-of-text was chosen by the model (later ones are filled), so its confidence says
        how sure the model is that the answer ends here; an empty answer is scored by it alone.
        """
        if n < res.tokens.shape[1] and bool(res.finished[i]):
            return [*confs, float(res.confidences[i, n])]
        return confs

    def _draft(self, row: torch.Tensor) -> str:
        """A canvas as text: masks shown as nothing, stopped at the first end-of-text."""
        toks = row.tolist()
        if self.tok.eot_id in toks:
            toks = toks[: toks.index(self.tok.eot_id)]
        return self.tok.decode(t for t in toks if t != self.tok.mask_id)


def line_likelihood(c: Completion) -> float:
    """log P(answer, its end) under the model, as committed: sum of log-confidences (an empty answer
    is scored by its end alone), so a longer answer must earn each extra token."""
    return sum(math.log(max(x, 1e-9)) for x in c.scored_confidences)
