"""Requests joining a running decode at a block boundary (model/infer/sampler.py ``Decode``,
model/infer/joinable.py ``Running``): each answer equals the request's answer alone, for the own
transformer and an in-place family; a done request leaves at once; a cancelled one leaves without
touching the others; one that cannot join leaves the running rows as they were; sampled decodes take
no joiners."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from editserver.model.infer.engine import Completion, EditRequest, Engine, FimRequest, SamplingOptions
from editserver.model.infer.loader import load_checkpoint
from editserver.model.infer.transformer import ContextTooLongError
from tests.hf_models import make_dream

PROMPT = (
    "<|recently_viewed_code_snippets|>\n<|/recently_viewed_code_snippets|>\n\n"
    "<|current_file_content|>\ncurrent_file_path: a.py\n"
    "<|code_to_edit|>\ndef area(w, h):\n    return w<|cursor|> * h\n<|/code_to_edit|>\n"
    "<|/current_file_content|>\n\n<|edit_diff_history|>\n<|/edit_diff_history|>"
)
SUFFIX = "\n\nprint(add(1, 2))\n"
PREFIXES = [
    "def add(a, b):\n    return ",
    "class Point:\n    def __init__(self, x",
    "import os\nx = ",
    "for i in ",
]


def fim(prefix: str, n: int, **kw) -> FimRequest:
    return FimRequest(prefix, SUFFIX, max_tokens=n, options=SamplingOptions(block_size=4, **kw))


def same(a: Completion, b: Completion) -> None:
    assert (a.text, a.finish_reason, a.completion_tokens) == (b.text, b.finish_reason, b.completion_tokens)
    assert a.token_confidences == pytest.approx(b.token_confidences, abs=1e-4)


def staggered(engine: Engine, reqs: list, every: int = 1) -> tuple[dict[int, Completion], list[int]]:
    """Decode ``reqs[0]`` and let the others join one at a time, at every ``every``-th block boundary;
    answers by index, and how many requests were still decoding when each answer came."""
    run = engine.open(engine.plan(reqs[0]))
    got: dict[int, Completion] = {}
    open_at: list[int] = []

    def deliver(i: int):
        def f(c: Completion) -> None:
            got[i] = c
            open_at.append(run.open)

        return f

    run.join(reqs[0], deliver(0))
    waiting, boundary = list(range(1, len(reqs))), [0]

    def admit(r) -> None:
        boundary[0] += 1
        if waiting and boundary[0] % every == 0:
            i = waiting.pop(0)
            r.join(reqs[i], deliver(i))

    run.run(admit)
    assert not waiting, "every request joined before the decode ended"
    return got, open_at


@pytest.fixture(scope="module")
def own(tiny_checkpoint) -> Engine:
    engine = Engine.load(tiny_checkpoint, prefix_cache_mb=0)
    # a first width of 8 makes long canvases grow while requests join (sampler.py, the canvas grows)
    engine.inference = dataclasses.replace(engine.inference, fim_max_tokens=8)
    return engine


@pytest.fixture(scope="module")
def dream(tmp_path_factory) -> Engine:
    d, _ = make_dream(tmp_path_factory.mktemp("dream") / "m")
    engine = Engine(load_checkpoint(d), prefix_cache_mb=0)
    engine.inference = dataclasses.replace(engine.inference, fim_max_tokens=8)
    return engine


def test_a_joined_request_gets_its_answer_alone_own_transformer(own: Engine) -> None:
    reqs = [fim(PREFIXES[0], 40), fim(PREFIXES[1], 24), fim(PREFIXES[2], 30), fim(PREFIXES[3], 7)]
    alone = [own.complete(r) for r in reqs]
    got, _ = staggered(own, reqs)
    for i, a in enumerate(alone):
        same(got[i], a)


def test_a_joined_edit_gets_its_answer_alone(own: Engine) -> None:
    opts = SamplingOptions(block_size=4)
    reqs = [EditRequest(PROMPT, options=opts), EditRequest(PROMPT.replace("* h", "+ h"), options=opts)]
    alone = [own.complete(r) for r in reqs]
    got, _ = staggered(own, reqs)
    for i, a in enumerate(alone):
        same(got[i], a)


def test_a_joined_request_gets_its_answer_alone_in_place_family(dream: Engine) -> None:
    reqs = [fim(PREFIXES[0], 24), fim(PREFIXES[2], 16), fim(PREFIXES[1], 12)]
    alone = [dream.complete(r) for r in reqs]
    got, _ = staggered(dream, reqs)
    for i, a in enumerate(alone):
        same(got[i], a)


def test_a_done_request_leaves_before_the_decode_ends(own: Engine) -> None:
    reqs = [fim(PREFIXES[0], 40), fim(PREFIXES[3], 4)]  # the second is one block long
    got, open_at = staggered(own, reqs)
    assert open_at[0] == 1 and got[1].completion_tokens <= 4  # the short one answered first, one still open
    assert len(got) == 2


def test_a_cancelled_joiner_leaves_and_the_others_keep_their_answers(own: Engine) -> None:
    stop = threading.Event()
    stop.set()  # its client is gone by its first step
    quitter = fim(PREFIXES[1], 24)
    quitter.options.cancel = stop
    reqs = [fim(PREFIXES[0], 40), quitter, fim(PREFIXES[2], 30)]
    alone = [own.complete(reqs[0]), None, own.complete(reqs[2])]
    got, _ = staggered(own, reqs)
    assert got[1].finish_reason == "cancelled"
    same(got[0], alone[0])
    same(got[2], alone[2])


def test_a_join_that_fails_leaves_the_running_rows_intact(own: Engine) -> None:
    reqs = [fim(PREFIXES[0], 40), fim(PREFIXES[2], 30)]
    alone = [own.complete(r) for r in reqs]
    too_long = fim("x = 1\n" * own.context_length, 8)
    run = own.open(own.plan(reqs[0]))
    got: dict[int, Completion] = {}
    run.join(reqs[0], lambda c: got.__setitem__(0, c))
    errors: list[Exception] = []

    def admit(r) -> None:
        if len(errors) == 0:
            with pytest.raises(ContextTooLongError) as e:
                r.join(too_long, lambda c: got.__setitem__(9, c))
            errors.append(e.value)
            r.join(reqs[1], lambda c: got.__setitem__(1, c))  # the decode still takes a good one

    run.run(admit)
    assert errors and 9 not in got
    same(got[0], alone[0])
    same(got[1], alone[1])


def test_a_request_off_the_block_boundaries_is_refused(own: Engine) -> None:
    # blocks of 3 on a first width of 8: alone, the running row's blocks end at 3, 6, 8, 11, ...; a
    # request joining at 3 would cut its blocks at 6, 9, ... instead, so it is refused
    first = FimRequest(PREFIXES[0], SUFFIX, max_tokens=40, options=SamplingOptions(block_size=3))
    alone = own.complete(first)
    run = own.open(own.plan(first))
    got: list[Completion] = []
    run.join(first, got.append)
    refused: list[str] = []

    def admit(r) -> None:
        if not refused:
            with pytest.raises(ValueError, match="block boundaries") as e:
                r.join(dataclasses.replace(first, prefix=PREFIXES[1]), got.append)
            refused.append(str(e.value))

    run.run(admit)
    assert refused and len(got) == 1
    same(got[0], alone)


def test_sampled_decodes_take_no_joiners(own: Engine) -> None:
    sampled = fim(PREFIXES[0], 40, temperature=0.8, seed=3)
    run = own.open(own.plan(sampled))
    assert not run.admits
    run.join(sampled, lambda c: None)
    calls: list[int] = []
    run.run(lambda r: calls.append(1))
    assert calls == []  # the admit hook is never asked
    with pytest.raises(ValueError, match="sampled"):
        run.join(dataclasses.replace(sampled, prefix=PREFIXES[2]), lambda c: None)
