"""The FIM threshold over HTTP: two real ``editserver serve`` processes on loopback, one showing every
answer (the tiny checkpoint as saved, ``fim_threshold`` 0.0) and one whose copied ``config.json``
sets ``fim_threshold`` 1.0, which no answer of the random tiny model reaches. The same greedy request
to both must give the model's text on one and "" on the other, non-streamed and streamed alike.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest

from editserver.bench.load import LocalServer
from editserver.model.infer.checkpoint import update_inference_config
from editserver.protocol.postprocess import trim
from tests.editserver.test_server import ZED_PROMPT, sse

BODY = {"model": "mercury-coder", "prompt": "class Point:\n    def __init__(self, x, y):\n", "max_tokens": 16}
# what may differ between two answers to the same request: timing and ids
VOLATILE = {"latency_ms", "queue_ms", "batch_size"}


@pytest.fixture(scope="module")
def shown(tiny_checkpoint):
    with LocalServer(["--model", str(tiny_checkpoint)]) as s:
        yield s


@pytest.fixture(scope="module")
def strict(tiny_checkpoint, tmp_path_factory):
    ck = tmp_path_factory.mktemp("strict") / "ck"
    shutil.copytree(tiny_checkpoint, ck)
    update_inference_config(ck, fim_threshold=1.0)
    with LocalServer(["--model", str(ck)]) as s:
        yield s


def fim(server: LocalServer, route: str = "/v1/fim/completions", **extra) -> dict:
    r = httpx.post(f"{server.url}{route}", json={**BODY, **extra}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def stream(server: LocalServer, **extra) -> list[dict]:
    body = {**BODY, "stream": True, **extra}
    with httpx.stream("POST", f"{server.url}/v1/fim/completions", json=body, timeout=60) as r:
        assert r.status_code == 200, r.read()
        events = sse(r)
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def stable(info: dict) -> dict:
    return {k: v for k, v in info.items() if k not in VOLATILE}


@pytest.mark.parametrize("route", ["/v1/fim/completions", "/v1/completions"])
def test_below_the_threshold_is_answered_empty_with_the_model_text_aside(shown, strict, route):
    a, b = fim(shown, route), fim(strict, route)
    text, info = a["choices"][0]["text"], a["editserver"]
    assert text.strip() and info["score"] < 1.0, "the precondition: a non-blank answer below 1.0"
    assert info["outcome"] == "shown" and info["suppressed"] is False and info["above_threshold"] is True
    # shown text = the model's text after the shared post-processing (protocol/postprocess.py)
    assert info["threshold"] == 0.0 and info["postprocess"]["model_text"] == info["suggestion"]
    assert text == trim(info["suggestion"], BODY["prompt"], "").text
    trimmed = bool(info["postprocess"]["trimmed"])
    assert a["choices"][0]["finish_reason"] == ("stop" if trimmed else info["model_finish_reason"])
    assert b["choices"][0] == {"index": 0, "text": "", "finish_reason": "stop", "logprobs": None}
    got = b["editserver"]
    assert (got["outcome"], got["suppressed"], got["above_threshold"], got["threshold"]) == (
        "below_threshold",
        True,
        False,
        1.0,
    )
    # the same model work, reported the same way: the score, the model's text and finish, the usage
    assert (got["score"], got["suggestion"], got["model_finish_reason"]) == (
        info["score"],
        info["suggestion"],
        info["model_finish_reason"],
    )
    assert b["usage"] == a["usage"]
    # withheld before the rules ran: nothing trimmed, and model_text is still the model's own text
    assert got["postprocess"] == {"trimmed": [], "model_text": got["suggestion"]}


@pytest.mark.parametrize("server_name", ["shown", "strict"])
def test_streams_agree_with_the_json_answer(server_name, request):
    server = request.getfixturevalue(server_name)
    plain = fim(server)
    want, outcome = plain["choices"][0]["text"], plain["editserver"]["outcome"]
    chunks = stream(server, stream_options={"include_usage": True})
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == plain["usage"]
    answer = chunks[:-1]
    assert "".join(c["choices"][0]["text"] for c in answer) == want
    assert answer[-1]["choices"][0]["finish_reason"] == plain["choices"][0]["finish_reason"]
    assert stable(answer[-1]["editserver"]) == stable(plain["editserver"])
    diffusing = stream(server, diffusing=True)
    assert len(diffusing) >= 2  # drafts, then the final answer replacing them
    last = diffusing[-1]
    assert last["choices"][0]["text"] == want and last["editserver"]["outcome"] == outcome
    assert last["choices"][0]["finish_reason"] == plain["choices"][0]["finish_reason"]
    assert outcome == ("shown" if server_name == "shown" else "below_threshold")


def test_openai_client_gets_an_empty_completion(strict):
    client = openai.OpenAI(base_url=f"{strict.url}/v1", api_key="unused", max_retries=0)
    c = client.completions.create(model="mercury-coder", prompt=BODY["prompt"], max_tokens=16)
    assert c.choices[0].text == "" and c.choices[0].finish_reason == "stop"
    parts = list(
        client.completions.create(model="mercury-coder", prompt=BODY["prompt"], max_tokens=16, stream=True)
    )
    assert "".join(p.choices[0].text for p in parts if p.choices) == ""


def test_a_blank_answer_is_empty_whatever_the_threshold(shown):
    text = fim(shown)["editserver"]["suggestion"]  # the model's own text, before post-processing
    d = fim(shown, stop=[text[0]])  # the answer is cut before its first character
    assert d["choices"][0]["text"] == "" and d["choices"][0]["finish_reason"] == "stop"
    info = d["editserver"]
    assert (info["outcome"], info["suppressed"], info["above_threshold"], info["suggestion"]) == (
        "empty",
        True,
        False,
        "",
    )


def test_next_edit_ignores_the_fim_threshold(shown, strict):
    body = {"messages": [{"role": "user", "content": ZED_PROMPT}]}
    a, b = (httpx.post(f"{s.url}/v1/edit/completions", json=body, timeout=60).json() for s in (shown, strict))
    assert a["choices"] == b["choices"] and stable(a["editserver"]) == stable(b["editserver"])
    assert a["editserver"]["threshold"] == 0.0  # the selectivity threshold, not the FIM one


def test_outcomes_are_counted_and_logged(strict):
    fim(strict)
    text = httpx.get(f"{strict.url}/metrics").text
    m = re.search(r'^editserver_fim_outcomes_total\{outcome="below_threshold"\} ([0-9.e+]+)$', text, re.M)
    assert m and float(m.group(1)) >= 1
    lines = [json.loads(x) for x in strict.log().splitlines() if x.startswith("{")]
    fims = [x for x in lines if x.get("event") == "request" and x.get("path") == "/v1/fim/completions"]
    assert fims and all(x["outcome"] == "below_threshold" for x in fims if x["status"] == 200)


def test_replay_over_http_reads_the_model_text_of_a_suppressed_completion(shown, strict):
    from editserver.replay.points import FimPoint
    from editserver.replay.suggest import FIM_MAX_TOKENS, HttpSuggester

    point = FimPoint("p", "acme/x", "0" * 40, "x.py", "python", "start", BODY["prompt"], "", "pass")
    model_text = fim(shown, max_tokens=FIM_MAX_TOKENS, stop=["\n"])["editserver"]["suggestion"]
    assert model_text.strip(), "the precondition: the model writes something on that line"
    s = HttpSuggester(strict.url)
    try:
        (ans,) = s.fim([point])
    finally:
        s.close()
    # the server sent "", but the replay judges (and sweeps) what the model wrote
    assert ans.error is None and ans.text == model_text and ans.above_threshold is False
    assert s.fim_threshold == 1.0 and 0.0 <= ans.score < 1.0


def test_serve_flags_override_the_checkpoint_thresholds(shown, strict):
    """``--fim-threshold 0`` on the strict checkpoint shows what the plain one shows; the edit
    threshold flag reaches the next-edit answers; the checkpoint's config.json is left alone."""
    strict_ck = Path(strict.args[strict.args.index("--model") + 1])
    saved = (strict_ck / "config.json").read_text()
    with LocalServer(["--model", str(strict_ck), "--fim-threshold", "0", "--edit-threshold", "1"]) as s:
        a, b = fim(shown), fim(s)
        assert b["choices"][0] == a["choices"][0] and stable(b["editserver"]) == stable(a["editserver"])
        body = {"messages": [{"role": "user", "content": ZED_PROMPT}]}
        edit = httpx.post(f"{s.url}/v1/edit/completions", json=body, timeout=60).json()
        assert edit["editserver"]["threshold"] == 1.0 and edit["editserver"]["above_threshold"] is False
    assert (strict_ck / "config.json").read_text() == saved


@pytest.mark.parametrize("value", ["1.5", "-0.1", "nan"])
def test_serve_refuses_a_threshold_outside_0_1(tiny_checkpoint, value):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "editserver.cli",
            "serve",
            "--model",
            str(tiny_checkpoint),
            "--fim-threshold",
            value,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "fim_threshold must be between 0 and 1" in r.stderr
