"""A short bounded load test in the default tier: 16 concurrent clients for a few seconds on loopback.

The full 16 x 30 s run is ``editserver bench load`` (its figures are in docs/api.md); this one checks the
properties that must hold at any size: no errors, no lost requests, every request answered once.
"""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest

from editserver.bench.load import LocalServer, run_load


async def test_sixteen_clients_no_errors_no_losses(tiny_checkpoint):
    with LocalServer(["--model", str(tiny_checkpoint), "--max-output-tokens", "16"]) as server:
        health: list[int] = []

        async def probe() -> None:
            # the event loop must keep answering while the model works (inference runs on a thread)
            async with httpx.AsyncClient(timeout=10) as c:
                for _ in range(20):
                    health.append((await c.get(f"{server.url}/health")).status_code)
                    await asyncio.sleep(0.1)

        report, _ = await asyncio.gather(
            run_load(server.url, clients=16, duration=3.0, kind="mixed", max_tokens=8, timeout=60, prompts=4),
            probe(),
        )
        summary = report.summary()
        assert report.errors == {}, summary
        assert report.lost == 0, summary
        assert report.sent == report.completed == report.server_answered > 16, summary
        assert summary["p50_ms"] <= summary["p95_ms"] <= summary["max_ms"]
        # greedy answers do not depend on what a request shared its decode with
        assert summary["most_answers_per_prompt"] == 1 and len(report.answers) == 8, summary
        assert health == [200] * 20
        assert "batch" in server.log()  # requests were logged with their batch size
        # 16 clients and one model worker: queued compatible requests were decoded together
        batches = re.search(
            r"^editserver_batch_size_count ([0-9.]+)$", httpx.get(f"{server.url}/metrics").text, re.M
        )
        assert batches and float(batches.group(1)) < report.completed, summary


def test_load_refuses_non_loopback():
    with pytest.raises(ValueError, match="loopback"):
        asyncio.run(run_load("http://example.com:8000", clients=1, duration=1))
    with pytest.raises(ValueError, match="clients"):
        asyncio.run(run_load("http://127.0.0.1:9", clients=1000, duration=1))


@pytest.mark.parametrize("bench", ["load", "latency"])
def test_a_server_that_cannot_start_is_a_message(bench, tmp_path):
    """``bench load``/``latency`` start their own server; a bad ``--model`` is its log, status 2."""
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "editserver.cli", "bench", bench, "--model", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    assert "cannot load the model" in r.stderr and "Traceback" not in r.stderr
