"""The HTTP API: Inception's Mercury Edit endpoints plus OpenAI's legacy completions, on FastAPI.

Design decisions:
- ``create_app(settings, engine=None)`` is the one factory; handlers are thin: validate (schemas.py),
  submit to the scheduler (scheduler.py), shape the answer. Inference never runs on the event loop.
- Errors always have OpenAI's shape (errors.py): 422 names the invalid field, 400 for requests that
  cannot be served (malformed prompt, beyond the 32K window), 401 bad key, 429 queue full.
- Auth: with ``--api-key`` every ``/v1/*`` route needs ``Authorization: Bearer KEY`` (compared in
  constant time); ``/health`` and ``/metrics`` stay open for local liveness probes and scrapers.
- Next edit never returns "no prediction": when the model's rewrite is unchanged, truncated (ran out
  of canvas), empty (it would delete the whole region on a vacuous score) or scores below the
  checkpoint's selectivity threshold, the content is the region as sent, so Zed/Continue show nothing.
- FIM answers "" (finish_reason "stop") when the model's text is blank or scores below the
  checkpoint's ``fim_threshold``: no ghost text rather than a wrong one. Both rules live in
  outcome.py, and every answer shape (JSON, plain stream, diffusing stream) is built from its one
  ``View``, so they agree. Our ``editserver`` field carries the score, whether it cleared the
  threshold in force for its kind, that threshold, the outcome and the model's own text, for
  clients that want to decide themselves.
- ``serve --fim-threshold/--edit-threshold`` (Settings) replace the checkpoint's thresholds on the
  engine before anything is served, so every answer, the ``editserver`` field and the replay agree.
- Streams are Server-Sent Events ending in ``data: [DONE]``. The diffusion canvas is decoded in
  parallel, so a plain stream sends the answer as one chunk when it is ready; ``diffusing: true``
  sends every intermediate draft, each one the whole current text that replaces the previous one
  (Mercury's convention), the last one being the final answer. Streams wait for the job to start (or
  fail) before sending headers, so context-overflow and similar errors are real HTTP 400s.
- Client disconnects: a watcher task waits for ``http.disconnect`` and sets the job's cancel event, so
  a queued job is dropped and a running one stops denoising at its next step. The log shows 499.
- One structured (JSON) log line per request (metrics.AccessLog), after the last byte is sent; the
  handlers add tokens, steps, queue time and the outcome (edit and FIM) to it, and count the outcome
  per kind. Logs go to stderr only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import logging
import time
import uuid
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from editserver.server.errors import APIError, install_error_handlers, translate
from editserver.server.metrics import AccessLog, Metrics
from editserver.server.outcome import View, fim_postprocessed, view
from editserver.server.scheduler import Cancelled, Job, QueueFull, Result, Scheduler
from editserver.server.schemas import (
    EditBody,
    EditResponse,
    ErrorResponse,
    FimBody,
    FimResponse,
    Health,
    Limits,
    ModelCard,
    ModelList,
    RequestError,
    SuggestionInfo,
)
from editserver.server.settings import Settings
from model.infer.engine import Engine
from protocol.prompt import PromptError, format_edit_response

log = logging.getLogger("editserver.server.app")

FEATURES = ["fim", "next_edit", "streaming", "diffusing", "reasoning_effort", "stop", "include_usage"]
ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorResponse} for s in (400, 401, 422, 429, 500, 503)
}
# One Server-Sent Event: ``data`` is a JSON chunk, or ``[DONE]`` at the end.
SSE_EVENT = {
    "type": "object",
    "properties": {"data": {"type": "string"}, "event": {"type": "string"}},
    "required": ["data"],
}
STREAMED = {200: {"content": {"text/event-stream": {"schema": SSE_EVENT}}}}


def _sse(obj: dict | str) -> bytes:
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)}\n\n".encode()


def create_app(settings: Settings, engine: Engine | None = None, metrics: Metrics | None = None) -> FastAPI:
    """The API; ``metrics``: a registry made before the model loaded (replica.py), else a new one."""
    if engine is None:
        engine = Engine.load(settings.model, settings.device, settings.dtype, settings.max_context)
    overrides = {
        k: v
        for k, v in (
            ("fim_threshold", settings.fim_threshold),
            ("selectivity_threshold", settings.edit_threshold),
        )
        if v is not None
    }
    if overrides:  # the engine decides above/below threshold itself, so it must see the served value
        engine.inference = dataclasses.replace(engine.inference, **overrides)
    metrics = metrics if metrics is not None else Metrics()
    metrics.ready.set(1)  # the model is loaded (replica.py shows 0 before, and while draining)
    scheduler = Scheduler(engine, metrics, settings.max_queue, settings.max_batch)
    cap = min(settings.max_output_tokens or engine.max_output_tokens, engine.max_output_tokens)
    limits = Limits(max_output_tokens=cap, fim_default_tokens=engine.inference.fim_max_tokens)
    thresholds = {"edit": engine.inference.selectivity_threshold, "fim": engine.inference.fim_threshold}
    created = int(time.time())

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        scheduler.start()
        try:
            yield
        finally:
            scheduler.stop()

    app = FastAPI(
        title="editserver",
        version="0.1.0",
        lifespan=lifespan,
        description="Local masked-diffusion code suggestions behind Inception's Mercury Edit API.",
    )
    app.state.engine, app.state.scheduler, app.state.metrics = engine, scheduler, metrics
    app.add_middleware(AccessLog, metrics=metrics)
    install_error_handlers(app)

    # ---- auth ----------------------------------------------------------------------------------
    async def require_key(request: Request) -> None:
        if not settings.api_key:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        ok = scheme.lower() == "bearer" and hmac.compare_digest(
            token.strip().encode("utf-8", "replace"), settings.api_key.encode("utf-8")
        )
        if not ok:
            raise APIError(
                401,
                "missing or incorrect API key (send 'Authorization: Bearer <key>')",
                "authentication_error",
                None,
                "invalid_api_key",
            )

    protected = [Depends(require_key)]

    # ---- the shared request flow ---------------------------------------------------------------
    async def _watch_disconnect(request: Request, job: Job) -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                if not job.future.done():
                    job.cancel.set()
                return

    async def _next(events: asyncio.Queue, fut: asyncio.Future) -> str | None:
        """The next draft, or None once the job is done (drafts after completion are dropped)."""
        if not events.empty():
            return events.get_nowait()
        if fut.done():
            return None
        getter = asyncio.ensure_future(events.get())
        done, _ = await asyncio.wait({getter, fut}, return_when=asyncio.FIRST_COMPLETED)
        if getter in done:
            return getter.result()
        getter.cancel()
        return None

    async def _run(request: Request, body: FimBody | EditBody, kind: str, param: str):
        try:
            engine_req = body.to_engine(limits)
        except (PromptError, RequestError) as exc:
            raise translate(exc, param) from exc
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        on_step = None
        if body.diffusing_stream:

            def on_step(draft: str) -> None:
                loop.call_soon_threadsafe(events.put_nowait, draft)

        try:
            job = scheduler.submit(engine_req, on_step)
        except (QueueFull, Cancelled) as exc:
            raise translate(exc, param) from exc
        fut = asyncio.wrap_future(job.future)
        watcher = asyncio.create_task(_watch_disconnect(request, job))
        rid = f"{'cmpl' if kind == 'fim' else 'edit'}-{uuid.uuid4().hex[:24]}"
        meta = {"id": rid, "created": int(time.time()), "model": body.model or settings.served_model_name}
        request.state.log = {"id": rid, "kind": kind, "stream": body.streaming}
        try:
            first = await _next(events, fut) if body.streaming else None
            if not body.streaming or first is None:
                result = await fut
        except BaseException as exc:
            watcher.cancel()
            if not fut.done():
                job.cancel.set()
            if isinstance(exc, Exception):
                raise translate(exc, param) from exc
            raise
        if not body.streaming:
            watcher.cancel()
            return _finish(request, kind, body, meta, result)

        async def stream():
            try:
                draft, last = first, None
                while draft is not None:
                    if draft != last:
                        yield _sse(_chunk(kind, meta, _shown_draft(kind, draft), None, body))
                        last = draft
                    draft = await _next(events, fut)
                res = await fut
                for payload in _final_chunks(request, kind, body, meta, res):
                    yield _sse(payload)
                yield _sse("[DONE]")
            except Exception as exc:  # noqa: BLE001 - headers are sent: report in-band, never crash
                try:
                    err = translate(exc, param)
                except Exception:  # noqa: BLE001 - a bug: logged, reported as a 500-style event
                    log.exception("stream failed")
                    err = APIError(
                        500,
                        "internal server error (see the server log)",
                        "server_error",
                        None,
                        "internal_error",
                    )
                yield _sse(
                    {
                        "error": {
                            "message": err.message,
                            "type": err.type,
                            "param": err.param,
                            "code": err.code,
                        }
                    }
                )
                yield _sse("[DONE]")
            finally:
                watcher.cancel()
                if not fut.done():
                    job.cancel.set()

        return StreamingResponse(
            stream(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Request-Id": rid},
        )

    # ---- response shaping ----------------------------------------------------------------------
    def _info(res: Result, kind: str, v: View) -> dict:
        c = res.completion
        return SuggestionInfo(
            score=round(c.score, 6),
            above_threshold=c.above_threshold,
            threshold=thresholds[kind],
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
        ).model_dump()

    def _usage(res: Result) -> dict:
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

    def _shown_draft(kind: str, draft: str) -> str:
        return format_edit_response(draft) if kind == "edit" else draft

    def _chunk(
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

    def _view(request: Request, kind: str, res: Result, body=None) -> tuple[View, str, dict]:
        """The answer's view, its text as sent (edits fenced) and the ``editserver`` field; counted
        and logged once per request. FIM answers go through the shared post-processing
        (outcome.fim_postprocessed); its report is the field's ``postprocess``."""
        v = view(kind, res.completion)
        trimmed = None
        if kind == "fim" and body is not None:
            v, trimmed = fim_postprocessed(v, body.prompt, body.suffix or "")
        metrics.count_outcome(kind, v.outcome)
        _log(request, res, outcome=v.outcome)
        info = _info(res, kind, v)
        if trimmed is not None:
            info["postprocess"] = trimmed
        return v, _shown_draft(kind, v.text), info

    def _final_chunks(request: Request, kind: str, body, meta: dict, res: Result) -> list[dict]:
        v, text, info = _view(request, kind, res, body)
        finish = v.finish_reason
        chunks = []
        if body.diffusing_stream:
            chunks.append(_chunk(kind, meta, text, finish, body, info))
        else:
            if text or kind == "edit":
                chunks.append(_chunk(kind, meta, text, None, body))
            chunks.append(_chunk(kind, meta, None if kind == "edit" else "", finish, body, info))
        if body.include_usage:
            chunks.append({**meta, "object": chunks[0]["object"], "choices": [], "usage": _usage(res)})
        return chunks

    def _finish(request: Request, kind: str, body, meta: dict, res: Result) -> Response:
        v, text, info = _view(request, kind, res, body)
        if kind == "fim":
            obj = "text_completion"
            choice = {"index": 0, "text": text, "finish_reason": v.finish_reason, "logprobs": None}
        else:
            obj = "edit.completion"
            message = {"role": "assistant", "content": text}
            choice = {"index": 0, "message": message, "finish_reason": v.finish_reason}
        return JSONResponse(
            {**meta, "object": obj, "choices": [choice], "usage": _usage(res), "editserver": info},
            headers={"X-Request-Id": meta["id"]},
        )

    # ---- routes --------------------------------------------------------------------------------
    @app.post(
        "/v1/fim/completions",
        response_model=FimResponse,
        responses={**ERRORS, **STREAMED},
        dependencies=protected,
        summary="Fill in the middle (Inception)",
    )
    async def fim_completions(body: FimBody, request: Request):
        return await _run(request, body, "fim", "prompt")

    @app.post(
        "/v1/completions",
        response_model=FimResponse,
        responses={**ERRORS, **STREAMED},
        dependencies=protected,
        summary="OpenAI legacy completions with suffix (FIM)",
    )
    async def completions(body: FimBody, request: Request):
        return await _run(request, body, "fim", "prompt")

    @app.post(
        "/v1/edit/completions",
        response_model=EditResponse,
        responses={**ERRORS, **STREAMED},
        dependencies=protected,
        summary="Next-edit prediction (Inception)",
    )
    async def edit_completions(body: EditBody, request: Request):
        return await _run(request, body, "edit", "messages")

    def _cards() -> list[ModelCard]:
        names = [
            settings.served_model_name,
            *[a for a in settings.aliases if a != settings.served_model_name],
        ]
        return [
            ModelCard(
                id=n,
                created=created,
                owned_by="editserver",
                root=settings.served_model_name,
                context_length=engine.context_length,
                max_output_length=cap,
                features=FEATURES,
                family=engine.family,
                parameters=engine.num_parameters,
                dtype=engine.dtype,
                window=min(engine.window, engine.context_length),
            )
            for n in names
        ]

    @app.get("/v1/models", response_model=ModelList, responses=ERRORS, dependencies=protected)
    async def models() -> ModelList:
        return ModelList(data=_cards())

    @app.get(
        "/v1/models/{model_id}",
        response_model=ModelCard,
        responses={**ERRORS, 404: {"model": ErrorResponse}},
        dependencies=protected,
    )
    async def model_card(model_id: str) -> ModelCard:
        for card in _cards():
            if card.id == model_id:
                return card
        raise APIError(
            404, f"the model '{model_id}' does not exist", "invalid_request_error", "model", "model_not_found"
        )

    @app.get("/health", response_model=Health)
    async def health() -> Health:
        return Health(
            model=settings.served_model_name,
            device=engine.device,
            queue_depth=scheduler.depth,
            running=scheduler.running,
            meta={**engine.ck.meta, **settings.extra},
        )

    @app.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
    async def prometheus() -> Response:
        data, content_type = metrics.render()
        return Response(data, media_type=content_type)

    return app
