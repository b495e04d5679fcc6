"""``editserver bench soak --minutes N``: a long mixed load that looks for leaks and slow drift.

Design decisions:
- The server is started here (``LocalServer``, a real ``editserver serve`` on loopback) unless
  ``--url`` names a running one; only a server started here can be sampled for memory, file
  descriptors and threads (read from ``/proc/PID``, Linux), so ``--url`` reports traffic only.
- 16 closed-loop clients (like bench load) mix FIM (plain, streamed, diffusing streams) and next-edit
  requests. A share of requests is abandoned on purpose: a *cancel* closes a stream after its first
  event, a *disconnect* gives up a JSON request after a short random wait. Both are counted as
  what they are, never as errors; the server must drop their work (flow.py) and keep going.
- Errors are counted by kind: an HTTP status (``429`` is back-pressure, allowed by the targets),
  ``timeout``, ``connection``, ``bad_body`` (a 200 that is not the documented JSON or SSE).
- Resources are sampled every ``--sample-every`` seconds. Growth is judged after warm-up (the first
  fifth of the run: the allocator, caches and thread pools settle), comparing the mean RSS of the
  second fifth with that of the last fifth. Latency drift compares the p95 of requests finished in
  the first and in the last fifth of the run; beside it, the server's own CPU time per completed
  request in those fifths (from ``/proc/PID/stat``), which tells a server that got slower (more CPU
  per request) from a machine that got busier (same CPU, longer waits).
- The verdict checks the targets (0 errors other than 429, RSS growth <= 5%, fds and threads flat
  within a small slack, last-fifth p95 within 20% of the first) and the exit status says whether
  they held (0) or not (1); 2 when the server cannot start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from editserver.bench._stats import percentile
from editserver.bench.load import FIM_PREFIX, FIM_SUFFIX, LOOPBACK, LocalServer, ServerStartError, edit_prompt

FD_SLACK, THREAD_SLACK = 8, 4  # flat: the last fifth's maximum may exceed the warm one by this much
RSS_GROWTH, P95_DRIFT = 0.05, 0.20


@dataclass
class Sample:
    t: float  # seconds since the start
    rss_kb: int
    fds: int
    threads: int
    cpu_s: float  # the server's user + system CPU time so far
    completed: int  # requests completed so far


@dataclass
class SoakReport:
    minutes: float
    clients: int
    elapsed_s: float = 0.0
    sent: int = 0
    completed: int = 0
    cancelled: int = 0  # streams closed early on purpose
    disconnected: int = 0  # JSON requests given up on purpose
    errors: dict[str, int] = field(default_factory=dict)  # kind -> count
    done: list[tuple[float, float]] = field(default_factory=list, repr=False)  # (t, latency ms)
    samples: list[Sample] = field(default_factory=list, repr=False)

    def fail(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1

    def _p95(self, lo: float, hi: float) -> float | None:
        return percentile([ms for t, ms in self.done if lo <= t < hi], 0.95, 1)

    def _fifth(self, i: int) -> list[Sample]:
        span = self.elapsed_s / 5
        return [s for s in self.samples if i * span <= s.t < (i + 1) * span + (1e9 if i == 4 else 0)]

    def _cpu_ms(self, part: list[Sample]) -> float | None:
        """Server CPU milliseconds per completed request over one fifth's samples."""
        if len(part) < 2 or part[-1].completed == part[0].completed:
            return None
        return round((part[-1].cpu_s - part[0].cpu_s) * 1000 / (part[-1].completed - part[0].completed), 1)

    def summary(self) -> dict:
        span = self.elapsed_s / 5
        out: dict = {
            "minutes": self.minutes,
            "clients": self.clients,
            "elapsed_s": round(self.elapsed_s, 1),
            "sent": self.sent,
            "completed": self.completed,
            "cancelled": self.cancelled,
            "disconnected": self.disconnected,
            "errors": dict(self.errors),
            "p95_first_fifth_ms": self._p95(0, span),
            "p95_last_fifth_ms": self._p95(4 * span, 1e18),
        }
        warm, last = self._fifth(1), self._fifth(4)
        if warm and last:
            mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
            rss_warm, rss_last = mean([s.rss_kb for s in warm]), mean([s.rss_kb for s in last])
            out.update(
                rss_warm_mb=round(rss_warm / 1024, 1),
                rss_last_mb=round(rss_last / 1024, 1),
                rss_growth=round(rss_last / rss_warm - 1, 4),
                fds_warm_max=max(s.fds for s in warm),
                fds_last_max=max(s.fds for s in last),
                threads_warm_max=max(s.threads for s in warm),
                threads_last_max=max(s.threads for s in last),
                cpu_ms_per_request_first_fifth=self._cpu_ms(self._fifth(0)),
                cpu_ms_per_request_last_fifth=self._cpu_ms(last),
            )
        out["over_time"] = [
            f"{s.t:.0f}s rss {s.rss_kb / 1024:.1f} MB, {s.fds} fds, {s.threads} threads" for s in self.samples
        ]
        out["verdict"] = self.verdict(out)
        return out

    @staticmethod
    def verdict(d: dict) -> dict[str, bool]:
        """Each target and whether it held (the module docstring lists them)."""
        v = {"no_errors_but_429": not any(k != "429" for k in d["errors"])}
        a, b = d["p95_first_fifth_ms"], d["p95_last_fifth_ms"]
        v["p95_drift"] = a is not None and b is not None and b <= a * (1 + P95_DRIFT)
        if "rss_growth" in d:
            v["rss_growth"] = d["rss_growth"] <= RSS_GROWTH
            v["fds_flat"] = d["fds_last_max"] <= d["fds_warm_max"] + FD_SLACK
            v["threads_flat"] = d["threads_last_max"] <= d["threads_warm_max"] + THREAD_SLACK
        return v


