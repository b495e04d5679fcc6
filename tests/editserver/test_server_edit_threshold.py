"""Next edit's threshold per kind over HTTP: a real ``editserver serve`` on loopback whose copied
``config.json`` sets ``in_file_threshold`` 0.0 and ``cross_file_threshold`` 1.0, which no answer of
the random tiny model reaches. The same greedy request clears the threshold as an in-file request
(or one naming no kind, as Inception's clients send it) and not when marked ``"edit_kind":
"cross_file"``; ``serve --edit-threshold`` replaces both; a config with only the joint
``selectivity_threshold`` (written before the kinds) holds both kinds to it.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections import Counter

import httpx
import pytest

from editserver.bench.load import LocalServer
from editserver.model.infer.checkpoint import update_inference_config
from editserver.model.infer.config import InferenceConfig
from editserver.replay.crossfile import commit_points
from editserver.replay.points import Options
from editserver.replay.suggest import HttpSuggester
from tests.editserver.test_server import ZED_PROMPT, sse

MESSAGES = [{"role": "user", "content": ZED_PROMPT}]
VOLATILE = {"latency_ms", "queue_ms", "batch_size"}  # what may differ between two answers to one request


def stable(info: dict) -> dict:
    return {k: v for k, v in info.items() if k not in VOLATILE}


@pytest.fixture(scope="module")
def per_kind(tiny_checkpoint, tmp_path_factory):
    ck = tmp_path_factory.mktemp("kinds") / "ck"
    shutil.copytree(tiny_checkpoint, ck)
    update_inference_config(ck, in_file_threshold=0.0, cross_file_threshold=1.0)
    return ck


@pytest.fixture(scope="module")
def server(per_kind):
    with LocalServer(["--model", str(per_kind)]) as s:
        yield s


def edit(server: LocalServer, **extra) -> dict:
    r = httpx.post(f"{server.url}/v1/edit/completions", json={"messages": MESSAGES, **extra}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_a_cross_file_request_is_held_to_the_cross_file_threshold(server):
    plain, in_file, cross = (
        edit(server),
        edit(server, edit_kind="in_file"),
        edit(server, edit_kind="cross_file"),
    )
    info = plain["editserver"]
    assert not info["unchanged"] and info["score"] < 1.0, "the precondition: a changed answer below 1.0"
    # no kind (Inception's clients) is in-file
    assert (info["threshold"], info["edit_kind"], info["above_threshold"]) == (0.0, "in_file", True)
    assert stable(in_file["editserver"]) == stable(info)
    got = cross["editserver"]
    assert (got["threshold"], got["edit_kind"], got["above_threshold"]) == (1.0, "cross_file", False)
    assert (got["score"], got["suggestion"]) == (info["score"], info["suggestion"])  # the same model work
    assert got["suppressed"] and cross["choices"][0]["message"]["content"].startswith("```\n")
    # a stream reports the same
    body = {"messages": MESSAGES, "edit_kind": "cross_file", "stream": True}
    with httpx.stream("POST", f"{server.url}/v1/edit/completions", json=body, timeout=60) as r:
        events = sse(r)
    last = json.loads(events[-2])["editserver"]
    assert (last["threshold"], last["edit_kind"], last["above_threshold"]) == (1.0, "cross_file", False)


def test_models_list_the_thresholds_and_an_unknown_kind_is_named(server):
    for extra in ({"edit_kind": "cross_file"}, {}):  # logged: each edit request names its kind
        edit(server, **extra)
    card = httpx.get(f"{server.url}/v1/models").json()["data"][0]
    assert card["thresholds"] == {"fim": 0.0, "in_file": 0.0, "cross_file": 1.0}
    r = httpx.post(
        f"{server.url}/v1/edit/completions", json={"messages": MESSAGES, "edit_kind": "other"}, timeout=60
    )
    assert r.status_code == 422 and r.json()["error"]["param"] == "edit_kind"
    log = [json.loads(x) for x in server.log().splitlines() if x.startswith("{")]
    kinds = {
        x.get("edit_kind") for x in log if x.get("path") == "/v1/edit/completions" and x["status"] == 200
    }
    assert kinds == {"in_file", "cross_file"}


def test_the_edit_threshold_flag_replaces_both(per_kind):
    with LocalServer(["--model", str(per_kind), "--edit-threshold", "0.5"]) as s:
        card = httpx.get(f"{s.url}/v1/models").json()["data"][0]
        assert card["thresholds"] == {"fim": 0.0, "in_file": 0.5, "cross_file": 0.5}
        assert edit(s, edit_kind="cross_file")["editserver"]["threshold"] == 0.5
        assert edit(s)["editserver"]["threshold"] == 0.5


def test_a_config_with_only_the_joint_threshold_holds_both_kinds_to_it():
    old = InferenceConfig.from_dict({"selectivity_threshold": 0.79})
    assert (old.edit_threshold(cross_file=False), old.edit_threshold(cross_file=True)) == (0.79, 0.79)
    new = InferenceConfig.from_dict({"selectivity_threshold": 0.79, "cross_file_threshold": 0.5})
    assert (new.edit_threshold(cross_file=False), new.edit_threshold(cross_file=True)) == (0.79, 0.5)


def test_the_replay_over_http_sends_each_points_kind(server):
    """``editserver replay --server-url`` asks as the LSP does, so the server's per-kind decision
    is the one replayed."""
    pytest.importorskip("git")  # the cross-file records live in a module that needs gitpython
    from tests.editserver.test_replay_crossfile import RECORDS

    (point, _) = commit_points(RECORDS[:3], Options(), Counter())
    s = HttpSuggester(server.url)
    try:
        cross, in_file = s.edit([point, dataclasses.replace(point, where="in_file")])
    finally:
        s.close()
    assert cross.error is None and cross.above_threshold is False
    assert s.thresholds == {"cross_file": 1.0, "in_file": 0.0}
