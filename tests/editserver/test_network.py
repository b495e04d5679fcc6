"""Network defaults: no open port without a key, bounded bodies, CORS only for named origins.

Every test starts a real ``editserver serve`` (or runs the command to its refusal) on loopback; a
non-loopback bind is only ever refused here, never opened.
"""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from editserver.bench.load import LocalServer
from editserver.server.settings import Settings, is_loopback

KEY = "net-key-456"
AUTH = {"Authorization": f"Bearer {KEY}"}
ORIGIN = "http://localhost:3000"
LIMIT = 4096


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    args = ["--model", str(tiny_checkpoint), "--api-key", KEY, "--max-output-tokens", "8"]
    args += ["--max-body-bytes", str(LIMIT), "--allow-origin", ORIGIN]
    with LocalServer(args) as s:
        yield s


def serve(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "editserver.cli", "serve", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "my-laptop.local"])
def test_non_loopback_without_a_key_refuses_to_start(host, tiny_checkpoint):
    r = serve("--host", host, "--model", str(tiny_checkpoint), "--port", "9")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "--api-key" in lines[0] and "--insecure-no-auth" in lines[0] and host in lines[0]


def test_the_refusal_has_two_named_ways_out():
    for host in ("127.0.0.1", "127.0.0.9", "localhost", "::1", "[::1]"):
        assert is_loopback(host), host
        Settings(host=host)  # loopback needs nothing
    for host in ("0.0.0.0", "::", "10.0.0.1", "example.com", ""):
        assert not is_loopback(host), host
        with pytest.raises(ValueError, match="without --api-key"):
            Settings(host=host)
        Settings(host=host, api_key="k")
        Settings(host=host, insecure_no_auth=True)


def assert_error(r: httpx.Response, status: int, code: str | None = None) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"], err
    if code is not None:
        assert err["code"] == code, err
    return err


def test_a_body_over_the_limit_is_413_declared_or_chunked(server):
    url = f"{server.url}/v1/fim/completions"
    big = {"prompt": "x" * (LIMIT + 10), "max_tokens": 2}
    err = assert_error(httpx.post(url, json=big, headers=AUTH, timeout=60), 413, "request_too_large")
    assert str(LIMIT) in err["message"] and "--max-body-bytes" in err["message"]

    def chunks():  # no Content-Length: the server counts what it reads and stops at the limit
        yield b'{"prompt": "'
        for _ in range(LIMIT // 512 + 2):
            yield b"y" * 512
        yield b'", "max_tokens": 2}'

    r = httpx.post(url, content=chunks(), headers={**AUTH, "Content-Type": "application/json"}, timeout=60)
    assert_error(r, 413, "request_too_large")
    # the limit is not a key check: without a key, a small body is 401 and a big one 413
    assert_error(httpx.post(url, json=big, timeout=60), 413)
    # and the server goes on answering bodies under the limit
    ok = httpx.post(url, json={"prompt": "def f(", "max_tokens": 2}, headers=AUTH, timeout=60)
    assert ok.status_code == 200, ok.text
    assert '"status": 413' in server.log()  # logged like any request


def test_cors_only_for_the_named_origin(server, tiny_checkpoint):
    pre = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type",
    }
    r = httpx.options(f"{server.url}/v1/fim/completions", headers={"Origin": ORIGIN, **pre})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == ORIGIN
    assert "authorization" in r.headers["access-control-allow-headers"].lower()
    r = httpx.get(f"{server.url}/v1/models", headers={"Origin": ORIGIN, **AUTH})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == ORIGIN
    other = httpx.get(f"{server.url}/v1/models", headers={"Origin": "https://evil.example", **AUTH})
    assert "access-control-allow-origin" not in other.headers
    r = httpx.options(f"{server.url}/v1/fim/completions", headers={"Origin": "https://evil.example", **pre})
    assert "access-control-allow-origin" not in r.headers
    # by default no origin at all
    with LocalServer(["--model", str(tiny_checkpoint)]) as plain:
        r = httpx.get(f"{plain.url}/v1/models", headers={"Origin": ORIGIN})
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
        r = httpx.options(f"{plain.url}/v1/fim/completions", headers={"Origin": ORIGIN, **pre})
        assert "access-control-allow-origin" not in r.headers
        assert_error(r, 405)


def test_a_wrong_key_of_any_length_is_401(server):
    for key in ("n", KEY[:-1], KEY + "x", "é" * 40):
        hdr = {"Authorization": f"Bearer {key}".encode()}
        r = httpx.post(f"{server.url}/v1/fim/completions", json={"prompt": "a"}, headers=hdr, timeout=60)
        assert_error(r, 401, "invalid_api_key")
