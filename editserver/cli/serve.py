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
import os
import socket
import sys
import time
from pathlib import Path

from editserver.server.settings import MAX_BODY_BYTES, is_loopback


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
    p = sub.add_parser("serve", help="serve the model over HTTP (Inception Mercury Edit / OpenAI API)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default: loopback only)")
    p.add_argument("--port", type=int, default=8000, help="TCP port (default: 8000)")
    p.add_argument(
        "--model",
        type=Path,
        default=None,
        help="checkpoint directory, or a name pulled with `editserver pull` (default: the shipped model)",
    )
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "fp32", "bf16", "fp16"],
        help="serving dtype (default auto: fp32 for our checkpoints; bf16 for open models where native)",
    )
    p.add_argument(
        "--max-context",
        type=int,
        default=None,
        help="longest context served and read, in tokens (default: 32768 served, and an open model reads "
        "the window its publisher evaluates it at, 2048 or 4096; its own context caps it)",
    )
    p.add_argument(
        "--chat-template",
        default="auto",
        metavar="auto|none|FILE",
        help="chat template for an open model's edit prompts: auto (the directory's; none for a base "
        "checkpoint), none (the raw prompt) or a Jinja file (default auto)",
    )
    p.add_argument(
        "--api-key",
        default=os.environ.get("EDITSERVER_API_KEY") or None,
        help="require 'Authorization: Bearer KEY' on /v1/* (default: $EDITSERVER_API_KEY)",
    )
    p.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="allow a non-loopback --host without --api-key (anyone who reaches the port can use it)",
    )
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=MAX_BODY_BYTES,
        help=f"larger request bodies are refused with 413 (default: {MAX_BODY_BYTES})",
    )
    p.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="a browser origin allowed to call the API (CORS), e.g. http://localhost:3000; repeatable "
        "(default: none)",
    )
    p.add_argument("--max-queue", type=int, default=64, help="waiting requests before 429 (default 64)")
    p.add_argument("--max-batch", type=int, default=8, help="requests decoded together (default 8)")
    p.add_argument(
        "--no-join",
        action="store_true",
        help="queued requests wait for the running decode to end instead of joining it at a block boundary",
    )
    p.add_argument(
        "--max-output-tokens",
        type=int,
        default=None,
        help="cap on every canvas (default: the engine's limit, 1024)",
    )
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    p.add_argument(
        "--quantize",
        default="none",
        choices=["none", "int8"],
        help="int8: weight-only int8 weights on the CPU, half the bytes per step (default none)",
    )
    p.add_argument(
        "--prefix-cache-mb",
        type=float,
        default=None,
        help="MiB of recent contexts' keys/values reused by later requests (0: off; default: the "
        "model family's, docs/experiments.md)",
    )
    p.add_argument(
        "--fim-threshold",
        type=float,
        default=None,
        help="show FIM completions scoring at least this (0-1; default: the checkpoint's fim_threshold)",
    )
    p.add_argument(
        "--edit-threshold",
        type=float,
        default=None,
        help="show next edits scoring at least this (0-1; default: the checkpoint's selectivity_threshold)",
    )
    p.add_argument("--model-name", default="editserver", help="id listed first by /v1/models")
    p.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="JSON log lines on stderr at this level and above (default: info)",
    )
    p.add_argument(
        "--replica-id",
        default=None,
        help="name of this replica in /metrics (editserver_replica_info), /health and the "
        "X-Editserver-Replica header (default: HOSTNAME:PORT)",
    )
    p.add_argument(
        "--drain-timeout",
        type=float,
        default=30.0,
        help="on SIGTERM, seconds to let in-flight requests finish while new ones get 503 (default: 30)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    log = logging.getLogger("editserver.serve")
    try:
        from editserver.server.settings import Settings

        settings = Settings(
            host=args.host,
            port=args.port,
            model=args.model,
            device=args.device,
            api_key=args.api_key,
            served_model_name=args.model_name,
            max_queue=args.max_queue,
            max_batch=args.max_batch,
            join_running=not args.no_join,
            max_output_tokens=args.max_output_tokens,
            threads=args.threads,
            fim_threshold=args.fim_threshold,
            edit_threshold=args.edit_threshold,
            log_level=args.log_level,
            dtype=args.dtype,
            max_context=args.max_context,
            insecure_no_auth=args.insecure_no_auth,
            max_body_bytes=args.max_body_bytes,
            allow_origins=tuple(args.allow_origin),
            chat_template=args.chat_template,
            prefix_cache_mb=args.prefix_cache_mb,
            quantize=args.quantize,
        )
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

    replica_id = args.replica_id or f"{socket.gethostname()}:{settings.port}"
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
    server = draining_server(config, replica, args.drain_timeout)
    server.run()
    return 2 if failed else 0