def read_proc(pid: int) -> tuple[int, int, int, float]:
    """(RSS in kB, open file descriptors, threads, CPU seconds) of a Linux process."""
    rss = threads = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    return rss, len(os.listdir(f"/proc/{pid}/fd")), threads, cpu


def _bodies(max_tokens: int) -> dict[str, dict]:
    fim = {"model": "mercury-coder", "prompt": FIM_PREFIX, "suffix": FIM_SUFFIX, "max_tokens": max_tokens}
    edit = {
        "model": "mercury-coder",
        "messages": [{"role": "user", "content": edit_prompt()}],
        "max_tokens": max_tokens * 4,
    }
    return {
        "fim": fim,
        "fim_stream": {**fim, "stream": True},
        "fim_diffusing": {**fim, "stream": True, "diffusing": True},
        "edit": edit,
        "edit_stream": {**edit, "stream": True},
    }


ROUTES = {"fim": "/v1/fim/completions", "edit": "/v1/edit/completions"}


async def _one(http, report: SoakReport, t0: float, name: str, body: dict, action: str, rng) -> None:
    """One request; ``action``: ``finish``, ``cancel`` (close a stream after its first event) or
    ``disconnect`` (give up after a short random wait)."""
    import httpx

    route = ROUTES[name.split("_")[0]]
    start = time.perf_counter()
    report.sent += 1
    try:
        if action == "disconnect":
            try:
                await asyncio.wait_for(http.post(route, json=body), timeout=rng.uniform(0.01, 0.3))
            except asyncio.TimeoutError:
                report.disconnected += 1
                return
            report.completed += 1  # it beat the wait: an ordinary answer
            return
        if body.get("stream"):
            async with http.stream("POST", route, json=body) as r:
                if r.status_code != 200:
                    await r.aread()
                    return report.fail(str(r.status_code))
                events = 0
                async for line in r.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    events += 1
                    if action == "cancel":
                        report.cancelled += 1
                        return  # leaving the block closes the connection mid-stream
                    if line == "data: [DONE]":
                        break
                    if "error" in json.loads(line[6:]):
                        return report.fail("stream_error")
                if events == 0:
                    return report.fail("bad_body")
        else:
            r = await http.post(route, json=body)
            if r.status_code != 200:
                return report.fail(str(r.status_code))
            if "choices" not in r.json():
                return report.fail("bad_body")
    except httpx.TimeoutException:
        return report.fail("timeout")
    except (httpx.HTTPError, ValueError):
        return report.fail("connection")
    report.completed += 1
    report.done.append((time.perf_counter() - t0, (time.perf_counter() - start) * 1000))


