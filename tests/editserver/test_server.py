"""The HTTP API end to end: a real ``editserver serve`` process on loopback, called like editors do.

Plumbing tests use the tiny random-weight checkpoint (gibberish text, real code paths), so they assert
shapes and behaviour, never that the model is smart. The servers run with one torch thread.
"""

from __future__ import annotations

import asyncio
import json
import re
import time

import httpx
import openai
import pytest

from editserver.bench.load import LocalServer
from editserver.protocol.postprocess import trim
from editserver.protocol.prompt import format_edit_response

KEY = "test-key-123"
AUTH = {"Authorization": f"Bearer {KEY}"}

REGION = "def area(width, height):\n    return width * height\n"
# Inception's next-edit layout, written out the way Zed's and Continue's providers produce it.
ZED_PROMPT = (
    "<|recently_viewed_code_snippets|>\n"
    "<|recently_viewed_code_snippet|>\n"
    "code_snippet_file_path: shapes.py\n"
    "class Square:\n    side: float\n"
    "<|/recently_viewed_code_snippet|>\n"
    "<|/recently_viewed_code_snippets|>\n"
    "\n"
    "<|current_file_content|>\n"
    "current_file_path: geometry.py\n"
    "import math\n\n"
    "<|code_to_edit|>\n"
    "def area(width, height):\n    return width<|cursor|> * height\n"
    "<|/code_to_edit|>\n"
    "print(area(2, 3))\n"
    "<|/current_file_content|>\n"
    "\n"
    "<|edit_diff_history|>\n"
    "--- geometry.py\n+++ geometry.py\n@@ -1,2 +1,2 @@\n-def area(w, h):\n+def area(width, height):\n"
    "<|/edit_diff_history|>"
)


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    with LocalServer(["--model", str(tiny_checkpoint), "--max-output-tokens", "64"]) as s:
        yield s


@pytest.fixture(scope="module")
def guarded(tiny_checkpoint):
    """API key, a queue of one and no batching: for auth, 429 and disconnect tests (long canvases)."""
    args = ["--model", str(tiny_checkpoint), "--api-key", KEY, "--max-queue", "1", "--max-batch", "1"]
    with LocalServer(args) as s:
        yield s


def sse(resp: httpx.Response) -> list[str]:
    return [line[len("data: ") :] for line in resp.iter_lines() if line.startswith("data: ")]


