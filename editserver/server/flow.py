"""The one request flow every completion endpoint shares: validate, submit, await or stream.

Design decisions:
- Inference never runs on the event loop: the request goes to the scheduler's worker thread and the
  handler awaits its future; per-step drafts cross back through ``loop.call_soon_threadsafe``.
- Client disconnects: a watcher task waits for ``http.disconnect`` and sets the job's cancel event,
  so a queued job is dropped and a running one stops denoising at its next step. The log shows 499.
- Streams wait for the job to start (or fail) before sending headers, so context-overflow and
  similar errors are real HTTP 400s; an error after the headers is reported in-band as an
  OpenAI-style error event, then ``[DONE]``, never a dropped connection.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from fastapi import Request
from fastapi.responses import StreamingResponse

from editserver.protocol.prompt import PromptError
from editserver.server import responses as out
from editserver.server.errors import APIError, translate
from editserver.server.scheduler import Cancelled, Job, QueueFull
from editserver.server.schemas import EditBody, FimBody, RequestError
from editserver.server.state import Served

log = logging.getLogger("editserver.server.flow")


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


def _submit(s: Served, body: FimBody | EditBody, param: str) -> tuple[Job, asyncio.Queue]:
    try:
        engine_req = body.to_engine(s.limits)
    except (PromptError, RequestError) as exc:
        raise translate(exc, param) from exc
    loop = asyncio.get_running_loop()
    events: asyncio.Queue = asyncio.Queue()
    on_step = None
    if body.diffusing_stream:

        def on_step(draft: str) -> None:
            loop.call_soon_threadsafe(events.put_nowait, draft)

    try:
        return s.scheduler.submit(engine_req, on_step), events
    except (QueueFull, Cancelled) as exc:
        raise translate(exc, param) from exc


async def run_request(s: Served, request: Request, body: FimBody | EditBody, kind: str, param: str):
    """Answer one completion request of ``kind`` ("fim" | "edit"); ``param`` names the field an
    error points at."""
    job, events = _submit(s, body, param)
    fut = asyncio.wrap_future(job.future)
    watcher = asyncio.create_task(_watch_disconnect(request, job))
    rid = f"{'cmpl' if kind == 'fim' else 'edit'}-{uuid.uuid4().hex[:24]}"
    meta = {"id": rid, "created": int(time.time()), "model": body.model or s.settings.served_model_name}
    request.state.log = {"id": rid, "kind": kind, "stream": body.streaming}
    if kind == "edit":  # whose threshold the answer is held to (schemas.EditBody.edit_kind)
        request.state.log["edit_kind"] = body.edit_kind or "in_file"
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
        return out.finish(s, request, kind, body, meta, result)
    chunks = _stream(s, request, body, kind, param, meta, first, events, fut, job, watcher)
    return StreamingResponse(
        chunks, media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Request-Id": rid}
    )


def _error_event(exc: Exception, param: str) -> dict:
    try:
        err = translate(exc, param)
    except Exception:  # noqa: BLE001 - a bug: logged, reported as a 500-style event
        log.exception("stream failed")
        err = APIError(
            500, "internal server error (see the server log)", "server_error", None, "internal_error"
        )
    return {"error": {"message": err.message, "type": err.type, "param": err.param, "code": err.code}}


async def _stream(s, request, body, kind, param, meta, first, events, fut, job, watcher):
    """The stream's events: each new draft (diffusing streams), the final chunks, ``[DONE]``."""
    try:
        draft, last = first, None
        while draft is not None:
            if draft != last:
                yield out.sse(out.chunk(kind, meta, out.shown_draft(kind, draft), None, body))
                last = draft
            draft = await _next(events, fut)
        res = await fut
        for payload in out.final_chunks(s, request, kind, body, meta, res):
            yield out.sse(payload)
        yield out.sse("[DONE]")
    except Exception as exc:  # noqa: BLE001 - headers are sent: report in-band, never crash
        yield out.sse(_error_event(exc, param))
        yield out.sse("[DONE]")
    finally:
        watcher.cancel()
        if not fut.done():
            job.cancel.set()
