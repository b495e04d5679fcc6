"""The decode plan: everything one decode needs, resolved in one place from the checkpoint's settings
and a request's options.

Design decisions:
- ``plan_for(inference, options, kind, ...)`` is the only place an effort is resolved: a next-edit
  request with no effort runs at the checkpoint's ``edit_effort``, everything else at the request's
  effort or ``default_effort``, and every setting below follows from that one effort.
- A plan is a frozen, hashable dataclass. Requests with equal plans decode in one batch and get the
  answers they would get alone, so the plan is the scheduler's batch key.
- The pieces are small objects, not string flags: the unmasking rule (model/infer/unmasking.py), the cache
  policy (model/infer/cache.py, chosen by the model family), and plain numbers for the block, the
  extra one-line canvases and sampling.
- A family whose model chooses its answer's length (DreamOn) adds a canvas edit (``edit``,
  model/infer/canvas_edit.py) to its FIM plans: the canvas is one block that the edit widens and
  narrows, so it has no block size, extra canvases or step budget of its own; every other piece (the
  effort's rule, the cache policy, sampling) is the family's as usual. Its published plan is the
  publisher's loop with the same edit.
- A block-diffusion family (SDAR) decodes at its model's block size, whatever the effort or the
  request says (its attention is block-causal on that grid: model/infer/hf/model.py), with its
  per-block rule (``BlockSchedule``; Fast-dLLM v2's ``SubBlockThreshold``: the request's
  ``threshold`` overrides the family's) on the block
  cache (model/infer/block_cache.py); its published plan is the same rule at the publisher's
  threshold on the exact cache, or the publisher's own loop where that differs (Stable-DiffCoder:
  one token per step; ``block_rule``). Its canvas never takes extra one-line canvases or step budgets.
  LLaDA2.1 adds token editing (``revise``, model/infer/token_edit.py) to both: a step may rewrite
  tokens already written in its block, and a full block takes steps while they edit.
- One-line FIM requests (their stops include a newline) are a kind of their own ("line"): they get the
  effort's step budget (``line_steps``) and the checkpoint's ``line_canvases``, decoded as extra rows
  whose likeliest answer wins (model/infer/engine.py). Measured on the shipped checkpoint:
  docs/experiments.md, decoding rules.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from editserver.model.infer.cache import CachePolicy
from editserver.model.infer.canvas_edit import ExpandDelete
from editserver.model.infer.config import EffortPreset, InferenceConfig
from editserver.model.infer.token_edit import TokenEdit
from editserver.model.infer.unmasking import (
    BlockSchedule,
    JointRule,
    LeftmostRule,
    PublishedRule,
    StepBudget,
    SubBlockThreshold,
    ThresholdRule,
    TopKRule,
    UnmaskRule,
)

KINDS = ("fim", "line", "edit")


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0
    top_p: float = 1.0
    presence_penalty: float = 0.0
    seed: int = 0


@dataclass(frozen=True)
class DecodePlan:
    kind: str  # "fim" | "line" (a one-line FIM request) | "edit"
    effort: str
    rule: UnmaskRule
    block_size: int
    cache: CachePolicy
    sampling: Sampling = Sampling()
    # shorter canvases also decoded for a "line" request; with ``fixed_canvas``, a FIM request's fixed
    # canvas lengths side by side (SamplingOptions.canvases, model/infer/lengths.py)
    line_canvases: tuple[int, ...] = ()
    fixed_canvas: bool = False  # the whole canvas from the first step (a published loop's), never grown
    edit: ExpandDelete | None = None  # the canvas reshaped between steps (model/infer/canvas_edit.py)
    revise: TokenEdit | None = None  # written tokens of the block rewritten too (model/infer/token_edit.py)


# an open family's published loop: (order by entropy, block size); model/infer/unmasking.py PublishedRule
PUBLISHED = {
    "dream": (True, 1 << 20),
    "dreamon": (True, 1 << 20),  # DreamOn's sampler: alg="entropy", number_transfer_tokens=1
    "open-dcoder": (True, 1 << 20),
    "llada": (False, 32),
    # LLaDA-MoE: the dense family's loop (ML-GSAI/LLaDA generate.py, low-confidence remasking, one
    # token per step); the publisher's dInfer README runs its fast threshold decoder instead, as our
    # default plan does. That the model card calls generate.py is unchecked (docs/open-weights.md)
    "llada-moe": (False, 32),
}
# a block family's rule at block size b: SDAR/TraDo README, threshold 0.9 and b steps a block
# Fast-dLLM v2: 8-token sub-blocks at threshold 0.9 (v2/eval.py and run_chatbot.py, NVlabs/Fast-dLLM)
# Stable-DiffCoder: generate_block's threshold branch at its default 0.95 (every masked position at or
# above it, at least the most confident one: BlockSchedule with one token owed per step, b steps a
# block); the default is read in a public copy of modeling_stable_diffcoder.py (docs/open-weights.md)
# LLaDA2.0: dFactory's ``generate`` defaults, threshold 0.95 and 32 steps a block whatever the block
# (inclusionAI/dFactory @92b6890 models/llada2_moe/modeling_llada2_moe.py); LLaDA2.1: threshold 0.7
# with token editing at 0.5 for at most 16 steps past a full block (the diffusers LLaDA2Pipeline
# documentation, third-party: unchecked against the publisher's own 2.1 files)
BLOCK_RULES = {
    "sdar": lambda b: BlockSchedule(0.9, b),
    "fast-dllm-v2": lambda b: SubBlockThreshold(0.9, 8),
    "stable-diffcoder": lambda b: BlockSchedule(0.95, b),
    "llada2": lambda b: BlockSchedule(0.95, 32),
    "llada2.1": lambda b: BlockSchedule(0.7, 32),
}
BLOCK_EDITS = {"llada2.1": TokenEdit(0.5, 16)}  # a family's token editing (model/infer/token_edit.py)
# a block family whose published loop is not its default rule: Stable-DiffCoder's README call
# (threshold=None, steps == gen_length): one token per step, the most confident (no p exceeds 1.0)
PUBLISHED_BLOCK_RULES = {"stable-diffcoder": lambda b: BlockSchedule(1.0, b)}
WHOLE = 1 << 20  # a block as wide as any canvas: an edited canvas is one block


def published_plan(
    family: str, options, kind: str, cache: CachePolicy, edit: ExpandDelete | None = None
) -> DecodePlan:
    """The family's published generation loop, one token per step on the exact ``cache``
    (``--decode published``), with the family's canvas ``edit`` if it has one; ValueError for a
    family without one."""
    if family not in PUBLISHED:
        raise ValueError(f"no published decoding loop for the {family} family; families: {sorted(PUBLISHED)}")
    entropy, block = PUBLISHED[family]
    sampling = Sampling(options.temperature, options.top_p, options.presence_penalty, options.seed)
    return DecodePlan(kind, "published", PublishedRule(entropy), block, cache, sampling, (), True, edit)


def block_rule(family: str, block: int, published: bool) -> BlockSchedule | SubBlockThreshold:
    """A block family's rule at ``block``: its published loop's (``published``) or its default."""
    rules = PUBLISHED_BLOCK_RULES if published and family in PUBLISHED_BLOCK_RULES else BLOCK_RULES
    return rules[family](block)


def block_plan(
    inference: InferenceConfig,
    options,
    kind: str,
    cache: CachePolicy,
    block: int,
    rule: BlockSchedule | SubBlockThreshold,
    published: bool = False,
    revise: TokenEdit | None = None,
) -> DecodePlan:
    """The plan of a block-diffusion family (module docstring): ``rule`` on ``block``-token blocks,
    with the family's token editing (``revise``) if it has one."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if options.block_size is not None and options.block_size != block:
        raise ValueError(
            f"this model decodes {block}-token blocks (its attention's grid), not {options.block_size}"
        )
    effort = "published" if published else resolve_effort(inference, options.effort, kind)
    if options.threshold is not None and not published:
        rule = dataclasses.replace(rule, threshold=options.threshold)
    sampling = Sampling(options.temperature, options.top_p, options.presence_penalty, options.seed)
    # the whole canvas from the first step: later blocks never reach earlier ones, so width costs nothing
    return DecodePlan(kind, effort, rule, block, cache, sampling, (), True, revise=revise)