def metric(url: str, name: str, headers: dict | None = None) -> float:
    text = httpx.get(f"{url}/metrics", headers=headers).text
    m = re.search(rf"^{re.escape(name)} ([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def wait_for(predicate, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def assert_error(r: httpx.Response, status: int, param: str | None = None) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    if param is not None:
        assert err["param"] == param, err
    return err


# ---- models, health, metrics -------------------------------------------------------------------
def test_models_list_aliases_and_limits(server):
    data = httpx.get(f"{server.url}/v1/models").json()
    assert data["object"] == "list"
    ids = [m["id"] for m in data["data"]]
    assert ids[0] == "editserver" and {"mercury-coder", "mercury-edit", "mercury-edit-2"} <= set(ids)
    for card in data["data"]:
        assert card["context_length"] == 32768
        assert card["max_output_length"] == 64  # the --max-output-tokens cap
        assert {"fim", "next_edit", "streaming", "diffusing"} <= set(card["features"])
    assert httpx.get(f"{server.url}/v1/models/mercury-edit-2").json()["id"] == "mercury-edit-2"
    assert_error(httpx.get(f"{server.url}/v1/models/gpt-4"), 404, "model")
    health = httpx.get(f"{server.url}/health").json()
    assert health["status"] == "ok" and health["queue_depth"] == 0


# ---- FIM ---------------------------------------------------------------------------------------
def test_fim_non_streamed(server):
    body = {
        "model": "mercury-coder",
        "prompt": "def add(a, b):\n    return",
        "suffix": "\n",
        "max_tokens": 12,
    }
    r = httpx.post(f"{server.url}/v1/fim/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["object"] == "text_completion" and d["model"] == "mercury-coder" and d["id"]
    choice = d["choices"][0]
    assert (
        choice["index"] == 0
        and isinstance(choice["text"], str)
        and choice["finish_reason"] in ("stop", "length")
    )
    u = d["usage"]
    assert (
        0 < u["completion_tokens"] <= 12 and u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    )
    assert 0.0 <= d["editserver"]["score"] <= 1.0 and d["editserver"]["steps"] >= 1


def test_fim_continue_body_streamed(server):
    """Continue's Inception provider: stream, its stop list, and "<|endoftext|>" for an empty suffix."""
    body = {
        "model": "mercury-coder-small",
        "prompt": "import os\n\nfor name in os.listdir('.'):\n    ",
        "suffix": "<|endoftext|>",
        "max_tokens": 16,
        "temperature": 0.0,
        "frequency_penalty": 0.0,
        "presence_penalty": 1.5,
        "stop": ["<|endoftext|>", "\n\n", "\n \n"],
        "stream": True,
    }
    with httpx.stream("POST", f"{server.url}/v1/fim/completions", json=body, timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = sse(r)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "text_completion" and c["choices"] for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    streamed = "".join(c["choices"][0]["text"] for c in chunks)
    # the same request unstreamed, with a truly empty suffix, gives the same text and prompt length
    plain = httpx.post(
        f"{server.url}/v1/fim/completions", json={**body, "stream": False, "suffix": ""}, timeout=60
    )
    assert plain.json()["choices"][0]["text"] == streamed
    alt = httpx.post(f"{server.url}/v1/fim/completions", json={**body, "stream": False}, timeout=60).json()
    assert alt["usage"]["prompt_tokens"] == plain.json()["usage"]["prompt_tokens"]
    for stop in body["stop"]:
        assert stop not in streamed


def test_fim_include_usage_and_stop(server):
    base = {"prompt": "class Point:\n    def __init__(self, x, y):\n", "max_tokens": 24}
    # the model's own text (``choices`` carries it after protocol/postprocess.py's rules)
    text = httpx.post(f"{server.url}/v1/fim/completions", json=base, timeout=60).json()["editserver"][
        "suggestion"
    ]
    assert len(text) >= 4
    stop = text[2:4]  # cut at a sequence we know the (deterministic, greedy) model writes
    body = {**base, "stop": [stop], "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{server.url}/v1/fim/completions", json=body, timeout=60) as r:
        events = sse(r)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] > 0
    assert all(c["usage"] is None for c in chunks[:-1])
    assert (
        "".join(c["choices"][0]["text"] for c in chunks[:-1])
        == trim(text[: text.find(stop)], base["prompt"], "").text
    )
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"


def test_fim_diffusing_streams_whole_drafts(server):
    body = {"prompt": "def add(a, b):\n", "max_tokens": 16, "reasoning_effort": "high"}
    final = httpx.post(f"{server.url}/v1/fim/completions", json=body, timeout=60).json()["choices"][0]["text"]
    with httpx.stream(
        "POST",
        f"{server.url}/v1/fim/completions",
        json={**body, "stream": True, "diffusing": True},
        timeout=60,
    ) as r:
        events = sse(r)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert len(chunks) >= 3  # several intermediate drafts, then the final answer
    drafts = [c["choices"][0]["text"] for c in chunks]
    assert drafts[-1] == final and chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    assert len(set(drafts)) > 1  # each event replaces the previous draft, it is not a delta


def test_legacy_completions_with_openai_client(server):
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    c = client.completions.create(
        model="mercury-coder", prompt="def add(a, b):\n    return", suffix="\n", max_tokens=8
    )
    assert c.object == "text_completion" and isinstance(c.choices[0].text, str)
    assert c.usage.completion_tokens <= 8
    stream = client.completions.create(
        model="mercury-coder",
        prompt="def add(a, b):\n    return",
        suffix="\n",
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
    )
    parts = list(stream)
    assert "".join(p.choices[0].text for p in parts if p.choices) == c.choices[0].text
    assert parts[-1].usage.completion_tokens == c.usage.completion_tokens


# ---- next edit ---------------------------------------------------------------------------------
def check_edit_content(content: str, info: dict, finish: str) -> None:
    """The region comes back unchanged unless the model's rewrite is complete, new and confident."""
    assert finish == "stop"  # the answer shown is always complete
    suppressed = (
        info["model_finish_reason"] != "stop"
        or info["unchanged"]
        or not info["above_threshold"]
        or not info["suggestion"].strip()  # an empty rewrite would delete the whole region
    )
    assert info["suppressed"] == suppressed and (info["outcome"] == "shown") != suppressed
    assert content == format_edit_response(REGION if suppressed else info["suggestion"])
    assert content.startswith("```\n") and content.endswith("\n```")  # what Zed strips


def test_edit_zed_exact_body(server):
    body = {"model": "mercury-coder", "messages": [{"role": "user", "content": ZED_PROMPT}], "stream": False}
    r = httpx.post(f"{server.url}/v1/edit/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["object"] == "edit.completion" and d["model"] == "mercury-coder"
    choice = d["choices"][0]
    assert choice["message"]["role"] == "assistant"
    info = d["editserver"]
    assert 0.0 <= info["score"] <= 1.0 and isinstance(info["above_threshold"], bool)
    check_edit_content(choice["message"]["content"], info, choice["finish_reason"])
    assert d["usage"]["total_tokens"] == d["usage"]["prompt_tokens"] + d["usage"]["completion_tokens"]


def test_edit_continue_exact_body_streams(server):
    body = {
        "model": "mercury-edit-2",
        "messages": [{"role": "user", "content": ZED_PROMPT}],
        "temperature": 0.0,
        "presence_penalty": 1.5,
        "stop": ["<|endoftext|>"],
        "stream": True,
    }
    with httpx.stream("POST", f"{server.url}/v1/edit/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        events = sse(r)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)  # what Continue does
    last = chunks[-1]
    check_edit_content(content, last["editserver"], last["choices"][0]["finish_reason"])
    unstreamed = httpx.post(
        f"{server.url}/v1/edit/completions", json={**body, "stream": False}, timeout=60
    ).json()
    assert unstreamed["choices"][0]["message"]["content"] == content


def test_edit_diffusing_stream(server):
    body = {"messages": [{"role": "user", "content": ZED_PROMPT}], "stream": True, "diffusing": True}
    with httpx.stream("POST", f"{server.url}/v1/edit/completions", json=body, timeout=60) as r:
        events = sse(r)
    chunks = [json.loads(e) for e in events[:-1]]
    assert events[-1] == "[DONE]" and len(chunks) >= 2
    assert all(c["choices"][0]["delta"]["content"].startswith("```\n") for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] is not None


@pytest.mark.parametrize(
    ("prompt", "needle"),
    [
        (ZED_PROMPT.replace("<|code_to_edit|>", "").replace("<|/code_to_edit|>", ""), "<|code_to_edit|>"),
        (ZED_PROMPT.replace("return width", "return <|cursor|>width"), "<|cursor|>"),
        ("", "empty"),
    ],
    ids=["no-region", "two-cursors", "empty"],
)
def test_edit_malformed_prompt_is_400(server, prompt, needle):
    body = {"model": "mercury-coder", "messages": [{"role": "user", "content": prompt}]}
    err = assert_error(httpx.post(f"{server.url}/v1/edit/completions", json=body), 400, "messages")
    assert needle in err["message"] and err["code"] == "invalid_prompt"


def test_edit_region_that_spells_the_cursor_names_it(server):
    """Code whose own text spells ``<|cursor|>`` is served when ``cursor_index`` says which tag is the
    cursor (here the second: the first is the file's string); an index naming no tag is a clear 400."""
    prompt = ZED_PROMPT.replace("def area(width, height):", "def area(width, height):  # '<|cursor|>'")
    body = {"model": "mercury-coder", "messages": [{"role": "user", "content": prompt}], "cursor_index": 1}
    r = httpx.post(f"{server.url}/v1/edit/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    info = r.json()["editserver"]
    if info["suppressed"]:  # the region as sent comes back: the file's spelling is still there
        assert "# '<|cursor|>'" in r.json()["choices"][0]["message"]["content"]
    err = assert_error(
        httpx.post(f"{server.url}/v1/edit/completions", json={**body, "cursor_index": 2}), 400, "messages"
    )
    assert "cursor_index 2 names no <|cursor|> tag: the region holds 2" in err["message"]
    bad = httpx.post(f"{server.url}/v1/edit/completions", json={**body, "cursor_index": -1})
    assert_error(bad, 422, "cursor_index")  # a field out of range is named, as every field is


# ---- errors ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/fim/completions", {"prompt": "x", "temperature": 3}, "temperature"),
        ("/v1/fim/completions", {"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ("/v1/fim/completions", {"suffix": "x"}, "prompt"),
        ("/v1/fim/completions", {"prompt": "x", "max_tokens": 0}, "max_tokens"),
        ("/v1/fim/completions", {"prompt": "x", "reasoning_effort": "extreme"}, "reasoning_effort"),
        ("/v1/completions", {"prompt": "x", "n": 2}, "n"),
        ("/v1/completions", {"prompt": "x", "stream": "yes"}, "stream"),
        ("/v1/edit/completions", {"messages": []}, "messages"),
        ("/v1/edit/completions", {"messages": [{"content": "x"}]}, "messages.0.role"),
    ],
)
def test_invalid_fields_are_named(server, path, body, param):
    err = assert_error(httpx.post(f"{server.url}{path}", json=body), 422, param)
    assert param in err["message"]


def test_bad_json_unknown_route_and_recovery(server):
    r = httpx.post(
        f"{server.url}/v1/fim/completions",
        content=b'{"prompt": ',
        headers={"content-type": "application/json"},
    )
    assert assert_error(r, 400)["code"] == "invalid_json"
    assert_error(httpx.get(f"{server.url}/v1/nothing"), 404)
    ok = httpx.post(f"{server.url}/v1/fim/completions", json={"prompt": "x", "max_tokens": 2}, timeout=60)
    assert ok.status_code == 200


@pytest.mark.parametrize("stream", [False, True])
def test_context_overflow_is_400(server, stream):
    big = "value = compute(value) + 1\n" * 12000  # far beyond 32,768 tokens
    r = httpx.post(f"{server.url}/v1/fim/completions", json={"prompt": big, "stream": stream}, timeout=60)
    assert assert_error(r, 400, "prompt")["code"] == "context_length_exceeded"
    content = ZED_PROMPT.replace("import math\n", big)
    r = httpx.post(
        f"{server.url}/v1/edit/completions",
        json={"messages": [{"role": "user", "content": content}]},
        timeout=60,
    )
    assert assert_error(r, 400, "messages")["code"] == "context_length_exceeded"


# ---- auth, queue, disconnects ------------------------------------------------------------------
def test_auth(guarded):
    body = {"prompt": "x", "max_tokens": 2}
    url = f"{guarded.url}/v1/fim/completions"
    assert assert_error(httpx.post(url, json=body), 401)["code"] == "invalid_api_key"
    assert_error(httpx.post(url, json=body, headers={"Authorization": "Bearer wrong"}), 401)
    assert_error(httpx.post(url, json=body, headers={"Authorization": KEY}), 401)  # no scheme
    assert_error(httpx.get(f"{guarded.url}/v1/models"), 401)
    assert httpx.post(url, json=body, headers=AUTH, timeout=60).status_code == 200
    assert httpx.get(f"{guarded.url}/health").status_code == 200  # liveness needs no key


def running(url: str) -> int:
    return httpx.get(f"{url}/health").json()["running"]


def _long_edit() -> dict:
    """A request that decodes for seconds on the tiny model: a rewrite of a 300-line region, one
    token per step at ``high`` (a runaway FIM answer ends as soon as the trimming cuts it)."""
    from editserver.protocol.prompt import EditPrompt, build_prompt

    region = "".join(f"value_{i} = compute({i})\n" for i in range(300))
    prompt = build_prompt(EditPrompt("m.py", "", region, 0, ""))
    return {"messages": [{"role": "user", "content": prompt}], "max_tokens": 1024, "reasoning_effort": "high"}


LONG = "/v1/edit/completions"


def test_stream_disconnect_stops_denoising(guarded):
    cancelled = 'editserver_cancelled_total{stage="running"}'
    before = metric(guarded.url, cancelled)
    steps_before = metric(guarded.url, 'editserver_denoise_steps_total{kind="edit"}')
    body = {**_long_edit(), "stream": True, "diffusing": True}
    with httpx.Client(base_url=guarded.url, headers=AUTH, timeout=60) as c:
        with c.stream("POST", LONG, json=body) as r:
            assert r.status_code == 200
            next(line for line in r.iter_lines() if line.startswith("data: "))  # denoising is under way
    assert wait_for(lambda: metric(guarded.url, cancelled) == before + 1), guarded.log()[-2000:]
    steps = metric(guarded.url, 'editserver_denoise_steps_total{kind="edit"}') - steps_before
    assert 0 < steps < 1024  # the loop stopped early instead of running all 1024 steps
    r = httpx.post(
        f"{guarded.url}/v1/fim/completions", json={"prompt": "x", "max_tokens": 2}, headers=AUTH, timeout=60
    )
    assert r.status_code == 200


def test_disconnect_while_waiting_for_json(guarded):
    cancelled = 'editserver_cancelled_total{stage="running"}'
    before = metric(guarded.url, cancelled)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{guarded.url}{LONG}",
            json=_long_edit(),
            headers=AUTH,
            timeout=httpx.Timeout(60, read=1.5),
        )
    assert wait_for(lambda: metric(guarded.url, cancelled) == before + 1), guarded.log()[-2000:]
    assert wait_for(lambda: running(guarded.url) == 0)


async def test_queue_full_is_429(guarded):
    async with httpx.AsyncClient(base_url=guarded.url, headers=AUTH, timeout=120) as c:
        long = asyncio.create_task(c.post(LONG, json=_long_edit()))
        assert await asyncio.to_thread(wait_for, lambda: running(guarded.url) == 1)
        queued = asyncio.create_task(c.post("/v1/fim/completions", json={"prompt": "x", "max_tokens": 2}))
        assert await asyncio.to_thread(
            wait_for, lambda: httpx.get(f"{guarded.url}/health").json()["queue_depth"] == 1
        )
        r = await c.post("/v1/fim/completions", json={"prompt": "x", "max_tokens": 2})
        assert assert_error(r, 429)["code"] == "queue_full" and r.headers["retry-after"]
        long.cancel()  # closes the connection: the server cancels the long job
        assert (await queued).status_code == 200
        with pytest.raises(asyncio.CancelledError):
            await long


async def test_disconnect_while_queued_drops_the_job(guarded):
    queued_cancel = 'editserver_cancelled_total{stage="queued"}'
    before = metric(guarded.url, queued_cancel)
    async with httpx.AsyncClient(base_url=guarded.url, headers=AUTH, timeout=120) as c:
        long = asyncio.create_task(c.post(LONG, json=_long_edit()))
        assert await asyncio.to_thread(wait_for, lambda: running(guarded.url) == 1)
        with pytest.raises(httpx.ReadTimeout):  # gives up while its request waits in the queue
            await c.post(
                "/v1/fim/completions",
                json={"prompt": "x", "max_tokens": 2},
                timeout=httpx.Timeout(60, read=1.0),
            )
        long.cancel()
        with pytest.raises(asyncio.CancelledError):
            await long
    assert await asyncio.to_thread(wait_for, lambda: metric(guarded.url, queued_cancel) == before + 1)
    assert await asyncio.to_thread(wait_for, lambda: running(guarded.url) == 0)


# ---- observability -----------------------------------------------------------------------------
def test_metrics_and_structured_log(server):
    httpx.post(f"{server.url}/v1/fim/completions", json={"prompt": "log me", "max_tokens": 3}, timeout=60)
    text = httpx.get(f"{server.url}/metrics").text
    for name in (
        "editserver_requests_total",
        "editserver_request_latency_seconds_bucket",
        "editserver_tokens_per_step_bucket",
        "editserver_queue_depth",
        "editserver_batch_size_bucket",
    ):
        assert name in text
    lines = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    reqs = [x for x in lines if x.get("event") == "request" and x["path"] == "/v1/fim/completions"]
    assert reqs and all({"ts", "status", "latency_ms", "method"} <= set(x) for x in reqs)
    ok = [x for x in reqs if x["status"] == 200]
    assert ok and all({"completion_tokens", "prompt_tokens", "steps", "queue_ms"} <= set(x) for x in ok)
