"""Prometheus metrics for one server instance (``GET /metrics``) and the per-request access log.

Design decisions:
- A private ``CollectorRegistry`` per app, not the global one: tests and benchmarks may build several
  apps in one process, and ``/metrics`` then shows exactly this server's numbers.
- Endpoint labels are route templates (``/v1/fim/completions``), never raw paths, so a scanner hitting
  random URLs cannot blow up label cardinality (unknown paths count as ``other``).
- Cancellation is counted by where it stopped the work: ``queued`` (never ran) or ``running`` (the
  denoising loop stopped early). Tests read these to prove a disconnect really stopped the work.
- ``AccessLog`` is a pure ASGI middleware, so it sees the status and the *last* byte of streamed
  responses too: it counts the request, observes its latency and writes one JSON line (method, path,
  status, latency, plus whatever the handler put in ``request.state.log``: tokens, steps, queue time,
  the outcome).
- Outcomes (shown or why not, editserver/server/outcome.py) are counted per kind, in two counters with the
  same label: ``editserver_edit_outcomes_total`` and ``editserver_fim_outcomes_total``.
- Replicas (docs/scale-out.md): ``editserver_replica_info{replica="host:port"} 1`` names the replica
  whose numbers these are (``serve --replica-id``), the usual Prometheus info metric: series are
  told apart by the scrape's ``instance`` label and joined to the name with ``group_left``. The
  replica label is not added to every series, so the series and their label sets stay what every
  reader of ``/metrics`` expects. ``editserver_ready`` and ``editserver_draining`` (0/1) show the
  lifecycle (editserver/server/replica.py).
- Histogram buckets are sized for this model: requests from milliseconds (tiny test model) to tens
  of seconds (long canvases on a busy CPU); tokens per step from 1 (sequential) to a whole block.
"""

from __future__ import annotations

import json
import logging
import time

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from editserver.model.infer.engine import Completion

access_log = logging.getLogger("editserver.access")

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TOKENS_PER_STEP_BUCKETS = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0)
BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 32)


class Metrics:
    def __init__(self, replica: str | None = None) -> None:
        r = self.registry = CollectorRegistry()
        self.replica = replica
        if replica is not None:
            info = Gauge(
                "editserver_replica_info", "the replica these metrics are from", ["replica"], registry=r
            )
            info.labels(replica).set(1)
        self.ready = Gauge(
            "editserver_ready", "1 once the model is loaded, 0 while loading or draining", registry=r
        )
        self.draining = Gauge("editserver_draining", "1 while shutting down gracefully", registry=r)
        self.requests = Counter(
            "editserver_requests", "HTTP requests answered", ["endpoint", "status"], registry=r
        )
        self.latency = Histogram(
            "editserver_request_latency_seconds",
            "time from request to last byte sent",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_wait = Histogram(
            "editserver_queue_wait_seconds",
            "time a request waited for the model",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.inference = Histogram(
            "editserver_inference_seconds",
            "model time per batch",
            ["kind"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.tokens_per_step = Histogram(
            "editserver_tokens_per_step",
            "completion tokens per denoising step",
            ["kind"],
            buckets=TOKENS_PER_STEP_BUCKETS,
            registry=r,
        )
        self.steps = Counter("editserver_denoise_steps", "denoising steps run", ["kind"], registry=r)
        self.prompt_tokens = Counter("editserver_prompt_tokens", "prompt tokens", ["kind"], registry=r)
        self.completion_tokens = Counter(
            "editserver_completion_tokens", "completion tokens", ["kind"], registry=r
        )
        self.queue_depth = Gauge("editserver_queue_depth", "requests waiting for the model", registry=r)
        self.running = Gauge("editserver_running_requests", "requests being decoded", registry=r)
        self.batch_size = Histogram(
            "editserver_batch_size",
            "requests one decode answered: those it started with and those that joined it",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.admitted = Counter(
            "editserver_admitted", "requests that joined a running decode at a block boundary", registry=r
        )
        self.cancelled = Counter(
            "editserver_cancelled", "requests whose client went away", ["stage"], registry=r
        )
        self.rejected = Counter(
            "editserver_rejected", "requests refused before queueing", ["reason"], registry=r
        )
        self.edit_outcomes = Counter(
            "editserver_edit_outcomes", "next-edit answers by outcome", ["outcome"], registry=r
        )
        self.fim_outcomes = Counter(
            "editserver_fim_outcomes", "FIM answers by outcome", ["outcome"], registry=r
        )

    def observe_batch(
        self, kind: str, completions: list[Completion], seconds: float, steps: int | None = None
    ) -> None:
        """One decode: its answers, its time and its steps (None: the first answer's, one loop for all)."""
        self.inference.labels(kind).observe(seconds)
        self.batch_size.observe(len(completions))
        if completions:
            self.steps.labels(kind).inc(completions[0].steps if steps is None else steps)
        for c in completions:
            self.prompt_tokens.labels(kind).inc(c.prompt_tokens)
            self.completion_tokens.labels(kind).inc(c.completion_tokens)
            if c.steps:
                self.tokens_per_step.labels(kind).observe(c.tokens_per_step)

    def count_outcome(self, kind: str, outcome: str) -> None:
        """One answered request by what it showed (editserver/server/outcome.py), per kind."""
        (self.edit_outcomes if kind == "edit" else self.fim_outcomes).labels(outcome).inc()

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class AccessLog:
    """Pure ASGI middleware: request metrics and one JSON log line once the response is fully sent."""

    def __init__(self, app, metrics: Metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0, status = time.perf_counter(), [500]

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            endpoint = getattr(route, "path", None) or "other"
            fields = dict(scope.get("state", {}).get("log", {}))
            final = fields.pop("status", status[0])
            latency = time.perf_counter() - t0
            self.metrics.requests.labels(endpoint, str(final)).inc()
            self.metrics.latency.labels(endpoint).observe(latency)
            line = {
                "event": "request",
                "method": scope.get("method"),
                "path": scope.get("path"),
                "status": final,
                "latency_ms": round(latency * 1000, 1),
                **fields,
            }
            access_log.info(json.dumps(line, ensure_ascii=False))