def resolve_effort(inference: InferenceConfig, effort: str | None, kind: str) -> str:
    """The effort a request runs at; ValueError naming the checkpoint's efforts for any other name."""
    if not effort and kind == "edit":
        effort = inference.edit_effort
    effort = effort or inference.default_effort
    if effort not in inference.efforts:
        raise ValueError(f"effort must be one of {sorted(inference.efforts)}, got {effort!r}")
    return effort


def _rule(preset: EffortPreset, kind: str, options) -> UnmaskRule:
    if options.sequential:
        return LeftmostRule() if options.left_to_right else TopKRule(1)
    if options.threshold is None and preset.gamma is not None:
        stable = preset.stable if preset.stable is not None else float("inf")
        one_copy = preset.one_copy and kind != "edit"
        return JointRule(preset.gamma, preset.threshold, preset.margin, stable, one_copy)
    return ThresholdRule(options.threshold if options.threshold is not None else preset.threshold)


def plan_for(
    inference: InferenceConfig, options, kind: str, cache: CachePolicy, edit: ExpandDelete | None = None
) -> DecodePlan:
    """The plan of a request of ``kind`` with ``options`` (model/infer/engine.py ``SamplingOptions``)
    on a checkpoint with ``inference`` settings, decoded with the model family's ``cache`` policy
    (and its canvas ``edit``, module docstring). ValueError on options that cannot be served, with the
    words a client sees."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    effort = resolve_effort(inference, options.effort, kind)
    preset = inference.efforts[effort]
    block = options.block_size if options.block_size is not None else preset.block_for(kind == "edit")
    if block < 1:
        raise ValueError(f"block_size must be at least 1, got {block}")
    rule = _rule(preset, kind, options)
    sampling = Sampling(options.temperature, options.top_p, options.presence_penalty, options.seed)
    if edit is not None:
        return DecodePlan(kind, effort, rule, WHOLE, cache, sampling, edit=edit)
    steps = options.line_steps if options.line_steps is not None else preset.line_steps
    if steps is not None and steps < 0:
        raise ValueError(f"line_steps must be at least 0 (0: no budget), got {steps}")
    if kind == "line" and steps and not options.sequential:
        rule = StepBudget(rule, steps)
    fixed = tuple(sorted(set(getattr(options, "canvases", ()) or ()))) if kind != "edit" else ()
    if any(n < 1 for n in fixed):
        raise ValueError(f"canvases must be positive, got {list(fixed)}")
    if fixed:  # fixed canvas lengths side by side, none grown (model/infer/lengths.py)
        return DecodePlan(kind, effort, rule, block, cache, sampling, fixed, True)
    canvases = tuple(sorted(set(inference.line_canvases))) if kind == "line" else ()
    return DecodePlan(kind, effort, rule, block, cache, sampling, canvases)
