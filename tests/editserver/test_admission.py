"""Step-level admission through the real scheduler and a real engine (server/scheduler.py): requests
queued while a decode runs join it at a block boundary, answer as they would alone, and resolve as
soon as they are done; sampled requests never join a running decode.

The worker is held at its first model call (a forward pre-hook on the first layer waits on an event)
until the test has queued the others, so they really arrive while the decode runs."""

from __future__ import annotations

import threading

import pytest

from editserver.model.infer.engine import Engine, FimRequest, SamplingOptions
from editserver.model.infer.transformer import ContextTooLongError
from editserver.server.metrics import Metrics
from editserver.server.scheduler import Scheduler
from tests.model.test_admission import PREFIXES, SUFFIX


@pytest.fixture(scope="module")
def engine(tiny_checkpoint) -> Engine:
    return Engine.load(tiny_checkpoint, prefix_cache_mb=0)


def fim(prefix: str, n: int, **kw) -> FimRequest:
    return FimRequest(prefix, SUFFIX, max_tokens=n, options=SamplingOptions(block_size=4, **kw))


def run_held(engine: Engine, first: FimRequest, later: list[FimRequest], max_batch: int = 8):
    """Submit ``first``; once the worker is inside its decode, queue ``later``; then let it go on.
    Returns the jobs and the scheduler's metrics."""
    gate, inside = threading.Event(), threading.Event()

    def hold(module, args) -> None:
        inside.set()
        gate.wait(30)

    handle = engine.model.layers[0].register_forward_pre_hook(hold)
    metrics = Metrics()
    sched = Scheduler(engine, metrics, max_queue=16, max_batch=max_batch, join=True)
    sched.start()
    try:
        jobs = [sched.submit(first)]
        assert inside.wait(30)
        jobs += [sched.submit(r) for r in later]
        handle.remove()
        gate.set()
        results = [j.future.result(60) for j in jobs]
    finally:
        handle.remove()
        gate.set()
        sched.stop()
    return jobs, results, metrics


def admitted(metrics: Metrics) -> float:
    return metrics.registry.get_sample_value("editserver_admitted_total") or 0.0


def test_queued_requests_join_and_answer_as_alone(engine: Engine) -> None:
    first, later = fim(PREFIXES[0], 40), [fim(PREFIXES[1], 24), fim(PREFIXES[2], 30), fim(PREFIXES[3], 6)]
    alone = [engine.complete(r) for r in [first, *later]]
    # max_batch 2: one request joins at the first boundary, the others as rows leave
    jobs, results, metrics = run_held(engine, first, later, max_batch=2)
    assert admitted(metrics) >= 1
    for a, r in zip(alone, results, strict=True):
        assert (r.completion.text, r.completion.finish_reason) == (a.text, a.finish_reason)
        assert r.completion.completion_tokens == a.completion_tokens


def test_a_short_joiner_resolves_before_the_long_request(engine: Engine) -> None:
    first, short = fim(PREFIXES[0], 40), fim(PREFIXES[3], 4)
    alone = engine.complete(first)
    assert alone.steps > 2, "the long request takes several blocks"
    done_at: dict[str, bool] = {}
    gate, inside = threading.Event(), threading.Event()

    def hold(module, args) -> None:
        inside.set()
        gate.wait(30)

    handle = engine.model.layers[0].register_forward_pre_hook(hold)
    metrics = Metrics()
    sched = Scheduler(engine, metrics, max_queue=16, max_batch=2, join=True)
    sched.start()
    try:
        long_job = sched.submit(first)
        assert inside.wait(30)
        short_job = sched.submit(short)
        short_job.future.add_done_callback(lambda f: done_at.setdefault("long_done", long_job.future.done()))
        handle.remove()
        gate.set()
        long_res, short_res = long_job.future.result(60), short_job.future.result(60)
    finally:
        handle.remove()
        gate.set()
        sched.stop()
    assert admitted(metrics) == 1
    assert done_at["long_done"] is False  # the short answer came while the long one still decoded
    assert long_res.completion.text == alone.text
    assert short_res.completion.text == engine.complete(short).text


def test_sampled_requests_never_join(engine: Engine) -> None:
    first = fim(PREFIXES[0], 40, temperature=0.8, seed=5)
    later = [fim(PREFIXES[2], 30, temperature=0.8, seed=5)]
    alone = [engine.complete(r) for r in [first, *later]]
    jobs, results, metrics = run_held(engine, first, later)
    assert admitted(metrics) == 0
    for a, r in zip(alone, results, strict=True):
        assert r.completion.text == a.text


def test_a_request_that_cannot_join_fails_alone_and_the_others_keep_their_answers(engine: Engine) -> None:
    first, good = fim(PREFIXES[0], 40), fim(PREFIXES[2], 30)
    too_long = fim("x = 1\n" * engine.context_length, 8)
    alone = [engine.complete(first), engine.complete(good)]
    gate, inside = threading.Event(), threading.Event()

    def hold(module, args) -> None:
        inside.set()
        gate.wait(30)

    handle = engine.model.layers[0].register_forward_pre_hook(hold)
    sched = Scheduler(engine, Metrics(), max_queue=16, max_batch=8, join=True)
    sched.start()
    try:
        jobs = [sched.submit(first)]
        assert inside.wait(30)
        jobs += [sched.submit(too_long), sched.submit(good)]
        handle.remove()
        gate.set()
        with pytest.raises(ContextTooLongError):
            jobs[1].future.result(60)
        assert jobs[0].future.result(60).completion.text == alone[0].text
        assert jobs[2].future.result(60).completion.text == alone[1].text
    finally:
        handle.remove()
        gate.set()
        sched.stop()


def test_a_cancelled_joiner_stops_and_the_others_keep_their_answers(engine: Engine) -> None:
    first, quitter, short = fim(PREFIXES[0], 40), fim(PREFIXES[1], 24), fim(PREFIXES[3], 4)
    alone = [engine.complete(r) for r in (first, quitter, short)]
    assert alone[1].steps > 2, "the quitter would take several blocks"
    gate, inside = threading.Event(), threading.Event()

    def hold(module, args) -> None:
        inside.set()
        gate.wait(30)

    handle = engine.model.layers[0].register_forward_pre_hook(hold)
    metrics = Metrics()
    sched = Scheduler(engine, metrics, max_queue=16, max_batch=8, join=True)
    sched.start()
    try:
        jobs = [sched.submit(first)]
        assert inside.wait(30)
        jobs += [sched.submit(quitter), sched.submit(short)]
        # the short joiner's answer comes after one block; its client then cancels the quitter, whose
        # rows are mid-decode (as a disconnect does, server/flow.py)
        jobs[2].future.add_done_callback(lambda f: jobs[1].cancel.set())
        handle.remove()
        gate.set()
        results = [j.future.result(60) for j in jobs]
    finally:
        handle.remove()
        gate.set()
        sched.stop()
    assert admitted(metrics) == 2
    assert results[1].completion.finish_reason == "cancelled"
    assert metrics.registry.get_sample_value("editserver_cancelled_total", {"stage": "running"}) == 1
    for i in (0, 2):
        assert (results[i].completion.text, results[i].completion.finish_reason) == (
            alone[i].text,
            alone[i].finish_reason,
        )
