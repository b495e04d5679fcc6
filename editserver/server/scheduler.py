"""The request queue and the one worker thread that runs the model.

Design decisions:
- One worker thread owns the ``Engine``: the event loop only enqueues and awaits, so no inference ever
  blocks it, and the model never runs two batches at once (on 2 CPU cores a second concurrent batch
  would only thrash; on a GPU one stream is what we have).
- Bounded queue: ``submit`` raises ``QueueFull`` (-> HTTP 429) once ``max_queue`` requests wait, so
  overload is answered at once instead of growing latency without bound. Running requests do not
  count towards the bound.
- Opportunistic batching: when the worker picks a request, it also takes queued requests that can share
  one ``Engine.complete_batch`` call (equal decode plans, model/infer/plan.py, up to ``max_batch``),
  keeping FIFO order otherwise. Each row keeps its own canvas length (model/infer/sampler.py ``canvas_lens``), so
  a request gets the answer it would get alone, whatever it shares a batch with. Requests that
  stream intermediate drafts run alone (the engine reports drafts for its first row only). If a
  batch fails (e.g. one row's prompt plus the batch's longest canvas exceeds the window), its
  requests are retried one by one, so one bad request cannot fail others.
- Cancellation: every job carries a ``threading.Event`` set when its client disconnects. A queued job
  is dropped when picked; a running job stops the denoising loop at its next step. A batch stops only
  when all of its clients are gone (``_AllSet``), since the others still want their answers.
- Results cross back to asyncio through ``concurrent.futures.Future`` (``asyncio.wrap_future``), and
  per-step drafts through ``loop.call_soon_threadsafe``; the worker never touches the loop otherwise.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from editserver.model.infer.engine import Completion, EditRequest, Engine, FimRequest
from editserver.model.infer.plan import DecodePlan
from editserver.server.metrics import Metrics

log = logging.getLogger("editserver.server.scheduler")


class QueueFull(RuntimeError):
    """The queue holds ``max_queue`` waiting requests; the caller should retry later (HTTP 429)."""


class Cancelled(RuntimeError):
    """The client went away before its request ran."""


@dataclass
class Result:
    completion: Completion
    queue_s: float  # time between submit and the start of its batch
    batch_size: int


@dataclass
class Job:
    request: FimRequest | EditRequest
    kind: str  # "fim" | "edit"
    cancel: threading.Event = field(default_factory=threading.Event)
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    submitted: float = field(default_factory=time.perf_counter)
    started: float | None = None
    key: DecodePlan | None = None  # ``batch_key``'s answer, worked out once when submitted

    def batch_key(self, engine: Engine) -> DecodePlan | None:
        """Requests with equal decode plans can share one ``complete_batch`` call; None runs alone
        (a streamed request, or one whose options cannot be planned: its decode reports why)."""
        if self.request.options.on_step is not None:
            return None
        try:
            return engine.plan(self.request)
        except ValueError:
            return None


class _AllSet(threading.Event):
    """A read-only event that is set when every member is set (a batch stops when all clients left)."""

    def __init__(self, members: list[threading.Event]):
        super().__init__()
        self._members = members

    def is_set(self) -> bool:
        return all(m.is_set() for m in self._members)


class Scheduler:
    def __init__(self, engine: Engine, metrics: Metrics, max_queue: int, max_batch: int):
        # the limits have no defaults here: serve's Settings (server/settings.py) holds them once
        self.engine = engine
        self.metrics = metrics
        self.max_queue = max_queue
        self.max_batch = max_batch
        self._queue: collections.deque[Job] = collections.deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._running = 0
        self._current: list[Job] = []  # the batch being decoded (its cancel events stop it)
        self._thread: threading.Thread | None = None

    # ---- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="editserver-model", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            pending = list(self._queue)
            self._queue.clear()
            self._cond.notify_all()
        for job in [*pending, *self._current]:
            job.cancel.set()
        for job in pending:
            if job.future.set_running_or_notify_cancel():
                job.future.set_exception(Cancelled("server shutting down"))
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def depth(self) -> int:
        return len(self._queue)

    @property
    def running(self) -> int:
        return self._running

    # ---- producer side (event loop) ------------------------------------------------------------
    def submit(self, request: FimRequest | EditRequest, on_step: Callable[[str], None] | None = None) -> Job:
        kind = "fim" if isinstance(request, FimRequest) else "edit"
        if on_step is not None:
            request = dataclasses.replace(
                request, options=dataclasses.replace(request.options, on_step=on_step)
            )
        job = Job(request=request, kind=kind)
        job.request.options.cancel = job.cancel
        job.key = job.batch_key(self.engine)
        with self._cond:
            if self._stopping:
                raise Cancelled("server shutting down")
            if len(self._queue) >= self.max_queue:
                self.metrics.rejected.labels("queue_full").inc()
                raise QueueFull(f"the request queue is full ({self.max_queue} waiting); retry shortly")
            self._queue.append(job)
            self.metrics.queue_depth.set(len(self._queue))
            self._cond.notify()
        return job

    # ---- consumer side (worker thread) ---------------------------------------------------------
    def _take_batch(self) -> list[Job] | None:
        with self._cond:
            while not self._queue and not self._stopping:
                self._cond.wait()
            if self._stopping:
                return None
            first = self._queue.popleft()
            batch, key = [first], first.key
            if key is not None and self.max_batch > 1:
                keep: collections.deque[Job] = collections.deque()
                for job in self._queue:
                    if len(batch) < self.max_batch and not job.cancel.is_set() and job.key == key:
                        batch.append(job)
                    else:
                        keep.append(job)
                self._queue = keep
            self.metrics.queue_depth.set(len(self._queue))
            return batch

    def _loop(self) -> None:
        while True:
            batch = self._take_batch()
            if batch is None:
                return
            live = []
            for job in batch:
                if job.cancel.is_set() or not job.future.set_running_or_notify_cancel():
                    self.metrics.cancelled.labels("queued").inc()
                    if not job.future.done() and not job.future.cancelled():
                        job.future.set_exception(Cancelled("client went away while queued"))
                    continue
                live.append(job)
            if live:
                self._execute(live)

    def _execute(self, batch: list[Job]) -> None:
        now = time.perf_counter()
        for job in batch:
            job.started = now
            self.metrics.queue_wait.observe(now - job.submitted)
        reqs = [job.request for job in batch]
        if len(batch) > 1:
            first = reqs[0]
            shared = dataclasses.replace(first.options, cancel=_AllSet([j.cancel for j in batch]))
            reqs[0] = dataclasses.replace(first, options=shared)
        self._running, self._current = len(batch), batch
        self.metrics.running.set(len(batch))
        t0 = time.perf_counter()
        try:
            completions = self.engine.complete_batch(reqs)
        except Exception as exc:  # noqa: BLE001 - every failure goes back to its request, none kills the worker
            if len(batch) > 1:
                for job in batch:
                    self._execute([job])
                return
            if not isinstance(exc, ValueError):
                log.exception("inference failed")
            batch[0].future.set_exception(exc)
            return
        finally:
            self._running, self._current = 0, []
            self.metrics.running.set(0)
        self.metrics.observe_batch(batch[0].kind, completions, time.perf_counter() - t0)
        for job, c in zip(batch, completions, strict=True):
            if c.finish_reason == "cancelled":
                self.metrics.cancelled.labels("running").inc()
            job.future.set_result(Result(c, job.started - job.submitted, len(batch)))
