"""The HTTP API: Inception's Mercury Edit endpoints plus OpenAI's legacy completions, on FastAPI.

Design decisions:
- ``create_app(settings, engine=None)`` is the one factory: it loads the engine, starts the
  scheduler and mounts the routes (routes.py), which are module-level and thin: validate
  (schemas.py), submit to the scheduler (scheduler.py) through the one request flow (flow.py), shape
  the answer (responses.py). What a handler needs is one ``Served`` on ``app.state``. Inference never
  runs on the event loop.
- Errors always have OpenAI's shape (errors.py): 422 names the invalid field, 400 for requests that
  cannot be served (malformed prompt, beyond the 32K window), 401 bad key, 413 body too large,
  429 queue full.
- Browsers: CORS headers only for ``serve --allow-origin`` origins (none by default), so a web page
  the user happens to visit cannot call the local API with the user's code.
- Next edit never returns "no prediction": when the model's rewrite is unchanged, truncated (ran out
  of canvas), empty (it would delete the whole region on a vacuous score) or scores below the
  checkpoint's selectivity threshold for its kind, the content is the region as sent, so
  Zed/Continue show nothing.
- FIM answers "" (finish_reason "stop") when the model's text is blank or scores below the
  checkpoint's ``fim_threshold``: no ghost text rather than a wrong one. Both rules live in
  outcome.py, and every answer shape (JSON, plain stream, diffusing stream) is built from its one
  ``View``, so they agree. Our ``editserver`` field carries the score, whether it cleared the
  threshold in force for its kind, that threshold, the outcome and the model's own text, for
  clients that want to decide themselves.
- Next edit has a threshold per kind: a request marked ``"edit_kind": "cross_file"`` (a region in
  another file than the one edited; the LSP marks them) is held to the checkpoint's
  ``cross_file_threshold``, every other one, and every Inception client that sends no kind, to
  ``in_file_threshold``: such clients ask about the file they edit. ``/v1/models`` lists the
  thresholds in force and the ``editserver`` field says which one applied (``edit_kind``).
- ``serve --fim-threshold/--edit-threshold`` (Settings) replace the checkpoint's thresholds on the
  engine before anything is served, so every answer, the ``editserver`` field and the replay agree;
  ``--edit-threshold`` replaces both next-edit ones.
- Streams are Server-Sent Events ending in ``data: [DONE]``. The diffusion canvas is decoded in
  parallel, so a plain stream sends the answer as one chunk when it is ready; ``diffusing: true``
  sends every intermediate draft, each one the whole current text that replaces the previous one
  (Mercury's convention), the last one being the final answer. Streams wait for the job to start (or
  fail) before sending headers, so context-overflow and similar errors are real HTTP 400s.
- One structured (JSON) log line per request (metrics.AccessLog), after the last byte is sent; the
  handlers add tokens, steps, queue time and the outcome (edit and FIM) to it, and count the outcome
  per kind. Logs go to stderr only.
"""

from __future__ import annotations

import dataclasses
import time
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from editserver.model.infer.engine import Engine
from editserver.server.errors import BodyLimit, install_error_handlers
from editserver.server.metrics import AccessLog, Metrics
from editserver.server.routes import router
from editserver.server.scheduler import Scheduler
from editserver.server.schemas import Limits
from editserver.server.settings import Settings
from editserver.server.state import Served


def _with_overrides(engine: Engine, settings: Settings) -> None:
    """``serve --fim-threshold/--edit-threshold`` replace the checkpoint's thresholds on the engine,
    which decides above/below threshold itself, so every answer and the ``editserver`` field agree.
    ``--edit-threshold`` replaces the joint, in-file and cross-file ones alike."""
    edit = settings.edit_threshold
    overrides = {
        k: v
        for k, v in (
            ("fim_threshold", settings.fim_threshold),
            ("selectivity_threshold", edit),
            ("in_file_threshold", edit),
            ("cross_file_threshold", edit),
        )
        if v is not None
    }
    if overrides:
        engine.inference = dataclasses.replace(engine.inference, **overrides)


def load_engine(settings: Settings) -> Engine:
    """The model as the settings ask for it: the one place serving options reach ``Engine.load``."""
    return Engine.load(
        settings.model,
        settings.device,
        settings.dtype,
        settings.max_context,
        chat_template=settings.chat_template,
        block_size=settings.block_size,
        prefix_cache_mb=settings.prefix_cache_mb,
        prefix_cache_suffix=settings.prefix_cache_suffix,
        quantize=settings.quantize,
    )


def create_app(settings: Settings, engine: Engine | None = None, metrics: Metrics | None = None) -> FastAPI:
    """The API; ``metrics``: a registry made before the model loaded (replica.py), else a new one."""
    if engine is None:
        engine = load_engine(settings)
    _with_overrides(engine, settings)
    metrics = metrics if metrics is not None else Metrics()
    metrics.ready.set(1)  # the model is loaded (replica.py shows 0 before, and while draining)
    scheduler = Scheduler(engine, metrics, settings.max_queue, settings.max_batch, settings.join_running)
    cap = min(settings.max_output_tokens or engine.max_output_tokens, engine.max_output_tokens)
    served = Served(
        settings=settings,
        engine=engine,
        scheduler=scheduler,
        metrics=metrics,
        limits=Limits(max_output_tokens=cap, fim_default_tokens=engine.inference.fim_max_tokens),
        thresholds={
            "fim": engine.inference.fim_threshold,
            "in_file": engine.inference.edit_threshold(cross_file=False),
            "cross_file": engine.inference.edit_threshold(cross_file=True),
        },
        created=int(time.time()),
    )

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
    app.state.served = served
    app.state.engine, app.state.scheduler, app.state.metrics = engine, scheduler, metrics
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    app.add_middleware(AccessLog, metrics=metrics)  # outside BodyLimit: a 413 is logged and counted
    if settings.allow_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.allow_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
        )
    install_error_handlers(app)
    app.include_router(router)
    return app
