"""What callers hand the engine and what it hands back: plain dataclasses with no HTTP in sight.

Design decisions:
- ``FimRequest`` (prefix/suffix) and ``EditRequest`` (an Inception next-edit prompt) share one
  ``SamplingOptions``; ``Completion`` is the one answer type of both (model/infer/engine.py).
- They live apart from the engine's logic only to keep each file readable; the engine re-exports
  them, and callers import them from model/infer/engine.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field


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
    published: bool = False  # the family's published loop on the exact cache (plan.py published_plan)
    canvases: tuple[int, ...] = ()  # FIM: fixed canvas lengths side by side (model/infer/lengths.py)
    seed: int = 0
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
    prompt: str  # Inception's next-edit layout (protocol/prompt.py)
    max_tokens: int | None = None
    options: SamplingOptions = field(default_factory=SamplingOptions)
    cursor_index: int | None = None  # which <|cursor|> of the region is the cursor (protocol/prompt.py)
    # the region lies in another file than the one edited: the cross-file threshold decides (config.py)
    cross_file: bool = False


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
    # next edit only
    region: str | None = None  # the editable region as sent (without the cursor tag)
    unchanged: bool = False
    # FIM: a non-blank answer scoring at least ``fim_threshold``; next edit: a changed rewrite
    # scoring at least its kind's threshold (``InferenceConfig.edit_threshold``)
    above_threshold: bool = True
    threshold: float | None = None  # the threshold ``above_threshold`` was decided against
    # what ``score`` aggregates: ``token_confidences`` plus the decision to stop there (``_scored``)
    scored_confidences: list[float] = field(default_factory=list)
    # the stop sequence the text was cut at; None when the answer ended at end-of-text or the canvas
    # end (both are finish_reason "stop"/"length" too, so this is how a caller tells them apart)
    stop_sequence: str | None = None
    row_steps: int = 0  # canvas rows the steps computed
    dropped_tokens: int = 0  # prompt tokens beyond the window the model reads (far end first)
    canvas_tokens: int = 0  # the canvas the answer was decoded on (the winning length of a line request)

    @property
    def tokens_per_step(self) -> float:
        return self.completion_tokens / self.steps if self.steps else 0.0
