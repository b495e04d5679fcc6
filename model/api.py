"""The model's entry point: ``Engine.complete(request) -> Completion``.

Design decisions:
- Two request types, both plain dataclasses with no HTTP in sight: ``FimRequest`` (prefix/suffix)
  and ``EditRequest`` (an Inception next-edit prompt). The server, the replay harness and the
  benchmarks all call this one function, so they measure what users get.
- FIM layout: ``<|fim_prefix|>P<|fim_suffix|>S<|fim_middle|>`` then a canvas of ``max_tokens``
  masks; edit layout: the prompt, ``<|rewrite|>``, then a canvas as long as the region plus slack.
  With the checkpoint's ``window_tokens`` set (the row length it was trained on), inputs are cut to
  fit it exactly as training rows were: FIM keeps the prefix and suffix tokens nearest the cursor
  (``fim_window``); an edit prompt loses snippets, outer file lines and old diffs (``fit_prompt``).
  A checkpoint trained so (``edit_canvas_at_region``) places a rewrite's canvas at the rotary
  positions of its region (``edit_canvas_pos``), exactly as its training rows were; a
  ``canvas_draft`` model also gets the region's tokens as the canvas's draft, aligned on what each
  row has written before every step (model/draft.py).
  Both are exactly the training layouts (model/data.py).
- The context window is enforced, never truncated: prompt plus canvas beyond 32,768 tokens raises
  ``ContextTooLongError``.
- ``effort`` (instant|low|medium|high) picks the unmasking rule (a confidence threshold, or a joint
  error bound where the preset sets ``gamma``) and block size from the checkpoint's
  ``InferenceConfig``; a request may override the threshold directly (a threshold rule then).
- Stop sequences cut the decoded text, and they also end decoding early: once the committed start of
  a row's answer (every position up to the first undecided one) holds a stop sequence, nothing after
  it can change the returned text, so the row ends there (the sampler's ``done`` hook). The text is
  the same as decoding the whole canvas and cutting afterwards; the steps are fewer (the LSP's
  mid-line completions stop at the first newline).
- ``complete_batch`` decodes several same-kind requests in one batch (rows padded, key-padding
  masked); ``complete`` is the batch of one.
- A single-line FIM request (its stops include "\n") is also decoded on the checkpoint's
  ``line_canvases`` shorter than its own canvas, as extra rows of the same batch, and the answer the
  model finds likeliest wins: the highest sum of log-confidences over what the score aggregates
  (the answer's tokens and its end). Training pads each answer with 1-49 end-of-text tokens, so the
  canvas length is a length prior, and the best length differs per line (docs/model-history.md, session 14). Each
  row keeps its own canvas, so the extra rows do not change the request's own row (sampler.py). A
  row ends as soon as another row of its request has finished with a likelihood its committed start
  already falls below (model/ensemble.py): it could not win, so that saves steps and changes no answer.
- A single-line FIM request also gets its effort's step budget (``line_steps``, sampler.StepBudget):
  each block takes at most that many steps, the last committing whatever is still masked. It is per
  row, so a batch may mix such requests with multi-line ones, which keep no budget (a 32-token block
  of code in 4 steps would be 8 tokens a step, far past what one line's measurements cover).
- Edit completions carry a score (aggregate of the per-token confidences, model/scoring.py) and
  whether it clears the checkpoint's selectivity threshold; an answer equal to the region, or one
  that moves only its layout (model/scoring.py ``layout_only``), is reported as ``unchanged``.
- FIM completions carry the same score and whether it clears the checkpoint's ``fim_threshold``. A
  blank answer (nothing, or only whitespace) proposes nothing, so it never counts as above the
  threshold, as an unchanged rewrite never does for edits. The text is always the model's: hiding
  it is the caller's decision (the server answers "", editserver/outcome.py).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from model.checkpoint import Checkpoint, load_checkpoint
from model.draft import draft_region, step_drafts
from model.drafter import Drafter
from model.ensemble import outscored
from model.lookahead import Lookahead
from model.prompt import (
    EDIT_OPEN,
    EditPrompt,
    edit_canvas_pos,
    fim_window,
    fit_prompt,
    parse_prompt,
)
from model.sampler import (
    JointRule,
    LeftmostRule,
    StepBudget,
    ThresholdRule,
    TopKRule,
    UnmaskRule,
    denoise,
    first_true,
)
from model.scoring import aggregate, layout_only
from model.transformer import ContextTooLongError

EFFORTS = ("instant", "low", "medium", "high")


@dataclass
class SamplingOptions:
    temperature: float = 0.0
    top_p: float = 1.0
    presence_penalty: float = 0.0
    stop: list[str] = field(default_factory=list)
    effort: str | None = None  # None: the checkpoint's default effort
    threshold: float | None = None  # overrides the effort's unmasking threshold
    block_size: int | None = None  # overrides the effort's semi-autoregressive block size
    line_steps: int | None = None  # overrides the effort's single-line step budget (0: no budget)
    sequential: bool = False  # one token per step (the quality baseline): the most confident
    left_to_right: bool = False  # with ``sequential``: the leftmost still-masked position each step
    # verify this many guessed future steps of the rule per model call (model/lookahead.py): the
    # rule's own answer in fewer calls; None: the effort's ``lookahead``, 0: off
    lookahead: int | None = None
    # guesses per row and call: more than the depth makes them a tree (runner-up tokens; model/lookahead.py)
    lookahead_nodes: int | None = None  # None: the effort's ``lookahead_nodes`` (None there: a chain)
    # accept a guessed step the model agrees with, in whatever order (model/lookahead.py); None: the effort's
    lookahead_agree: bool | None = None
    # with lookahead_agree: accept a guessed token the model ranks second at no less than this share of
    # its first's probability (model/lookahead.py); None: the effort's ``lookahead_accept``
    lookahead_accept: float | None = None
    # with lookahead: guesses re-predicted by the checkpoint's drafter (model/drafter.py); None: the effort's
    lookahead_draft: bool | None = None
    seed: int = 0
    record_canvases: bool = False  # keep every intermediate draft (for ``diffusing`` streams)
    on_step: Callable[[str], None] | None = None  # called with the whole current draft each step
    cancel: threading.Event | None = None  # set it to stop decoding


@dataclass
class FimRequest:
    prefix: str
    suffix: str = ""
    max_tokens: int | None = None
    options: SamplingOptions = field(default_factory=SamplingOptions)


@dataclass
class EditRequest:
    prompt: str  # Inception's next-edit layout (model/prompt.py)
    max_tokens: int | None = None
    options: SamplingOptions = field(default_factory=SamplingOptions)


@dataclass
class Completion:
    text: str
    finish_reason: str  # "stop" | "length" | "cancelled"
    prompt_tokens: int
    completion_tokens: int
    score: float  # aggregate confidence in [0, 1]
    token_confidences: list[float]
    steps: int
    model_calls: int
    latency_s: float
    canvases: list[str] = field(default_factory=list)
    # next edit only
    region: str | None = None  # the editable region as sent (without the cursor tag)
    unchanged: bool = False
    # FIM: a non-blank answer scoring at least ``fim_threshold``; next edit: a changed rewrite
    # scoring at least ``selectivity_threshold``
    above_threshold: bool = True
    # what ``score`` aggregates: ``token_confidences`` plus the decision to stop there (``_scored``)
    scored_confidences: list[float] = field(default_factory=list)
    # the stop sequence the text was cut at; None when the answer ended at end-of-text or the canvas
    # end (both are finish_reason "stop"/"length" too, so this is how a caller tells them apart)
    stop_sequence: str | None = None
    row_steps: int = 0  # canvas rows the steps computed: the compute lookahead spends for fewer steps

    @property
    def tokens_per_step(self) -> float:
        return self.completion_tokens / self.steps if self.steps else 0.0


class Engine:
    def __init__(self, checkpoint: Checkpoint, device: str = "cpu"):
        self.ck = checkpoint
        self.model = checkpoint.model.to(device).eval()
        self.tok = checkpoint.tokenizer
        self.inference = checkpoint.inference
        self.device = device
        self.context_length = self.model.cfg.max_seq_len

    @classmethod
    def load(cls, path: str | Path | None = None, device: str = "cpu") -> Engine:
        return cls(load_checkpoint(path, device=device), device)

    @property
    def max_output_tokens(self) -> int:
        return 1024

    # ---- layout --------------------------------------------------------------------------------
    def _fim_canvas(self, req: FimRequest) -> int:
        """The request's canvas length: its ``max_tokens`` (else the checkpoint's), at most
        ``max_output_tokens``; not validated here (``_decode`` rejects one below 1)."""
        n = req.max_tokens if req.max_tokens is not None else self.inference.fim_max_tokens
        return min(n, self.max_output_tokens)

    def fim_context(self, req: FimRequest, canvas: int) -> list[int]:
        """The context ids of a FIM request decoded on a ``canvas``-token canvas (the training layout)."""
        t = self.tok
        pre, suf = t.encode(req.prefix), t.encode(req.suffix)
        # the model's window is a hard limit on the whole input, whatever the FIM window keeps
        self._check_fits(len(pre) + len(suf) + 3, canvas)
        window = self.inference.window_tokens
        if window is not None:
            # the same cut as training rows (model/data.py), never below half the window
            n_pre, n_suf = fim_window(len(pre), len(suf), max(window // 2, window - canvas - 3))
            pre, suf = pre[len(pre) - n_pre :], suf[:n_suf]
        return [t.fim_prefix_id, *pre, t.fim_suffix_id, *suf, t.fim_middle_id]

    def _check_fits(self, prompt_tokens: int, canvas: int) -> None:
        if prompt_tokens + canvas > self.context_length:
            raise ContextTooLongError(
                f"prompt of {prompt_tokens} tokens plus {canvas} output tokens exceeds the "
                f"context window of {self.context_length} tokens"
            )

    def _edit_context(self, req: EditRequest) -> tuple[list[int], EditPrompt, int]:
        parsed = parse_prompt(req.prompt)  # raises PromptError on malformed prompts
        region_tokens = len(self.tok.encode(parsed.region))
        canvas = region_tokens + self.inference.edit_slack_tokens
        if req.max_tokens is not None:
            canvas = min(canvas, req.max_tokens)
        window = self.inference.window_tokens
        # cut as training rows were (model/data.py); a region too long for the window keeps the
        # whole prompt: the 32k window still holds it, only the training distances are exceeded
        fitted = (
            None
            if window is None
            else fit_prompt(parsed, self.tok.encode, window - canvas - 1, self.tok.min_tokens)
        )
        ids = self.tok.encode(req.prompt) if fitted is None else fitted[1]
        return [*ids, self.tok.rewrite_id], parsed, canvas

    def resolve_effort(self, effort: str | None, edit: bool = False) -> str:
        """The effort a request runs at (None: the checkpoint's default, its ``edit_effort`` for a
        next-edit request); ValueError naming the checkpoint's efforts for any other name, so callers
        check up front with the same words."""
        if not effort and edit:
            effort = self.inference.edit_effort
        effort = effort or self.inference.default_effort
        if effort not in self.inference.efforts:
            raise ValueError(f"effort must be one of {sorted(self.inference.efforts)}, got {effort!r}")
        return effort

    def _rule(self, o: SamplingOptions, edit: bool) -> tuple[UnmaskRule, int]:
        preset = self.inference.efforts[self.resolve_effort(o.effort, edit)]
        block = o.block_size if o.block_size is not None else preset.block_for(edit)
        if block < 1:
            raise ValueError(f"block_size must be at least 1, got {block}")
        if o.sequential:
            return (LeftmostRule() if o.left_to_right else TopKRule(1)), block
        if o.threshold is None and preset.gamma is not None:
            stable = preset.stable if preset.stable is not None else float("inf")
            one_copy = preset.one_copy and not edit
            return JointRule(preset.gamma, preset.threshold, preset.margin, stable, one_copy), block
        return ThresholdRule(o.threshold if o.threshold is not None else preset.threshold), block

    def _lookahead(self, o: SamplingOptions) -> Lookahead | None:
        """The lookahead of a request with options ``o``: its own settings, else its effort's (None: off)."""
        preset = self.inference.efforts[self.resolve_effort(o.effort)]
        depth = o.lookahead if o.lookahead is not None else (preset.lookahead or 0)
        if depth < 0:
            raise ValueError(f"lookahead must be at least 0 (0: off), got {depth}")
        if not depth:
            return None
        agree = o.lookahead_agree if o.lookahead_agree is not None else preset.lookahead_agree
        nodes = o.lookahead_nodes if o.lookahead_nodes is not None else preset.lookahead_nodes
        accept = o.lookahead_accept if o.lookahead_accept is not None else preset.lookahead_accept
        return Lookahead(depth, nodes, agree, accept)

    def _drafter(self, o: SamplingOptions, lookahead: Lookahead | None) -> Drafter | None:
        """The drafter a request's lookahead uses (None: guesses from frozen predictions); ValueError
        when asked for without lookahead or of a checkpoint that has none."""
        preset = self.inference.efforts[self.resolve_effort(o.effort)]
        # an effort's drafter goes with its lookahead: a request that turns lookahead off drops it too
        asked = (
            o.lookahead_draft
            if o.lookahead_draft is not None
            else preset.lookahead_draft and lookahead is not None
        )
        if not asked:
            return None
        if lookahead is None:
            raise ValueError("lookahead_draft needs lookahead (the drafter re-predicts its guesses)")
        if self.ck.drafter is None:
            raise ValueError("lookahead_draft needs a checkpoint with a drafter (drafter.safetensors)")
        return self.ck.drafter

    def _line_steps(self, r: FimRequest | EditRequest) -> int | None:
        """The step budget per block of request ``r``'s rows: its effort's ``line_steps`` (or the
        request's own) for a single-line FIM request, None (no budget) for anything else."""
        if not isinstance(r, FimRequest) or "\n" not in r.options.stop:
            return None
        o = r.options
        n = (
            o.line_steps
            if o.line_steps is not None
            else self.inference.efforts[self.resolve_effort(o.effort)].line_steps
        )
        if n is not None and n < 0:
            raise ValueError(f"line_steps must be at least 0 (0: no budget), got {n}")
        return n or None

    # ---- entry point ---------------------------------------------------------------------------
    def complete(self, req: FimRequest | EditRequest) -> Completion:
        return self.complete_batch([req])[0]

    def complete_batch(self, reqs: list[FimRequest] | list[EditRequest]) -> list[Completion]:
        rows: list[FimRequest | EditRequest] = list(reqs)
        groups = [[i] for i in range(len(reqs))]  # each request's rows, its own canvas first
        shorter = sorted(set(self.inference.line_canvases))
        for i, r in enumerate(reqs):
            if isinstance(r, FimRequest) and "\n" in r.options.stop:
                own = self._fim_canvas(r)
                for n in shorter:
                    if n < own:
                        groups[i].append(len(rows))
                        rows.append(dataclasses.replace(r, max_tokens=n))
        outs = self._decode(rows, groups)
        # max keeps the first of equals: a tie goes to the request's own canvas
        return [max((outs[j] for j in g), key=line_likelihood) for g in groups]

    def _decode(
        self, reqs: list[FimRequest | EditRequest], groups: list[list[int]] | None = None
    ) -> list[Completion]:
        if not reqs:
            return []
        t0 = time.perf_counter()
        kinds = {type(r) for r in reqs}
        if len(kinds) != 1:
            raise ValueError("a batch holds requests of one kind")
        o = reqs[0].options
        rule, block = self._rule(o, edit=kinds == {EditRequest})
        budget = [self._line_steps(r) for r in reqs]
        lookahead = self._lookahead(o)
        drafter = self._drafter(o, lookahead)
        if not o.sequential and any(b is not None for b in budget):
            if lookahead is not None:  # a budget counts steps, which lookahead changes (model/lookahead.py)
                raise ValueError("lookahead cannot keep a step budget: use line_steps 0 with it")
            steps = [math.inf if b is None else float(b) for b in budget]
            rule = StepBudget(rule, torch.tensor(steps, device=self.device))
        parsed: list[EditPrompt | None] = [None] * len(reqs)
        contexts, canvas_lens = [], []
        for i, r in enumerate(reqs):
            if isinstance(r, FimRequest):
                n = self._fim_canvas(r)
                if n < 1:
                    raise ValueError("max_tokens must be at least 1")
                canvas_lens.append(n)
                contexts.append(self.fim_context(r, n))
            else:
                ctx, parsed[i], n = self._edit_context(r)
                contexts.append(ctx)
                canvas_lens.append(n)
        canvas_len = max(canvas_lens)
        for ctx in contexts:
            self._check_fits(len(ctx), canvas_len)
        Lc = max(len(c) for c in contexts)
        ids = torch.full((len(reqs), Lc), self.tok.eot_id, dtype=torch.long)
        for i, c in enumerate(contexts):
            ids[i, : len(c)] = torch.tensor(c)
        lens = torch.tensor([len(c) for c in contexts])
        canvas_pos = None
        if self.inference.edit_canvas_at_region:
            region_open = self.tok.special_ids[EDIT_OPEN]
            canvas_pos = torch.tensor(
                [edit_canvas_pos(c, self.tok.rewrite_id, region_open) for c in contexts]
            )
        draft = None
        # read at every decode, not once at load: ``self.inference`` may be replaced (server overrides)
        self.model.draft_bias = self.inference.draft_bias
        if self.model.cfg.canvas_draft:  # FIM rows have no region: None, no draft
            draft = step_drafts([draft_region(c, self.tok) for c in contexts], self.tok.eot_id)
        gen = torch.Generator(device=self.device).manual_seed(o.seed)
        on_step = None
        if o.on_step is not None:
            cb = o.on_step

            def on_step(canvas: torch.Tensor) -> None:
                cb(self._draft(canvas[0]))

        res = denoise(
            self.model,
            ids.to(self.device),
            lens.to(self.device),
            canvas_len,
            mask_id=self.tok.mask_id,
            eot_id=self.tok.eot_id,
            block_size=block,
            rule=rule,
            temperature=o.temperature,
            top_p=o.top_p,
            presence_penalty=o.presence_penalty,
            suppress_ids=self.suppressed_ids(),
            generator=gen,
            record=o.record_canvases,
            on_step=on_step,
            should_stop=(o.cancel.is_set if o.cancel is not None else None),
            done=self._done_hook([r.options.stop for r in reqs], groups or []),
            canvas_pos=None if canvas_pos is None else canvas_pos.to(self.device),
            draft=draft,
            canvas_lens=torch.tensor(canvas_lens, device=self.device),
            lookahead=lookahead,
            drafter=drafter,
        )
        latency = time.perf_counter() - t0
        out = []
        for i, r in enumerate(reqs):
            n = min(int(res.lengths[i]), canvas_lens[i])
            toks = res.tokens[i, :n].tolist()
            confs = res.confidences[i, :n].tolist()
            text = self.tok.decode(toks)
            finish = "stop" if bool(res.finished[i]) and int(res.lengths[i]) < canvas_lens[i] else "length"
            matched = None
            for s in r.options.stop:
                cut = text.find(s) if s else -1
                if cut >= 0:
                    text, finish, matched = text[:cut], "stop", s
            if res.cancelled:
                finish = "cancelled"
            scored = self._scored(res, i, n, confs)
            c = Completion(
                text=text,
                finish_reason=finish,
                prompt_tokens=len(contexts[i]),
                completion_tokens=n,
                score=aggregate(scored, self.inference.score_aggregate),
                token_confidences=confs,
                steps=res.steps,
                model_calls=res.model_calls,
                row_steps=res.row_steps,
                latency_s=latency,
                canvases=[self._draft(cv[i]) for cv in res.canvases],
                scored_confidences=scored,
                stop_sequence=matched,
            )
            p = parsed[i]
            if p is not None:
                c.region = p.region
                c.unchanged = text == p.region or layout_only(p.region, text)
                c.above_threshold = (not c.unchanged) and c.score >= self.inference.selectivity_threshold
            else:
                c.above_threshold = bool(text.strip()) and c.score >= self.inference.fim_threshold
            out.append(c)
        return out

    def suppressed_ids(self) -> list[int]:
        """Layout tags the sampler never proposes (every special token but end-of-text)."""
        return [i for i in self.tok.special_ids.values() if i != self.tok.eot_id]

    @torch.no_grad()
    def middle_ce(self, req: FimRequest, middle: str, left_to_right: bool = False) -> float:
        """Mean cross-entropy (nats/token) of ``middle`` and its end-of-text on a FIM canvas: a smooth
        quality signal for benchmarks where a weak model's pass@1 is near zero.

        Fully masked (the default): every answer token scored from the context alone, the t = 1 term
        of the diffusion loss (model/diffusion.py). ``left_to_right``: answer token k scored with
        tokens < k written and the rest still masked (teacher forcing), the state a block-of-one
        decode meets at each step, so it tracks what greedy decoding can get right."""
        n = req.max_tokens if req.max_tokens is not None else self.inference.fim_max_tokens
        ctx = self.fim_context(req, n)
        target = [*self.tok.encode(middle), self.tok.eot_id][:n]
        T = len(target)
        mask = self.tok.mask_id
        if left_to_right:  # row k: the answer's first k tokens, then masks; scored at position k
            rows = [ctx + target[:k] + [mask] * (n - k) for k in range(T)]
            scored_at = [len(ctx) + k for k in range(T)]
        else:  # one fully masked row scored at every answer position
            rows, scored_at = [ctx + [mask] * n], [len(ctx) + k for k in range(T)]
        ids = torch.tensor(rows, device=self.device)  # [R, Lc + n]
        which = torch.arange(T, device=self.device) if left_to_right else torch.zeros(T, dtype=torch.long)
        scored = self.model(
            ids,
            context_lens=torch.full((len(rows),), len(ctx), device=self.device),
            logits_index=(which.to(self.device), torch.tensor(scored_at, device=self.device)),
        ).float()  # [T, V]; only these positions are projected, as training does
        # over the tokens the sampler may propose: never the mask or a layout tag (denoise)
        scored[:, [mask, *self.suppressed_ids()]] = float("-inf")
        return float(torch.nn.functional.cross_entropy(scored, torch.tensor(target, device=self.device)))

    def _done_hook(self, stops: list[list[str]], groups: list[list[int]]):
        """``done`` for the sampler: rows whose committed answer start already holds a stop string,
        then rows of a length ensemble that can no longer win (``outscored``)."""
        stop = self._stop_hook(stops)
        groups = [g for g in groups if len(g) > 1]
        if not groups:
            return stop

        def done(canvas: torch.Tensor, fixed: torch.Tensor, conf: torch.Tensor) -> torch.Tensor:
            ended = stop(canvas, fixed, conf) if stop is not None else torch.zeros_like(fixed[:, 0])
            return ended | outscored(canvas, fixed, conf, ended, groups, self.tok.eot_id)

        return done

    def _stop_hook(self, stops: list[list[str]]):
        """Rows whose committed answer start already holds a stop string."""
        stops = [[x for x in row if x] for row in stops]
        if not any(stops):
            return None
        eot = self.tok.eot_id

        def done(canvas: torch.Tensor, fixed: torch.Tensor, conf: torch.Tensor) -> torch.Tensor:  # [B]
            B = canvas.shape[0]
            first_open = first_true(~fixed)  # [B]
            out = torch.zeros(B, dtype=torch.bool, device=canvas.device)
            for b, row in enumerate(stops):
                toks = canvas[b, : int(first_open[b])].tolist()
                if eot in toks:
                    continue  # the answer has ended anyway
                text = self.tok.decode(toks)
                out[b] = any(x in text for x in row)
            return out

        return done

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