async def run_soak(
    url: str,
    minutes: float,
    clients: int = 16,
    abandon: float = 0.1,
    pid: int | None = None,
    sample_every: float = 5.0,
    max_tokens: int = 16,
    timeout: float = 120.0,
    seed: int = 0,
) -> SoakReport:
    import httpx

    if urlparse(url).hostname not in LOOPBACK:
        raise ValueError(f"soak runs against loopback only, not {urlparse(url).hostname!r}")
    report = SoakReport(minutes=minutes, clients=clients)
    bodies = _bodies(max_tokens)
    names = list(bodies)
    t0 = time.perf_counter()
    deadline = t0 + minutes * 60

    async def client(i: int, http) -> None:
        rng = random.Random(seed * 1000 + i)
        while time.perf_counter() < deadline:
            name = rng.choice(names)
            roll = rng.random()
            action = "finish"
            if roll < abandon:
                action = "cancel" if bodies[name].get("stream") else "disconnect"
            await _one(http, report, t0, name, bodies[name], action, rng)

    async def sampler() -> None:
        while time.perf_counter() < deadline:
            if pid is not None:
                report.samples.append(Sample(time.perf_counter() - t0, *read_proc(pid), report.completed))
            await asyncio.sleep(sample_every)

    limits = httpx.Limits(max_connections=clients + 2)
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as http:
        await asyncio.gather(sampler(), *(client(i, http) for i in range(clients)))
    report.elapsed_s = time.perf_counter() - t0
    return report


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "soak", help="long mixed load with cancellations: errors, RSS, fds, threads, p95 drift"
    )
    p.add_argument("--minutes", type=float, default=30.0, help="how long (default: 30)")
    p.add_argument("--url", default=None, help="a running server on loopback (default: start one)")
    p.add_argument("--model", type=Path, default=None, help="checkpoint for the self-started server")
    p.add_argument("--clients", type=int, default=16, help="concurrent clients (default: 16)")
    p.add_argument("--abandon", type=float, default=0.1, help="share of requests cancelled (default: 0.1)")
    p.add_argument("--max-tokens", type=int, default=16, help="FIM max_tokens (edits get 4x; default: 16)")
    p.add_argument("--threads", type=int, default=2, help="torch threads of the self-started server")
    p.add_argument("--sample-every", type=float, default=5.0, help="seconds between resource samples")
    p.add_argument("--server-arg", action="append", default=[], help="extra 'editserver serve' argument")
    p.add_argument("--json", type=Path, default=None, help="also write the report here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not 0 < args.minutes <= 24 * 60 or not 1 <= args.clients <= 64 or not 0 <= args.abandon <= 1:
        print("editserver bench soak: --minutes 0..1440, --clients 1..64, --abandon 0..1", file=sys.stderr)
        return 2

    def go(url: str, pid: int | None) -> SoakReport:
        return asyncio.run(
            run_soak(url, args.minutes, args.clients, args.abandon, pid, args.sample_every, args.max_tokens)
        )

    if args.url:
        report = go(args.url, None)
    else:
        extra = (["--model", str(args.model)] if args.model else []) + args.server_arg
        try:
            with LocalServer(extra, threads=args.threads) as server:
                report = go(server.url, server.proc.pid)
        except ServerStartError as e:
            print(str(e).rstrip(), file=sys.stderr)
            return 2
    out = report.summary()
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0 if all(out["verdict"].values()) else 1
