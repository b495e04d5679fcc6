"""Answer shapes: the JSON completion, the chunks of a stream, and the ``editserver`` field.

Design decisions:
- Every answer shape (JSON, plain stream, diffusing stream) is built from one ``View`` of the
  completion (outcome.py), so they agree; FIM answers go through the shared post-processing
  (protocol/postprocess.py via outcome.fim_postprocessed) and the field says what it trimmed.
- A request is counted and logged once, when its view is made.
"""

from __future__ import annotations

import json

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from editserver.protocol.prompt import format_edit_response
from editserver.server.outcome import View, fim_postprocessed, view
from editserver.server.scheduler import Result
from editserver.server.schemas import SuggestionInfo
from editserver.server.state import Served


def sse(obj: dict | str) -> bytes:
    """One Server-Sent Event: ``data`` is a JSON chunk, or ``[DONE]`` at the end."""
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)}\n\n".encode()


def info(s: Served, res: Result, kind: str, v: View, body=None) -> dict:
    c = res.completion
    edit_kind = (getattr(body, "edit_kind", None) or "in_file") if kind == "edit" else None
    return SuggestionInfo(
        score=round(c.score, 6),
        above_threshold=c.above_threshold,
        # the engine's own (it decided above_threshold against it), else what the server holds in force
        threshold=c.threshold if c.threshold is not None else s.thresholds[edit_kind or "fim"],
        edit_kind=edit_kind,
        unchanged=c.unchanged,
        suppressed=v.suppressed,
        outcome=v.outcome,
        suggestion=c.text,
        model_finish_reason=c.finish_reason,
        steps=c.steps,
        model_calls=c.model_calls,
        tokens_per_step=round(c.tokens_per_step, 3),
        latency_ms=round(c.latency_s * 1000, 1),
        queue_ms=round(res.queue_s * 1000, 1),
        batch_size=res.batch_size,
        dropped_tokens=c.dropped_tokens,
        canvas_tokens=c.canvas_tokens,
        fim_route=s.engine.fim_route if kind != "edit" else None,
    ).model_dump()


def usage(res: Result) -> dict:
    c = res.completion
    return {
        "prompt_tokens": c.prompt_tokens,
        "completion_tokens": c.completion_tokens,
        "total_tokens": c.prompt_tokens + c.completion_tokens,
    }


def _log(request: Request, res: Result, **extra) -> None:
    c = res.completion
    request.state.log.update(
        finish=c.finish_reason,
        prompt_tokens=c.prompt_tokens,
        completion_tokens=c.completion_tokens,
        steps=c.steps,
        queue_ms=round(res.queue_s * 1000, 1),
        batch=res.batch_size,
        score=round(c.score, 4),
        **extra,
    )
    if c.finish_reason == "cancelled":
        request.state.log["status"] = 499


def shown_draft(kind: str, draft: str) -> str:
    return format_edit_response(draft) if kind == "edit" else draft


def chunk(
    kind: str, meta: dict, text: str | None, finish: str | None, body, extra: dict | None = None
) -> dict:
    if kind == "fim":
        choice = {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}
        out = {**meta, "object": "text_completion", "choices": [choice]}
    else:
        delta = {"role": "assistant", "content": text} if text is not None else {}
        out = {
            **meta,
            "object": "edit.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    if body.include_usage:
        out["usage"] = None
    if extra:
        out["editserver"] = extra
    return out


def _view(s: Served, request: Request, kind: str, res: Result, body=None) -> tuple[View, str, dict]:
    """The answer's view, its text as sent (edits fenced) and the ``editserver`` field; counted
    and logged once per request. FIM answers go through the shared post-processing
    (outcome.fim_postprocessed); its report is the field's ``postprocess``."""
    v = view(kind, res.completion)
    trimmed = None
    if kind == "fim" and body is not None:
        v, trimmed = fim_postprocessed(v, res.completion.text, body.prompt, body.suffix or "")
    s.metrics.count_outcome(kind, v.outcome)
    _log(request, res, outcome=v.outcome)
    out = info(s, res, kind, v, body)
    if trimmed is not None:
        out["postprocess"] = trimmed
    return v, shown_draft(kind, v.text), out


def final_chunks(s: Served, request: Request, kind: str, body, meta: dict, res: Result) -> list[dict]:
    v, text, extra = _view(s, request, kind, res, body)
    finish = v.finish_reason
    chunks = []
    if body.diffusing_stream:
        chunks.append(chunk(kind, meta, text, finish, body, extra))
    else:
        if text or kind == "edit":
            chunks.append(chunk(kind, meta, text, None, body))
        chunks.append(chunk(kind, meta, None if kind == "edit" else "", finish, body, extra))
    if body.include_usage:
        chunks.append({**meta, "object": chunks[0]["object"], "choices": [], "usage": usage(res)})
    return chunks


def finish(s: Served, request: Request, kind: str, body, meta: dict, res: Result) -> Response:
    v, text, extra = _view(s, request, kind, res, body)
    if kind == "fim":
        obj = "text_completion"
        choice = {"index": 0, "text": text, "finish_reason": v.finish_reason, "logprobs": None}
    else:
        obj = "edit.completion"
        message = {"role": "assistant", "content": text}
        choice = {"index": 0, "message": message, "finish_reason": v.finish_reason}
    return JSONResponse(
        {**meta, "object": obj, "choices": [choice], "usage": usage(res), "editserver": extra},
        headers={"X-Request-Id": meta["id"]},
    )
