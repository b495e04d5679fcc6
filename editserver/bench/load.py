"""``editserver bench load``: N concurrent editor-like clients for T seconds against one server.

Design decisions:
- Loopback only and bounded: the URL must resolve to 127.0.0.1/localhost/::1, clients <= 64,
  duration <= 600 s, every request has a timeout. It measures *our* server, never anything remote.
- Either against a running server (``--url``) or a self-started one (``--model``; ``LocalServer``
  runs ``editserver serve`` as a subprocess on a free port, exactly as a user would). Tests reuse
  ``LocalServer`` to start real servers.
- Clients are closed-loop (send, wait, send again) like an editor with one request in flight; each
  alternates FIM and next-edit requests unless ``--kind`` picks one. When time is up no new request is
  started and in-flight ones finish (bounded by the request timeout).
- Reported: completed requests, throughput (req/s and completion tokens/s), latency p50/p95/max,
  errors (HTTP status != 200, by status) and lost requests (sent, never answered: timeouts, resets).
  The server's own request counter (``/metrics``) is compared with what clients sent, so a request
  the server dropped silently also shows up as lost.
- ``--compare-max-batch 1,8`` runs the same load against one self-started server per value, back to
  back in one invocation, and reports throughput relative to the first (ratios, not absolute claims:
  absolute figures depend on what else the machine is doing). ``--compare-join`` does the same with
  and without ``serve --no-join`` (step-level admission, server/scheduler.py), and p95 relative to
  the first too.
- ``--prompts N`` cycles each kind through N distinct prompts, and the report says whether every
  prompt got one answer (``same_answers`` across the compared servers): greedy answers must not
  depend on what a request was batched with.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from editserver.bench._stats import percentile

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
MAX_CLIENTS, MAX_DURATION = 64, 600.0

FIM_PREFIX = '''import json
from pathlib import Path


def load_config(path: Path) -> dict:
    """Read a JSON config file and fill in defaults."""
    data = json.loads(path.read_text())
    data.setdefault("name", path.stem)
'''
FIM_SUFFIX = "\n    return data\n"


def edit_prompt() -> str:
    from editserver.protocol.prompt import EditPrompt, Snippet, build_prompt, unified_diff

    region = "def area(width, height):\n    return width * height\n\n\nprint(area(2, <|c|>3))\n"
    cursor = region.index("<|c|>")
    return build_prompt(
        EditPrompt(
            file_path="geometry.py",
            above="import math\n\n",
            region=region.replace("<|c|>", ""),
            cursor=cursor,
            below="",
            snippets=[Snippet("shapes.py", "class Square:\n    side: float\n")],
            history=unified_diff("geometry.py", "def area(w, h):\n", "def area(width, height):\n"),
        )
    )


# ---- a real server process ---------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerStartError(RuntimeError):
    """The benchmark's own ``editserver serve`` exited or never answered ``/health``; the message
    carries its log (a bad ``--model``, a taken port), which the bench commands print as is."""


class LocalServer:
    """``editserver serve`` in a subprocess on a free loopback port; a context manager.

    stderr (the JSON request log) goes to ``log_path``; ``__enter__`` returns once ``/health`` answers.
    """

    def __init__(self, args: list[str] | None = None, startup_timeout: float = 180.0, threads: int = 1):
        self.args = list(args or [])
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.startup_timeout = startup_timeout
        self.threads = threads
        self.proc: subprocess.Popen | None = None
        self._log = tempfile.NamedTemporaryFile(prefix="editserver-", suffix=".log", delete=False)
        self.log_path = Path(self._log.name)

    def __enter__(self) -> LocalServer:
        import httpx

        exe = Path(sys.executable).with_name("editserver")
        cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "editserver.cli"]
        cmd += ["serve", "--port", str(self.port), "--threads", str(self.threads), *self.args]
        env = {**os.environ, "OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads)}
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerStartError(f"editserver serve exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.__exit__(None, None, None)
        raise ServerStartError(
            f"editserver serve did not answer within {self.startup_timeout}s:\n{self.log()}"
        )

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")


# ---- the load ----------------------------------------------------------------------------------
@dataclass
class LoadReport:
    clients: int
    duration_s: float
    elapsed_s: float
    sent: int = 0
    completed: int = 0
    errors: dict[str, int] = field(default_factory=dict)  # HTTP status -> count
    lost: int = 0  # sent and never answered (timeouts, connection errors)
    server_answered: int | None = None  # the server's own count for the load's endpoints
    completion_tokens: int = 0
    latencies_ms: list[float] = field(default_factory=list, repr=False)
    # prompt ("fim0", "edit3", ...) -> the distinct answers it got: greedy answers never vary
    answers: dict[str, set[str]] = field(default_factory=dict, repr=False)

    @property
    def throughput_rps(self) -> float:
        return self.completed / self.elapsed_s if self.elapsed_s else 0.0

    def summary(self) -> dict:
        lat = sorted(self.latencies_ms)
        d = {k: v for k, v in asdict(self).items() if k not in ("latencies_ms", "answers")}
        d.update(
            throughput_rps=round(self.throughput_rps, 2),
            tokens_per_s=round(self.completion_tokens / self.elapsed_s, 1) if self.elapsed_s else 0.0,
            p50_ms=percentile(lat, 0.50, 1),
            p95_ms=percentile(lat, 0.95, 1),
            max_ms=round(lat[-1], 1) if lat else None,
            mean_ms=round(statistics.fmean(lat), 1) if lat else None,
            error_count=sum(self.errors.values()),
            most_answers_per_prompt=max((len(v) for v in self.answers.values()), default=0),
        )
        return d


ENDPOINTS = {"fim": "/v1/fim/completions", "edit": "/v1/edit/completions"}


def _variant(kind: str, body: dict, j: int) -> dict:
    """Prompt ``j`` of a kind: prompt 0 is the body itself, later ones differ in their text (a FIM
    prefix with ``j`` more lines, an edit whose call has other numbers), so answers differ in length."""
    if j == 0:
        return body
    if kind == "fim":
        extra = "".join(f'    data.setdefault("key{m}", {m})\n' for m in range(j))
        return {**body, "prompt": body["prompt"] + extra}
    content = body["messages"][0]["content"].replace("area(2, ", f"area({j + 2}, ")
    return {**body, "messages": [{"role": "user", "content": content}]}


def _answered(metrics_text: str) -> int:
    total = 0
    for m in re.finditer(
        r'^editserver_requests_total\{endpoint="([^"]+)",status="\d+"\} ([0-9.e+]+)$', metrics_text, re.M
    ):
        if m.group(1) in ENDPOINTS.values():
            total += int(float(m.group(2)))
    return total


async def run_load(
    url: str,
    clients: int = 16,
    duration: float = 30.0,
    kind: str = "mixed",
    max_tokens: int = 32,
    timeout: float = 120.0,
    api_key: str | None = None,
    prompts: int = 1,
) -> LoadReport:
    import httpx

    host = urlparse(url).hostname
    if host not in LOOPBACK:
        raise ValueError(f"load tests run against loopback only, not {host!r}")
    if not 1 <= clients <= MAX_CLIENTS or not 0 < duration <= MAX_DURATION:
        raise ValueError(f"clients must be 1..{MAX_CLIENTS} and duration 0..{MAX_DURATION}s")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    prompt = edit_prompt()
    bodies = {
        "fim": {
            "model": "mercury-coder",
            "prompt": FIM_PREFIX,
            "suffix": FIM_SUFFIX,
            "max_tokens": max_tokens,
            "stop": ["\n\n"],
        },
        "edit": {
            "model": "mercury-coder",
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens * 4,
            "stream": False,
        },
    }
    kinds = ["fim", "edit"] if kind == "mixed" else [kind]
    variants = {k: [_variant(k, bodies[k], j) for j in range(prompts)] for k in kinds}
    limits = httpx.Limits(max_connections=clients + 2)
    async with httpx.AsyncClient(base_url=url, timeout=timeout, headers=headers, limits=limits) as http:
        before = _answered((await http.get("/metrics")).text)
        report = LoadReport(clients=clients, duration_s=duration, elapsed_s=0.0)
        t0 = time.perf_counter()
        deadline = t0 + duration

        async def client(i: int) -> None:
            n = i  # stagger the kinds across clients
            while time.perf_counter() < deadline:
                k = kinds[n % len(kinds)]
                j = (n // len(kinds)) % prompts
                n += 1
                report.sent += 1
                start = time.perf_counter()
                try:
                    r = await http.post(ENDPOINTS[k], json=variants[k][j])
                except httpx.HTTPError:
                    report.lost += 1
                    continue
                if r.status_code != 200:
                    report.errors[str(r.status_code)] = report.errors.get(str(r.status_code), 0) + 1
                    continue
                report.completed += 1
                report.latencies_ms.append((time.perf_counter() - start) * 1000)
                body = r.json()
                report.completion_tokens += body["usage"]["completion_tokens"]
                choice = body["choices"][0]
                text = choice["text"] if k == "fim" else choice["message"]["content"]
                report.answers.setdefault(f"{k}{j}", set()).add(text)

        await asyncio.gather(*(client(i) for i in range(clients)))
        report.elapsed_s = time.perf_counter() - t0
        report.server_answered = _answered((await http.get("/metrics")).text) - before
    return report


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("load", help="concurrent clients against a local server: throughput, p50/p95, errors")
    p.add_argument("--url", default=None, help="a running server on loopback (default: start one)")
    p.add_argument("--model", type=Path, default=None, help="checkpoint for the self-started server")
    p.add_argument("--clients", type=int, default=16, help="concurrent clients (default: 16)")
    p.add_argument("--duration", type=float, default=30.0, help="seconds")
    p.add_argument(
        "--kind", choices=["mixed", "fim", "edit"], default="mixed", help="which requests the clients send"
    )
    p.add_argument("--max-tokens", type=int, default=32, help="FIM max_tokens (edits get 4x)")
    p.add_argument("--timeout", type=float, default=120.0, help="per-request timeout, seconds")
    p.add_argument("--threads", type=int, default=2, help="torch threads of the self-started server")
    p.add_argument("--server-arg", action="append", default=[], help="extra 'editserver serve' argument")
    p.add_argument("--api-key", default=None, help="bearer key of the server under load, if it has one")
    p.add_argument(
        "--compare-max-batch",
        type=lambda v: [int(x) for x in v.split(",")],
        default=None,
        metavar="1,8",
        help="start one server per --max-batch value and compare them in one run",
    )
    p.add_argument(
        "--prompts",
        type=int,
        default=1,
        help="distinct prompts per kind the clients cycle through (default 1)",
    )
    p.add_argument(
        "--compare-join",
        action="store_true",
        help="start a server with --no-join and one without, and compare them in one run",
    )
    p.add_argument("--json", type=Path, default=None, help="also write the report here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    def go(url: str) -> LoadReport:
        return asyncio.run(
            run_load(
                url,
                args.clients,
                args.duration,
                args.kind,
                args.max_tokens,
                args.timeout,
                args.api_key,
                args.prompts,
            )
        )

    reports: list[LoadReport] = []
    labels: list[str] = []
    if args.url:
        reports.append(go(args.url))
        labels.append(args.url)
    else:
        base = (["--model", str(args.model)] if args.model else []) + args.server_arg
        variants = (
            [[]] if not args.compare_max_batch else [["--max-batch", str(b)] for b in args.compare_max_batch]
        )
        if args.compare_join:
            variants = [[*v, "--no-join"] for v in variants] + variants
        for extra in variants:  # one server per variant, same load, back to back in this one run
            try:
                with LocalServer(base + extra, threads=args.threads) as server:
                    reports.append(go(server.url))
            except ServerStartError as e:
                print(str(e).rstrip(), file=sys.stderr)
                return 2
            labels.append(" ".join(extra) or "default")
    if len(reports) == 1:
        out: dict = reports[0].summary()
    else:
        runs = [{"server": label, **r.summary()} for label, r in zip(labels, reports, strict=True)]
        first = runs[0]["throughput_rps"] or float("nan")
        out = {"runs": runs, "throughput_vs_first": [round(r["throughput_rps"] / first, 2) for r in runs]}
        p95 = runs[0]["p95_ms"] or float("nan")
        out["p95_vs_first"] = [round((r["p95_ms"] or float("nan")) / p95, 2) for r in runs]
        # every prompt got one answer across all servers (greedy decoding: batching must not change it)
        union: dict[str, set[str]] = {}
        for r in reports:
            for key, texts in r.answers.items():
                union.setdefault(key, set()).update(texts)
        out["same_answers"] = all(len(v) == 1 for v in union.values())
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    ok = all(not r.errors and r.lost == 0 and r.server_answered in (None, r.sent) for r in reports)
    ok = ok and out.get("same_answers", True)
    return 0 if ok else 1
