"""Wire formats: pydantic request/response models, and their one translation into engine requests.

Design decisions:
- Every field a client may send is declared here with its range, so FastAPI's validation (and the
  OpenAPI schema schemathesis fuzzes) names the offending field; the translation into
  ``model.infer.engine`` requests (``to_engine``) happens in this module only, so handlers stay thin.
- Types are JSON types: no ``false`` as 0, no ``"1"`` as 1 (as OpenAI's API); ``5.0`` is an integer.
- Unknown fields are ignored, not rejected: editors send extras (Continue's ``nextEdit``, OpenAI's
  ``user``/``logprobs``), and an OpenAI-compatible server must not break on them.
- Ranges follow OpenAI where Inception documents none: temperature [0, 2], top_p [0, 1],
  presence/frequency penalty [-2, 2], ``stop`` at most 4 sequences, ``n`` only 1, ``max_tokens`` up
  to the 32K window (clamped to the server's output cap, which ``/v1/models`` reports).
- Numerics the sampler cannot take are mapped, not rejected: ``top_p`` below 1e-6 (the nucleus is the
  top token alone; a float32 nucleus would underflow to nothing) and temperatures below 1e-3 decode
  greedily, which is what they converge to, instead of dividing by zero. ``frequency_penalty`` is accepted for compatibility (Continue sends it) but not applied: the
  diffusion sampler has a presence penalty only.
- Continue sends ``suffix: "<|endoftext|>"`` when the real suffix is empty; that is read as "".
- Our own request options are top-level fields beside Inception's (``cursor_index``, ``diffusing``,
  ``edit_kind``), as ``reasoning_effort`` is: clients that do not know them send none, and every
  one of them defaults to what such a client means (``edit_kind``: the edited file, in-file).
- Lone UTF-16 surrogates (valid JSON escapes, but not encodable text) become U+FFFD instead of
  failing deep inside the tokenizer.
- Defaults: temperature 0 (greedy; the small model is most reliable greedy), top_p 1, presence
  penalty 0, effort = the checkpoint's default, FIM ``max_tokens`` = the checkpoint's
  ``fim_max_tokens``, edit canvas = region length plus slack (model/infer/engine.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictStr

from editserver.model.infer.engine import EditRequest, FimRequest, SamplingOptions
from editserver.protocol.prompt import parse_prompt

CONTEXT_WINDOW = 32768
MIN_TEMPERATURE = 1e-3  # below this, sampling is greedy decoding in all but float overflow
MIN_TOP_P = 1e-6  # below this the nucleus is the top token alone (and float32 would underflow to 0)
CONTINUE_EMPTY_SUFFIX = "<|endoftext|>"
_SURROGATES = re.compile("[\ud800-\udfff]")

Effort = Literal["instant", "low", "medium", "high"]
EditKind = Literal["in_file", "cross_file"]


def _number_only(v: object) -> object:
    """JSON numbers only: ``true`` or ``"3"`` are not numbers (``5.0`` is a fine integer)."""
    if isinstance(v, (bool, str)):
        raise ValueError("Input should be a JSON number")
    return v


NUMBER = BeforeValidator(_number_only)  # after the range in ``Annotated`` so the schema keeps min/max


class RequestError(ValueError):
    """A request that validated but cannot be served as asked; becomes a 400 naming ``param``."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.param = param
        self.code = code


def _clean(s: str) -> str:
    return _SURROGATES.sub("\ufffd", s)


@dataclass(frozen=True)
class Limits:
    """What the loaded engine and the server settings allow; passed to ``to_engine``."""

    max_output_tokens: int
    fim_default_tokens: int


# ---- requests ----------------------------------------------------------------------------------
class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: StrictBool = False


class _Common(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: StrictStr | None = Field(None, max_length=256, description="any name; served by the loaded model")
    max_tokens: Annotated[int, Field(ge=1, le=CONTEXT_WINDOW), NUMBER] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1, le=CONTEXT_WINDOW), NUMBER] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0), NUMBER] | None = None
    top_p: Annotated[float, Field(ge=0.0, le=1.0), NUMBER] | None = None
    presence_penalty: Annotated[float, Field(ge=-2.0, le=2.0), NUMBER] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2.0, le=2.0), NUMBER] | None = Field(
        None, description="accepted, not applied"
    )
    stop: str | Annotated[list[str], Field(max_length=4)] | None = Field(
        None, description="up to 4 stop sequences"
    )
    stream: StrictBool | None = False
    stream_options: StreamOptions | None = None
    diffusing: StrictBool | None = Field(False, description="with stream: send every intermediate draft")
    reasoning_effort: Effort | None = None
    seed: Annotated[int, Field(ge=0, le=2**53 - 1), NUMBER] | None = None  # JSON-safe integers
    n: Annotated[int, Field(ge=1, le=1), NUMBER] | None = None

    @property
    def streaming(self) -> bool:
        return bool(self.stream)

    @property
    def diffusing_stream(self) -> bool:
        return bool(self.stream) and bool(self.diffusing)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def _options(self) -> SamplingOptions:
        temperature = self.temperature or 0.0
        top_p = 1.0 if self.top_p is None else self.top_p
        if temperature < MIN_TEMPERATURE or top_p < MIN_TOP_P:
            temperature, top_p = 0.0, 1.0
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return SamplingOptions(
            temperature=temperature,
            top_p=top_p,
            presence_penalty=self.presence_penalty or 0.0,
            stop=[_clean(s) for s in stop if s],
            effort=self.reasoning_effort,
            seed=self.seed or 0,
        )

    def _max_tokens(self) -> int | None:
        return self.max_tokens if self.max_tokens is not None else self.max_completion_tokens


