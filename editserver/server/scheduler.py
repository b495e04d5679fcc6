"""The request queue and the one worker thread that runs the model.

Design decisions:
- One worker thread owns the ``Engine``: the event loop only enqueues and awaits, so no inference ever
  blocks it, and the model never runs two batches at once (on 2 CPU cores a second concurrent batch
  would only thrash; on a GPU one stream is what we have).
- Bounded queue: ``submit`` raises ``QueueFull`` (-> HTTP 429) once ``max_queue`` requests wait, so
  overload is answered at once instead of growing latency without bound. Running requests do not
  count towards the bound.
- Opportunistic batching: when the worker picks a request, it also takes queued requests that can share
  its decode (equal decode plans, model/infer/plan.py, up to ``max_batch``), keeping FIFO order
  otherwise. Each row keeps its own canvas (model/infer/sampler.py ``Decode``), so a request gets the
  answer it would get alone, whatever it shares a batch with.
- Step-level admission: while a greedy decode runs, queued requests of its plan join it at its next
  block boundary (``Engine.open``, model/infer/joinable.py), up to ``max_batch`` requests decoding, and each
  request's future resolves as soon as its own rows are done, not when the decode ends. A joined row
  gets the answer it gets alone (same tokens, text and finish reason). Sampled decodes (temperature >
  0) take no joiners: their rows share one ``torch.Generator``, so a joiner would change the others'
  draws. A request that cannot join (its block boundaries would not line up, or it does not fit)
  goes back to the queue's front and starts a decode of its own; the running rows are untouched.
  Requests that stream intermediate drafts run alone (they neither join nor take joiners).
- Failures: a request whose layout fails decodes alone afterwards and reports its own error there; if
  a decode itself fails, every request in it that has no answer yet is retried one by one, so one
  bad request cannot fail others.
- Metrics: a "batch" is one decode, from its start to its last answer: ``editserver_batch_size``
  counts the requests it answered (joiners included), ``editserver_admitted`` the joiners, the
  running gauge the requests decoding at each moment, and a request's queue wait ends when it starts
  or joins.
- Cancellation: every job carries a ``threading.Event`` set when its client disconnects. A queued job
  is dropped when picked; a running job's rows stop at the decode's next step and leave it, while the
  other rows go on.
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
    no_join: bool = False  # it could not join a running decode: it starts one of its own

    def batch_key(self, engine: Engine) -> DecodePlan | None:
        """Requests with equal decode plans can share one ``complete_batch`` call; None runs alone
        (a streamed request, or one whose options cannot be planned: its decode reports why)."""
        if self.request.options.on_step is not None:
            return None
        try:
            return engine.plan(self.request)
        except ValueError:
            return None


class Scheduler:
    def __init__(self, engine: Engine, metrics: Metrics, max_queue: int, max_batch: int, join: bool):
        # the limits have no defaults here: serve's Settings (server/settings.py) holds them once
        self.engine = engine
        self.join = join  # queued requests may join a running decode (module docstring)
        self.metrics = metrics
        self.max_queue = max_queue
        self.max_batch = max_batch
        self._queue: collections.deque[Job] = collections.deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._running = 0
        self._current: list[Job] = []  # the requests being decoded (each one's cancel event stops its rows)
        self._done: list[Completion] = []  # answers the running decode has delivered
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
        t0 = time.perf_counter()
        self._current, self._done = list(batch), []
        alone: list[Job] = []  # requests that could not join the others: each decodes alone afterwards
        try:
            run = self.engine.open(self.engine.plan(batch[0].request))
            for job in batch:
                try:
                    run.join(job.request, self._deliver(job))
                except Exception:  # noqa: BLE001 - its own decode reports why
                    if len(batch) == 1:
                        raise
                    alone.append(job)
                    self._current.remove(job)
            self._set_running(run.open)
            admit = self._admit if self.join and batch[0].key is not None and self.max_batch > 1 else None
            run.run(admit)
        except Exception as exc:  # noqa: BLE001 - every failure goes back to its request, none kills the worker
            left = [j for j in [*self._current, *alone] if not j.future.done()]
            self._current = []
            self._set_running(0)
            if len(batch) > 1 or any(j not in batch for j in left):
                for job in left:
                    self._execute([job])
                return
            if not isinstance(exc, ValueError):
                log.exception("inference failed")
            for job in left:
                job.future.set_exception(exc)
            return
        self._current = []
        self._set_running(0)
        if self._done:
            self.metrics.observe_batch(batch[0].kind, self._done, time.perf_counter() - t0, run.steps)
        for job in alone:
            self._execute([job])

    def _set_running(self, n: int) -> None:
        self._running = n
        self.metrics.running.set(n)

    def _deliver(self, job: Job) -> Callable[[Completion], None]:
        """The worker's callback when the job's rows are done: its future resolves at once."""

        def deliver(c: Completion) -> None:
            self._done.append(c)
            if c.finish_reason == "cancelled":
                self.metrics.cancelled.labels("running").inc()
            together = len(self._current)  # requests decoding beside it when it left, itself included
            if job in self._current:
                self._current.remove(job)
            self._set_running(len(self._current))
            if not job.future.done():
                job.future.set_result(Result(c, job.started - job.submitted, max(1, together)))

        return deliver

    def _admit(self, run) -> None:
        """At a block boundary of ``run``: queued requests of its plan join it, up to ``max_batch``
        running. One that cannot join (its block boundaries, its length) goes back to the queue's
        front with ``no_join`` set, to start a decode of its own; the running rows go on untouched."""
        room = self.max_batch - run.open
        if room <= 0 or not self._queue:
            return
        with self._cond:
            if self._stopping:
                return
            taken, keep = [], collections.deque()
            for job in self._queue:
                if len(taken) < room and not job.no_join and job.key == run.plan and not job.cancel.is_set():
                    taken.append(job)
                else:
                    keep.append(job)
            self._queue = keep
            self.metrics.queue_depth.set(len(self._queue))
        back = []
        for job in taken:
            try:
                run.join(job.request, self._deliver(job))
            except Exception:  # noqa: BLE001 - it decodes alone later and reports its own error there
                job.no_join = True
                back.append(job)
                continue
            if not job.future.set_running_or_notify_cancel():  # its client left meanwhile: its rows stop
                job.cancel.set()
                continue
            job.started = time.perf_counter()
            self.metrics.queue_wait.observe(job.started - job.submitted)
            self._current.append(job)
            self.metrics.admitted.inc()
        self._set_running(run.open)
        if back:
            with self._cond:
                self._queue.extendleft(reversed(back))
                self.metrics.queue_depth.set(len(self._queue))
