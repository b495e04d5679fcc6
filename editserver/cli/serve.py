"""``editserver serve``: the local HTTP API (Inception/OpenAI-compatible) on uvicorn.

Design decisions:
- Readiness (editserver/server/replica.py, docs/scale-out.md): the port opens at once and the model
  loads on a thread; ``/health`` and the API answer 503 until it is loaded. A ``--model`` that is not a
  directory fails before the port opens; one that fails to load prints the same one line and exits
  with status 2. SIGTERM drains: 503 to new requests and to ``/health``, in-flight requests finish
  (at most ``--drain-timeout`` seconds), then uvicorn's graceful shutdown; a second signal cuts it short.
- Logs are JSON lines on stderr (one per request from the app, plus lifecycle lines); uvicorn's own
  access log is off because the app writes a richer one. Nothing is sent anywhere.
- ``--threads`` sets torch's intra-op threads before loading (0 keeps torch's default); on a shared
  CPU one or two threads keep the machine responsive.
- Every flag is generated from ``Settings`` (editserver/server/settings.py): its name, default, help
  text, group and choices are written there once; this module only parses, checks and runs.
- The API key may come from ``$EDITSERVER_API_KEY`` so it does not show in the process list.
- Binding to anything but loopback needs ``--api-key`` (or ``--insecure-no-auth``, said out loud);
  otherwise ``serve`` prints one line and exits with status 2 before the port opens
  (server/settings.py). With a key it is still warned about: the server has no TLS.
- ``--model`` also takes a Hugging Face directory of an open-weight diffusion family
  (model/infer/hf/); the start prints one line on stderr with the family, parameters, dtype, device
  and load time, so a user sees what the port will serve. ``--dtype auto`` keeps our own checkpoints
  in fp32 and serves open models in bf16 where it is native (CUDA, AVX-512 BF16/AMX CPUs).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import socket
import sys
import time
from pathlib import Path

from editserver.server.settings import is_loopback


class JsonFormatter(logging.Formatter):
    """One JSON object per line: request lines are already JSON, everything else is wrapped."""

    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        base = {"ts": ts, "level": record.levelname.lower(), "logger": record.name}
        if record.name == "editserver.access" and msg.startswith("{"):
            return json.dumps({**base, **json.loads(msg)}, ensure_ascii=False)
        base["msg"] = msg
        if record.exc_info:
            base["exc"] = self.formatException(record.exc_info)
        return json.dumps(base, ensure_ascii=False)


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True


def register(sub: argparse._SubParsersAction) -> None:
    from editserver.options import add_arguments
    from editserver.server.settings import MODEL, NETWORK, OPERATIONS, REQUESTS, Settings

    p = sub.add_parser(
        "serve",
        help="serve the model over HTTP (Inception Mercury Edit / OpenAI API)",
        description="Serve the model over HTTP on loopback: Inception's FIM and next-edit endpoints and "
        "OpenAI's /v1/completions (docs/api.md).",
    )
    groups = {title: p.add_argument_group(title) for title in (MODEL, NETWORK, REQUESTS, OPERATIONS)}
    add_arguments(p, Settings, groups)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    log = logging.getLogger("editserver.serve")
    try:
        from editserver.options import from_args
        from editserver.server.settings import Settings

        settings = from_args(Settings, args)
    except ValueError as exc:
        print(f"editserver serve: {exc}", file=sys.stderr)
        return 2
    import torch
    import uvicorn

    from editserver.server.app import create_app, load_engine

    if settings.threads > 0:
        torch.set_num_threads(settings.threads)
    if settings.device.startswith("cuda") and not torch.cuda.is_available():
        print("editserver serve: --device cuda but no CUDA device is available", file=sys.stderr)
        return 2
    from editserver.model.infer.hub import resolve_model

    try:  # a name pulled with `editserver pull`
        settings = dataclasses.replace(settings, model=resolve_model(settings.model))
    except FileNotFoundError as exc:
        print(f"editserver serve: cannot load the model: {exc}", file=sys.stderr)
        return 2
    if settings.model is not None and not Path(settings.model).is_dir():  # fails before the port opens
        print(
            f"editserver serve: cannot load the model: {settings.model} is not a directory", file=sys.stderr
        )
        return 2
    if not is_loopback(settings.host):
        log.warning(f"listening on {settings.host}: reachable from other machines, without TLS")
    from editserver.server.metrics import Metrics
    from editserver.server.replica import Replica, draining_server

    replica_id = settings.replica_id or f"{socket.gethostname()}:{settings.port}"
    settings = dataclasses.replace(settings, extra={**settings.extra, "replica": replica_id})
    metrics = Metrics(replica=replica_id)

    def build():  # on the replica's loading thread, while /health answers 503
        t0 = time.perf_counter()
        engine = load_engine(settings)
        print(
            f"editserver serve: {engine.family} model, {engine.num_parameters:,} parameters, {engine.dtype}, "
            f"{settings.device}, context {engine.context_length}, loaded in {time.perf_counter() - t0:.1f}s",
            file=sys.stderr,
            flush=True,
        )
        log.info(
            f"model loaded from {settings.model or 'the shipped checkpoint'} in {time.perf_counter() - t0:.1f}s"
        )
        return create_app(settings, engine, metrics)

    failed: list[BaseException] = []

    def on_failure(exc: BaseException) -> None:
        lines = str(exc).strip().splitlines() or [type(exc).__name__]
        reason = lines[0][:400] + (" (…)" if len(lines) > 1 or len(lines[0]) > 400 else "")
        print(f"editserver serve: cannot load the model: {reason}", file=sys.stderr, flush=True)
        failed.append(exc)
        server.should_exit = True

    replica = Replica(build, metrics, replica_id, on_failure)
    config = uvicorn.Config(
        replica,
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        log_level=settings.log_level,
        timeout_graceful_shutdown=5,
    )
    server = draining_server(config, replica, settings.drain_timeout)
    server.run()
    return 2 if failed else 0