class FimBody(_Common):
    """``/v1/fim/completions`` and the legacy ``/v1/completions`` (prompt = text before the cursor)."""

    prompt: str = Field(..., description="text before the cursor")
    suffix: str | None = Field(None, description="text after the cursor")

    def to_engine(self, limits: Limits) -> FimRequest:
        suffix = self.suffix or ""
        if suffix.strip() == CONTINUE_EMPTY_SUFFIX:
            suffix = ""
        n = self._max_tokens() or limits.fim_default_tokens
        return FimRequest(
            prefix=_clean(self.prompt),
            suffix=_clean(suffix),
            max_tokens=min(n, limits.max_output_tokens),
            options=self._options(),
        )


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: str = "text"
    text: str | None = None


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: str = Field(..., max_length=64)
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text or "" for p in self.content if p.type == "text")


class EditBody(_Common):
    """``/v1/edit/completions``: one user message holding Inception's next-edit prompt."""

    messages: list[Message] = Field(..., min_length=1)
    cursor_index: Annotated[int, Field(ge=0, le=2**31), NUMBER] | None = Field(
        None,
        description="which <|cursor|> of the <|code_to_edit|> region marks the cursor, counting from 0; "
        "the others are the file's own text (without it the region may hold only one)",
    )
    edit_kind: EditKind | None = Field(
        None,
        description="ours: cross_file when the region lies in another file than the one edited (the "
        "checkpoint's cross_file_threshold decides); in_file, or nothing, holds it to in_file_threshold",
    )

    def prompt_text(self) -> str:
        users = [m for m in self.messages if m.role == "user"]
        if not users:
            raise RequestError("messages must contain a user message with the next-edit prompt", "messages")
        return _clean(users[-1].text())

    def to_engine(self, limits: Limits) -> EditRequest:
        prompt = self.prompt_text()
        parse_prompt(prompt, self.cursor_index)  # PromptError (-> 400 naming it) before queueing
        n = self._max_tokens()
        return EditRequest(
            prompt=prompt,
            max_tokens=min(n if n is not None else limits.max_output_tokens, limits.max_output_tokens),
            options=self._options(),
            cursor_index=self.cursor_index,
            cross_file=self.edit_kind == "cross_file",
        )


# ---- responses ---------------------------------------------------------------------------------
class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class SuggestionInfo(BaseModel):
    """Our own field (``editserver``): how confident the model is, so clients can hide weak output."""

    score: float = Field(..., description="aggregate per-token confidence in [0, 1]")
    above_threshold: bool = Field(
        ...,
        description="the answer is a proposal (FIM: not blank; edit: changed) and its score cleared "
        "the threshold",
    )
    threshold: float = Field(
        ...,
        description="the threshold this answer was held to: fim_threshold, or the next edit's "
        "in_file_threshold / cross_file_threshold (edit_kind says which)",
    )
    edit_kind: EditKind | None = Field(None, description="next edit: whose threshold applied; FIM: null")
    unchanged: bool = Field(False, description="edit: the model rewrote the region as it was")
    suppressed: bool = Field(
        False, description='the model\'s text is not what was sent (FIM: ""; edit: the region as sent)'
    )
    outcome: str | None = Field(
        None,
        description="shown | below_threshold | empty | cancelled, and for edits unchanged | truncated",
    )
    suggestion: str | None = Field(None, description="the model's own text, also when suppressed")
    model_finish_reason: str = Field(..., description="how the model's own decoding ended")
    steps: int
    model_calls: int
    tokens_per_step: float
    latency_ms: float
    queue_ms: float
    batch_size: int
    dropped_tokens: int = Field(
        0, description="prompt tokens beyond the window the model reads (far end first)"
    )
    canvas_tokens: int = Field(
        0, description="the canvas the answer was decoded on (a line request's winning length)"
    )
    fim_route: str | None = Field(
        None,
        description="how a FIM request reached the model: fim-tokens (ours), in-place (prefix, canvas, "
        "suffix), chat (the chat template: families with no FIM training, such as SDAR) or fim (a block "
        "family's own FIM tokens before the canvas: Stable-DiffCoder); None for edits",
    )


class FimChoice(BaseModel):
    index: int = 0
    text: str
    finish_reason: str | None
    logprobs: None = None


class FimResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[FimChoice]
    usage: Usage | None = None
    editserver: SuggestionInfo | None = None


class EditMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None


class EditChoice(BaseModel):
    index: int = 0
    message: EditMessage
    finish_reason: str | None


class EditResponse(BaseModel):
    id: str
    object: Literal["edit.completion"] = "edit.completion"
    created: int
    model: str
    choices: list[EditChoice]
    usage: Usage
    editserver: SuggestionInfo


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str
    root: str
    context_length: int
    max_output_length: int
    features: list[str]
    family: str = Field(
        "editserver", description="model family: editserver (ours), dream, open-dcoder, llada"
    )
    parameters: int = Field(0, description="parameter count of the loaded weights")
    dtype: str = Field("float32", description="the weights' serving dtype")
    window: int = Field(0, description="prompt tokens the model actually reads (over-window input is cut)")
    block_size: int | None = Field(
        None,
        description="a block-diffusion model's block in use (SDAR, Fast-dLLM v2, Stable-DiffCoder, LLaDA2); None otherwise",
    )
    fim_route: str = Field(
        "fim-tokens", description="how FIM requests reach the model: fim-tokens, in-place, chat or fim"
    )
    thresholds: dict[str, float] = Field(
        default_factory=dict,
        description="the thresholds in force: fim, and next edit's in_file and cross_file (request edit_kind)",
    )


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    model: str
    device: str
    queue_depth: int
    running: int
    meta: dict
    # the context store's counters (model/infer/prefix.py ``PrefixStore.stats``); None when reuse is off
    prefix_cache: dict | None = None


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody
