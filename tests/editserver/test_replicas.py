"""Replicas: readiness and drain of one ``editserver serve``, and two of them behind a real nginx
(deploy/nginx.conf) on loopback losing no request while one restarts.

Every process is real: ``editserver serve`` subprocesses with one torch thread each, nginx started
from the shipped config with only its ports changed. Latencies are printed, never asserted.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from editserver.bench.load import free_port

ROOT = Path(__file__).resolve().parents[2]
FIM = {"prompt": "def add(a, b):\n    return", "suffix": "\n", "max_tokens": 8}
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

needs_nginx = pytest.mark.skipif(
    shutil.which("nginx") is None, reason="nginx is not installed (.ci/run installs it with apt-get)"
)


class Serve:
    """``editserver serve`` on a fixed loopback port (a restart keeps the address)."""

    def __init__(self, model: Path, port: int, replica_id: str, log: Path, *extra: str):
        self.model, self.port, self.replica_id, self.log_path = model, port, replica_id, log
        self.extra = extra
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> Serve:
        cmd = [sys.executable, "-m", "editserver.cli", "serve", "--port", str(self.port), "--threads", "1"]
        cmd += ["--model", str(self.model), "--replica-id", self.replica_id, *self.extra]
        log = self.log_path.open("a")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=ENV)
        return self

    def health(self) -> httpx.Response | None:
        try:
            return httpx.get(f"{self.url}/health", timeout=2.0)
        except httpx.HTTPError:
            return None

    def wait_ready(self, timeout: float = 120.0) -> list[int]:
        """Poll /health until 200; the statuses seen on the way (the first 503's body in ``loading``)."""
        seen: list[int] = []
        self.loading: dict | None = None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None and self.proc.poll() is None, self.log_path.read_text()[-3000:]
            r = self.health()
            if r is not None:
                seen.append(r.status_code)
                if r.status_code == 503 and self.loading is None:
                    self.loading = r.json()
                if r.status_code == 200:
                    return seen
            time.sleep(0.01)
        raise AssertionError(f"not ready in {timeout}s: {self.log_path.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_nginx(tmp: Path, listen: int, upstreams: list[int]) -> subprocess.Popen:
    """nginx with deploy/nginx.conf, its example ports replaced by these."""
    conf = (ROOT / "deploy" / "nginx.conf").read_text()
    conf = conf.replace("listen 127.0.0.1:8080", f"listen 127.0.0.1:{listen}")
    for example, port in zip(("127.0.0.1:8001", "127.0.0.1:8002"), upstreams):
        assert example in conf
        conf = conf.replace(example, f"127.0.0.1:{port}")
    prefix = tmp / "nginx"
    prefix.mkdir()
    (prefix / "nginx.conf").write_text(conf)
    cmd = ["nginx", "-p", f"{prefix}/", "-c", str(prefix / "nginx.conf"), "-e", "stderr", "-g", "daemon off;"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=(prefix / "stderr.log").open("w"))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert proc.poll() is None, (prefix / "stderr.log").read_text()
        try:
            httpx.get(f"http://127.0.0.1:{listen}/health", timeout=2.0)
            return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    raise AssertionError("nginx did not start")


async def load(url: str, clients: int, duration: float) -> dict:
    """``clients`` loops sending FIM completions for ``duration`` seconds: every answer's status
    (or error) and latency, and which replica answered."""
    results: list[tuple[str, float, str]] = []
    end = time.monotonic() + duration

    async def client(http: httpx.AsyncClient) -> None:
        while time.monotonic() < end:
            t0 = time.perf_counter()
            try:
                r = await http.post("/v1/fim/completions", json=FIM)
                ok = r.status_code == 200 and r.json()["choices"][0]["finish_reason"] is not None
                outcome = "ok" if ok else f"{r.status_code}: {r.text[:200]}"
                who = r.headers.get("x-editserver-replica", "?")
            except httpx.HTTPError as exc:
                outcome, who = f"{type(exc).__name__}: {exc}", "?"
            results.append((outcome, time.perf_counter() - t0, who))

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=60.0, limits=limits) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    lat = sorted(t for o, t, _ in results if o == "ok")
    errors = [o for o, _, _ in results if o != "ok"]

    def pct(q: float) -> float:
        return round(1000 * lat[min(len(lat) - 1, int(q * len(lat)))], 1) if lat else float("nan")

    by = {w: sum(1 for _, _, x in results if x == w) for w in {x for _, _, x in results}}
    return {"requests": len(results), "errors": len(errors), "p50_ms": pct(0.5), "p95_ms": pct(0.95),
            "first_errors": errors[:3], "by_replica": by}  # fmt: skip


@pytest.fixture(scope="module")
def small_checkpoint(tmp_path_factory) -> Path:
    """A random ``small``-preset checkpoint: it loads slowly enough (~0.5 s) to see the loading phase."""
    import torch

    from editserver.model.infer.checkpoint import save_checkpoint
    from editserver.model.infer.config import PRESETS, ModelConfig
    from editserver.model.infer.tokenizer import train_tokenizer
    from editserver.model.infer.transformer import Transformer
    from tests.conftest import CORPUS

    torch.manual_seed(0)
    tok = train_tokenizer(CORPUS, vocab_size=400)
    cfg = ModelConfig.from_dict({**PRESETS["small"].to_dict(), "vocab_size": tok.vocab_size})
    d = tmp_path_factory.mktemp("small-ckpt")
    save_checkpoint(d, Transformer(cfg), tok)
    return d


def test_health_is_503_while_loading_and_while_draining(small_checkpoint, tmp_path) -> None:
    s = Serve(small_checkpoint, free_port(), "r1", tmp_path / "serve.log", "--drain-timeout", "120").start()
    try:
        seen = s.wait_ready()
        assert seen[0] == 503 and seen[-1] == 200, seen  # the port answered before the model was loaded
        assert s.loading["status"] == "loading" and s.loading["error"]["code"] == "model_loading"
        health = s.health().json()
        assert health["status"] == "ok" and health["meta"]["replica"] == "r1"
        metrics = httpx.get(f"{s.url}/metrics").text
        assert 'editserver_replica_info{replica="r1"} 1.0' in metrics and "editserver_ready 1.0" in metrics
        # a long request in flight, then SIGTERM: it finishes; /health and new requests get 503
        long: dict = {}
        body = {"prompt": "def f(x):\n", "suffix": "", "max_tokens": 192}  # seconds on one busy core

        def slow() -> None:
            long["r"] = httpx.post(f"{s.url}/v1/fim/completions", json=body, timeout=120)

        t = threading.Thread(target=slow)
        t.start()
        deadline = time.monotonic() + 30
        while "editserver_running_requests 1.0" not in httpx.get(f"{s.url}/metrics").text:
            assert time.monotonic() < deadline and t.is_alive(), "the long request never ran"
            time.sleep(0.02)
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        h = s.health()
        assert h is not None and h.status_code == 503 and h.json()["status"] == "draining", h and h.text
        new = httpx.post(f"{s.url}/v1/fim/completions", json=FIM, timeout=10)
        assert new.status_code == 503 and new.json()["error"]["code"] == "draining"
        assert set(new.json()["error"]) == {"message", "type", "param", "code"}
        t.join(150)
        assert long["r"].status_code == 200, long["r"].text  # the in-flight request finished
        assert s.proc.wait(30) == 0
    finally:
        s.stop()
    # a fresh process: a completion sent while it loads is a 503 with an OpenAI-style error
    s = Serve(small_checkpoint, free_port(), "r2", tmp_path / "serve2.log").start()
    try:
        deadline = time.monotonic() + 120
        got = None
        while got is None and time.monotonic() < deadline:
            try:
                r = httpx.post(f"{s.url}/v1/fim/completions", json=FIM, timeout=60)
                got = r
            except httpx.HTTPError:
                time.sleep(0.01)
        assert got is not None and got.status_code == 503, got and got.text
        assert got.json()["error"]["code"] == "model_loading" and got.headers["retry-after"] == "1"
        assert set(got.json()["error"]) == {"message", "type", "param", "code"}
        s.wait_ready()  # and then it serves
        assert httpx.post(f"{s.url}/v1/fim/completions", json=FIM, timeout=60).status_code == 200
    finally:
        s.stop()


def test_a_model_that_fails_to_load_exits_2_with_one_line(tmp_path) -> None:
    """The port is open while loading; a checkpoint that cannot load still ends the process (2)."""
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    r = subprocess.run(
        [sys.executable, "-m", "editserver.cli", "serve", "--port", str(free_port()), "--model", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
    )
    assert r.returncode == 2, r.stderr[-2000:]
    lines = [x for x in r.stderr.splitlines() if "cannot load the model" in x]
    assert len(lines) == 1 and "Traceback" not in r.stderr


def _replicas_under_restart(tiny_checkpoint: Path, tmp_path: Path, duration: float) -> None:
    a = Serve(tiny_checkpoint, free_port(), "a", tmp_path / "a.log").start()
    b = Serve(tiny_checkpoint, free_port(), "b", tmp_path / "b.log").start()
    nginx = None
    try:
        a.wait_ready()
        b.wait_ready()
        single = asyncio.run(load(a.url, 16, duration))
        listen = free_port()
        nginx = start_nginx(tmp_path, listen, [a.port, b.port])
        restarted: dict = {}

        def restart_b() -> None:
            time.sleep(duration * 0.3)
            b.proc.send_signal(signal.SIGTERM)
            h = b.health()
            restarted["drain_health"] = None if h is None else h.status_code
            restarted["exit"] = b.proc.wait(60)
            b.start()
            restarted["health_seen"] = b.wait_ready()

        t = threading.Thread(target=restart_b)
        t.start()
        behind = asyncio.run(load(f"http://127.0.0.1:{listen}", 16, duration))
        t.join(120)
        print(f"\nsingle replica, 16 clients, {duration:.0f} s: {single}")
        print(f"two replicas behind nginx, one restarted mid-run: {behind}; restart: {restarted}")
        assert single["errors"] == 0, single
        assert behind["errors"] == 0, behind
        assert restarted["exit"] == 0 and restarted["health_seen"][-1] == 200
        assert behind["by_replica"].get("a") and behind["by_replica"].get("b"), behind
    finally:
        if nginx is not None:
            nginx.send_signal(signal.SIGQUIT)
            nginx.wait(20)
        a.stop()
        b.stop()


@needs_nginx
def test_two_replicas_behind_nginx_lose_no_request_while_one_restarts(tiny_checkpoint, tmp_path) -> None:
    _replicas_under_restart(tiny_checkpoint, tmp_path, 10.0)


@needs_nginx
@pytest.mark.slow
def test_two_replicas_behind_nginx_under_30_seconds_of_load(tiny_checkpoint, tmp_path) -> None:
    _replicas_under_restart(tiny_checkpoint, tmp_path, 30.0)
