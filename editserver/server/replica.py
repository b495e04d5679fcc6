"""One serving replica's lifecycle: loading, ready, draining; what a load balancer needs to see.

Design decisions:
- ``Replica`` is a pure ASGI app in front of the API (app.py ``create_app``): the port opens at once
  and the model loads on a thread, so a load balancer or a supervisor can tell "starting" from "down".
  Until the API exists, ``/health`` and every other route answer 503 with an OpenAI-style error
  (``code`` ``model_loading``, ``Retry-After: 1``); ``/metrics`` answers from the first moment.
- A load that fails is reported by ``on_failure`` (``serve`` prints one line and exits with status 2).
- Drain (``drain``, on SIGTERM from ``serve``): ``/health`` turns 503 at once and new requests get 503
  (``code`` ``draining``, ``Connection: close``), which a proxy retries on another replica
  (deploy/nginx.conf); requests already in flight, streams included, run to their end.
  ``idle`` tells ``serve`` when the last one has finished, and only then does uvicorn stop
  listening and exit.
- ``/health`` and ``/metrics`` are not counted in flight: a probe never holds a drain open.
- Every response carries ``X-Editserver-Replica`` so a client behind a proxy can tell who answered.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

from editserver.server.metrics import Metrics

log = logging.getLogger("editserver.serve")

UNTRACKED = ("/health", "/metrics")


class Replica:
    def __init__(
        self,
        build: Callable[[], Any],
        metrics: Metrics,
        replica_id: str,
        on_failure: Callable[[BaseException], None] | None = None,
    ):
        """``build()`` runs on a thread and returns the API app (it loads the model)."""
        self.build, self.metrics, self.replica_id = build, metrics, replica_id
        self.on_failure = on_failure
        self.phase = "loading"  # loading | ready | draining | failed
        self.app: Any = None
        self.inflight = 0
        self._stack = AsyncExitStack()
        self._task: asyncio.Task | None = None
        self._header = (b"x-editserver-replica", replica_id.encode("latin-1", "replace"))

    # ---- lifecycle -------------------------------------------------------------------------------
    async def _load(self) -> None:
        try:
            app = await asyncio.to_thread(self.build)
            # the API's own lifespan (its scheduler thread) runs inside ours
            await self._stack.enter_async_context(app.router.lifespan_context(app))
        except Exception as exc:  # noqa: BLE001 - reported as one line by serve, never a traceback
            self.phase = "failed"
            if self.on_failure is not None:
                self.on_failure(exc)
            return
        self.app = app
        if self.phase == "loading":
            self.phase = "ready"
            self.metrics.ready.set(1)
            log.info(f"ready: replica {self.replica_id}")

    def drain(self) -> None:
        """Stop taking new work; in-flight requests go on (``idle`` says when they are done)."""
        if self.phase in ("loading", "ready"):
            self.phase = "draining"
            self.metrics.ready.set(0)
            self.metrics.draining.set(1)
            log.info(f"draining: replica {self.replica_id}, {self.inflight} requests in flight")

    @property
    def idle(self) -> bool:
        return self.inflight == 0

    # ---- ASGI ------------------------------------------------------------------------------------
    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            return await self._lifespan(receive, send)
        if scope["type"] != "http":
            if self.app is not None:
                return await self.app(scope, receive, send)
            return None

        async def tagged(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), self._header]}
            await send(message)

        path = scope.get("path", "")
        if path == "/metrics" and self.app is None:
            data, content_type = self.metrics.render()
            return await _respond(tagged, 200, data, content_type)
        if self.phase != "ready" and not (path == "/metrics"):
            return await self._refuse(path, tagged)
        if path in UNTRACKED:
            return await self.app(scope, receive, tagged)
        self.inflight += 1
        try:
            await self.app(scope, receive, tagged)
        finally:
            self.inflight -= 1

    async def _refuse(self, path: str, send) -> None:
        loading = self.phase in ("loading", "failed")
        message = (
            "the model is still loading; retry shortly"
            if loading
            else "this replica is shutting down; retry (another replica will answer)"
        )
        error = {"message": message, "type": "server_error", "param": None, "code": None}
        error["code"] = "model_loading" if loading else "draining"
        body: dict = {"error": error}
        if path == "/health":
            body = {"status": "loading" if loading else "draining", "replica": self.replica_id, **body}
        headers = [(b"retry-after", b"1")]
        if not loading:
            headers.append((b"connection", b"close"))  # a proxy should not reuse this connection
        await _respond(send, 503, json.dumps(body).encode(), "application/json", headers)

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._task = asyncio.create_task(self._load())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._task is not None and not self._task.done():
                    await asyncio.wait({self._task})  # the loading thread cannot be interrupted
                await self._stack.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


async def _respond(send, status: int, body: bytes, content_type: str, headers: list | None = None) -> None:
    head = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": head + (headers or [])})
    await send({"type": "http.response.body", "body": body})


def draining_server(config, replica: Replica, drain_timeout: float):
    """A ``uvicorn.Server`` whose first SIGTERM/SIGINT drains ``replica`` before the usual graceful
    shutdown: it exits once the replica is idle or after ``drain_timeout`` seconds; a second signal
    shuts down at once (uvicorn's own ``timeout_graceful_shutdown`` then bounds what is left)."""
    import time

    import uvicorn

    class DrainingServer(uvicorn.Server):
        drain_started: float | None = None

        def handle_exit(self, sig, frame) -> None:
            if self.drain_started is None and replica.phase != "failed":
                self.drain_started = time.monotonic()
                replica.drain()
                return
            self.should_exit = True  # a second signal: stop waiting for the drain
            if self.drain_started is not None and time.monotonic() - self.drain_started > 0.5:
                self.force_exit = True

        async def on_tick(self, counter: int) -> bool:
            if self.drain_started is not None and not self.should_exit:
                waited = time.monotonic() - self.drain_started
                if replica.idle or waited > drain_timeout:
                    if not replica.idle:
                        log.warning(f"drain timeout: {replica.inflight} requests still in flight")
                    self.should_exit = True
            return await super().on_tick(counter)

    return DrainingServer(config)
