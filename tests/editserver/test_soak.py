"""The soak in the default tier: 60 s of mixed traffic at 16 clients with cancellations and disconnects
against a real server process, sampled from /proc. The 30-minute run is ``editserver bench soak``.

Latency drift is reported but not asserted here (a shared machine makes timings noisy); errors, lost
work and resource growth are.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys

import httpx
import pytest

from editserver.bench.load import LocalServer
from editserver.bench.soak import SoakReport, read_proc, run_soak


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_one_minute_soak_loses_nothing_and_leaks_nothing(tiny_checkpoint):
    with LocalServer(["--model", str(tiny_checkpoint), "--max-output-tokens", "16"]) as server:
        report = asyncio.run(
            run_soak(server.url, minutes=1.0, clients=16, abandon=0.15, pid=server.proc.pid, sample_every=2)
        )
        metrics = httpx.get(f"{server.url}/metrics").text
        health = httpx.get(f"{server.url}/health").json()
    s = report.summary()
    brief = {k: v for k, v in s.items() if k != "over_time"}
    assert s["errors"] == {}, brief
    assert s["completed"] > 100 and s["cancelled"] > 0 and s["disconnected"] > 0, brief
    assert s["sent"] == s["completed"] + s["cancelled"] + s["disconnected"], brief
    v = s["verdict"]
    assert v["rss_growth"] and v["fds_flat"] and v["threads_flat"], brief
    assert len(s["over_time"]) >= 20
    assert s["cpu_ms_per_request_first_fifth"] > 0 and s["cpu_ms_per_request_last_fifth"] > 0, brief
    # abandoned requests were dropped by the server, and nothing is left running or queued
    dropped = sum(
        float(x) for x in re.findall(r"^editserver_cancelled_total\{[^}]*\} ([0-9.]+)$", metrics, re.M)
    )
    assert dropped > 0, metrics
    assert health["queue_depth"] == 0, health


def test_verdict_names_each_target():
    good = {
        "errors": {"429": 3},
        "p95_first_fifth_ms": 100.0,
        "p95_last_fifth_ms": 119.0,
        "rss_growth": 0.01,
        "fds_warm_max": 30,
        "fds_last_max": 31,
        "threads_warm_max": 7,
        "threads_last_max": 7,
    }
    assert all(SoakReport.verdict(good).values())
    bad = {
        **good,
        "errors": {"timeout": 1},
        "p95_last_fifth_ms": 130.0,
        "rss_growth": 0.08,
        "fds_last_max": 90,
    }
    v = SoakReport.verdict(bad)
    assert not v["no_errors_but_429"] and not v["p95_drift"] and not v["rss_growth"] and not v["fds_flat"]
    rss, fds, threads, cpu = read_proc(__import__("os").getpid())
    assert rss > 0 and fds > 2 and threads >= 1 and cpu > 0


def test_soak_cli_refuses_bad_values():
    r = subprocess.run(
        [sys.executable, "-m", "editserver.cli", "bench", "soak", "--minutes", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
