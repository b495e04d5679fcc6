"""The API's routes, at module level: each handler reads the app's ``Served`` and does one thing.

Design decisions:
- Auth: with ``--api-key`` every ``/v1/*`` route needs ``Authorization: Bearer KEY`` (compared in
  constant time); ``/health`` and ``/metrics`` stay open for local probes and scrapers.
- Completion handlers hand the request to the one flow (flow.py); the model routes describe the
  loaded model as it is served (family, size, dtype, context, the window it reads, the thresholds
  in force: FIM's and next edit's in-file and cross-file ones).
- ``/v1/tokenizer`` serves our own family's tokenizer.json, so a client (the LSP, lsp/budget.py)
  counts its prompts in the model's tokens without a round trip per prompt; an open family's
  prompts are framed by its chat template, which the file does not hold, so it is not served (404).
"""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from editserver.server.errors import APIError
from editserver.server.flow import run_request
from editserver.server.schemas import (
    EditBody,
    EditResponse,
    ErrorResponse,
    FimBody,
    FimResponse,
    Health,
    ModelCard,
    ModelList,
)
from editserver.server.state import Served, served

FEATURES = ["fim", "next_edit", "streaming", "diffusing", "reasoning_effort", "stop", "include_usage"]
ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorResponse} for s in (400, 401, 413, 422, 429, 500, 503)
}
# One Server-Sent Event: ``data`` is a JSON chunk, or ``[DONE]`` at the end.
SSE_EVENT = {
    "type": "object",
    "properties": {"data": {"type": "string"}, "event": {"type": "string"}},
    "required": ["data"],
}
STREAMED = {200: {"content": {"text/event-stream": {"schema": SSE_EVENT}}}}


async def require_key(request: Request) -> None:
    key = served(request).settings.api_key
    if not key:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    ok = scheme.lower() == "bearer" and hmac.compare_digest(
        token.strip().encode("utf-8", "replace"), key.encode("utf-8")
    )
    if not ok:
        raise APIError(
            401,
            "missing or incorrect API key (send 'Authorization: Bearer <key>')",
            "authentication_error",
            None,
            "invalid_api_key",
        )


router = APIRouter()
protected = [Depends(require_key)]
COMPLETION = {"responses": {**ERRORS, **STREAMED}, "dependencies": protected}


@router.post(
    "/v1/fim/completions", response_model=FimResponse, summary="Fill in the middle (Inception)", **COMPLETION
)
async def fim_completions(body: FimBody, request: Request):
    return await run_request(served(request), request, body, "fim", "prompt")


@router.post(
    "/v1/completions",
    response_model=FimResponse,
    summary="OpenAI legacy completions with suffix (FIM)",
    **COMPLETION,
)
async def completions(body: FimBody, request: Request):
    return await run_request(served(request), request, body, "fim", "prompt")


@router.post(
    "/v1/edit/completions",
    response_model=EditResponse,
    summary="Next-edit prediction (Inception)",
    **COMPLETION,
)
async def edit_completions(body: EditBody, request: Request):
    return await run_request(served(request), request, body, "edit", "messages")


def cards(s: Served) -> list[ModelCard]:
    """One card per name the model is served under."""
    name = s.settings.served_model_name
    engine = s.engine
    return [
        ModelCard(
            id=n,
            created=s.created,
            owned_by="editserver",
            root=name,
            context_length=engine.context_length,
            max_output_length=s.cap,
            features=FEATURES,
            family=engine.family,
            parameters=engine.num_parameters,
            dtype=engine.dtype,
            window=min(engine.window, engine.context_length),
            block_size=engine.block_size,
            fim_route=engine.fim_route,
            thresholds=dict(s.thresholds),
        )
        for n in [name, *[a for a in s.settings.aliases if a != name]]
    ]


@router.get("/v1/models", response_model=ModelList, responses=ERRORS, dependencies=protected)
async def models(request: Request) -> ModelList:
    return ModelList(data=cards(served(request)))


@router.get(
    "/v1/models/{model_id}",
    response_model=ModelCard,
    responses={**ERRORS, 404: {"model": ErrorResponse}},
    dependencies=protected,
)
async def model_card(model_id: str, request: Request) -> ModelCard:
    for card in cards(served(request)):
        if card.id == model_id:
            return card
    raise APIError(
        404, f"the model '{model_id}' does not exist", "invalid_request_error", "model", "model_not_found"
    )


@router.get(
    "/v1/tokenizer",
    response_class=Response,
    responses={200: {"content": {"application/json": {}}}, **ERRORS, 404: {"model": ErrorResponse}},
    dependencies=protected,
)
async def tokenizer(request: Request) -> Response:
    engine = served(request).engine
    if engine.family != "editserver":
        raise APIError(
            404,
            f"the {engine.family} family's tokenizer is not served",
            "invalid_request_error",
            None,
            "tokenizer_not_available",
        )
    return Response(engine.tok.hf.to_str(), media_type="application/json")


@router.get("/health", response_model=Health)
async def health(request: Request) -> Health:
    s = served(request)
    return Health(
        model=s.settings.served_model_name,
        device=s.engine.device,
        queue_depth=s.scheduler.depth,
        running=s.scheduler.running,
        meta={**s.engine.ck.meta, **s.settings.extra},
        prefix_cache=None if s.engine.prefix is None else s.engine.prefix.stats(),
    )


@router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
async def prometheus(request: Request) -> Response:
    data, content_type = served(request).metrics.render()
    return Response(data, media_type=content_type)
