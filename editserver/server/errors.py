"""OpenAI-shaped errors: ``{"error": {"message", "type", "param", "code"}}`` for every failure.

Design decisions:
- One place maps every failure to a status: 422 for a field that fails its schema (``param`` names the
  field as a dotted path, e.g. ``messages.0.role``), 400 for requests that parse but cannot be served
  (unparseable JSON, malformed next-edit prompt, input beyond the 32K window, bad option values),
  401 bad key, 404/405 unknown route or model, 413 a body over ``--max-body-bytes`` (``BodyLimit``,
  which answers before the body is read when Content-Length says so, and stops reading a chunked
  body at the limit), 429 full queue (with ``Retry-After``), 503 while
  shutting down, 500 for anything unexpected (logged with its traceback, never shown to the client).
- ``translate`` turns engine/scheduler exceptions into ``APIError``; unknown exceptions propagate to
  the 500 handler, so a bug is never disguised as a client error.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from editserver.model.infer.transformer import ContextTooLongError
from editserver.protocol.prompt import PromptError
from editserver.server.scheduler import Cancelled, QueueFull
from editserver.server.schemas import RequestError

log = logging.getLogger("editserver.server.app")


class APIError(Exception):
    def __init__(
        self, status: int, message: str, type_: str, param: str | None = None, code: str | None = None
    ):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code


def error_response(
    status: int,
    message: str,
    type_: str,
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def _param(loc: tuple) -> str | None:
    """A pydantic error location as a field path: ('body', 'messages', 0, 'content') -> messages.0.content."""
    parts = [
        str(p)
        for p in loc[1:]
        if not (isinstance(p, str) and ("[" in p or p in ("str", "int", "float", "bool")))
    ]
    return ".".join(parts) or None


def validation_error(exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return error_response(
            400, "could not parse the request body as JSON", "invalid_request_error", None, "invalid_json"
        )
    first = errors[0] if errors else {"loc": ("body",), "msg": "invalid request"}
    param = _param(tuple(first.get("loc", ())))
    if param is None and first.get("type") == "missing":
        message = "the request body is required (a JSON object)"
    else:
        msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
        message = f"invalid value for '{param}': {msg}" if param else msg
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return error_response(422, message, "invalid_request_error", param, "invalid_value")


def translate(exc: BaseException, param: str | None) -> APIError:
    """An engine/scheduler failure as the API error a client sees; ``param``: the field it concerns."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, QueueFull):
        return APIError(429, str(exc), "rate_limit_error", None, "queue_full")
    if isinstance(exc, ContextTooLongError):
        return APIError(400, str(exc), "invalid_request_error", param, "context_length_exceeded")
    if isinstance(exc, PromptError):
        return APIError(400, str(exc), "invalid_request_error", param, "invalid_prompt")
    if isinstance(exc, RequestError):
        return APIError(400, str(exc), "invalid_request_error", exc.param or param, exc.code)
    if isinstance(exc, Cancelled):
        return APIError(503, str(exc), "server_error", None, "cancelled")
    if isinstance(exc, ValueError):
        return APIError(400, str(exc), "invalid_request_error", None, "invalid_value")
    raise exc


def _too_large(limit: int) -> str:
    return f"the request body is larger than this server accepts ({limit} bytes; serve --max-body-bytes)"


class BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes is answered 413 in the OpenAI shape."""

    def __init__(self, app: ASGIApp, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            return await error_response(
                413, _too_large(self.limit), "invalid_request_error", None, "request_too_large"
            )(scope, receive, send)
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:  # a chunked body: FastAPI re-raises HTTPException as it is
                raise StarletteHTTPException(413, _too_large(self.limit))
            return message

        await self.app(scope, counted, send)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_req: Request, exc: APIError):
        headers = {"Retry-After": "1"} if exc.status == 429 else None
        return error_response(exc.status, exc.message, exc.type, exc.param, exc.code, headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_req: Request, exc: RequestValidationError):
        return validation_error(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_req: Request, exc: StarletteHTTPException):
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        code = "request_too_large" if exc.status_code == 413 else None
        return error_response(exc.status_code, str(exc.detail), kind, None, code, exc.headers)

    @app.exception_handler(Exception)
    async def _crash(_req: Request, exc: Exception):
        log.error("unhandled error", exc_info=exc)
        return error_response(
            500, "internal server error (see the server log)", "server_error", None, "internal_error"
        )
