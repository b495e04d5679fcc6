"""Server settings: one typed object built from the command line (or by tests) and read everywhere.

Design decisions:
- A frozen dataclass, not environment magic: ``editserver serve`` fills it from argparse, tests and the
  load benchmark build it directly, and ``create_app(settings)`` reads nothing else.
- Each option is written once, here: a field's ``opt(default, help, ...)`` metadata (editserver/options.py)
  is its ``serve`` flag, help text, ``--help`` group and choices; ``serve`` generates its parser from
  it, so no default is repeated elsewhere (the Scheduler takes its limits from here, without defaults
  of its own). Fields marked ``cli: False`` (``aliases``, ``extra``) are filled by code, not flags.
- Choices bind in ``__post_init__`` too, so a Settings built in code gets the same clear error as
  the command line; ``--api-key`` defaults to ``$EDITSERVER_API_KEY`` when the parser is built, and
  this class never reads the environment.
- Defaults favour one developer machine: loopback only, a bounded queue (so overload is a fast 429,
  never an ever-growing backlog), small opportunistic batches.
- ``fim_threshold`` / ``edit_threshold`` override the checkpoint's tuned thresholds for this server
  only (``serve --fim-threshold 0`` shows every non-blank completion of a checkpoint whose tuned
  threshold hides them all); None keeps the checkpoint's value, and the checkpoint is never edited.
  ``edit_threshold`` is one number for both next-edit kinds (in-file, cross-file): an operator's
  override means "show what scores this", whatever file the region is in.
- Safe network defaults: a host other than loopback needs an API key (``insecure_no_auth`` is the
  explicit, named way out), so the model and its answers about the user's code are never open to
  the network by accident. Bodies are capped (``max_body_bytes``, 1 MiB: a full 32K-token prompt is
  about 130 KB of JSON) and answered 413 beyond it; browsers get CORS headers only for the origins
  listed in ``allow_origins`` (none by default).
- ``join_running`` (on; ``serve --no-join`` turns it off): queued greedy requests join the running
  decode at its next block boundary (server/scheduler.py). Off keeps start-of-decode batching only,
  the baseline ``bench load --compare-join`` measures against.
- ``max_output_tokens`` caps every canvas (FIM ``max_tokens`` and the edit rewrite) so an operator can
  bound worst-case latency on a CPU; requests asking for more are clamped, and the cap is what
  ``/v1/models`` reports as ``max_output_length``.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field, fields
from pathlib import Path

from editserver.options import opt

# Inception's model names, accepted as aliases of whatever checkpoint is loaded (Zed sends
# "mercury-coder", the Inception docs use "mercury-edit-2").
MODEL_ALIASES = ("mercury-coder", "mercury-edit", "mercury-edit-2")
MAX_BODY_BYTES = 1 << 20


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the port on this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve to anything


NETWORK, MODEL, REQUESTS, OPERATIONS = "network", "model", "requests", "operations"  # --help groups


@dataclass(frozen=True)
class Settings:
    """Everything one server reads; each field with a help text is a ``serve`` flag (editserver/options.py)."""

    host: str = opt("127.0.0.1", "interface to bind (default: loopback only)", metavar="HOST", group=NETWORK)
    port: int = opt(8000, "TCP port", metavar="PORT", group=NETWORK)
    model: Path | None = opt(
        None,
        "checkpoint directory, or a name pulled with `editserver pull` (default: the shipped model)",
        metavar="DIR|NAME",
        group=MODEL,
    )
    device: str = opt("cpu", "cpu or cuda (cuda:N picks a device)", metavar="cpu|cuda", group=MODEL)
    api_key: str | None = opt(
        None,
        "require 'Authorization: Bearer KEY' on /v1/* (default: $EDITSERVER_API_KEY)",
        env="EDITSERVER_API_KEY",
        metavar="KEY",
        group=NETWORK,
    )
    served_model_name: str = opt(
        "editserver", "id listed first by /v1/models", flag="--model-name", metavar="NAME", group=OPERATIONS
    )
    aliases: tuple[str, ...] = field(
        default=MODEL_ALIASES, metadata={"cli": False}
    )  # other ids it answers to
    max_queue: int = opt(
        64, "requests waiting (not yet running) before new ones get 429", metavar="N", group=REQUESTS
    )
    max_batch: int = opt(
        8, "compatible queued requests decoded together in one batch", metavar="N", group=REQUESTS
    )
    join_running: bool = opt(
        True,
        "queued requests wait for the running decode to end instead of joining it at a block boundary",
        flag="--no-join",
        negate=True,
        group=REQUESTS,
    )
    max_output_tokens: int | None = opt(
        None, "cap on every canvas (default: the engine's limit, 1024)", metavar="N", group=REQUESTS
    )
    threads: int = opt(0, "torch intra-op threads (0: torch's choice)", metavar="N", group=MODEL)
    fim_threshold: float | None = opt(
        None,
        "show FIM completions scoring at least this (0-1; default: the checkpoint's fim_threshold)",
        metavar="X",
        group=REQUESTS,
    )
    edit_threshold: float | None = opt(
        None,
        "show next edits, in-file and cross-file alike, scoring at least this (0-1; default: the "
        "checkpoint's in_file_threshold and cross_file_threshold)",
        metavar="X",
        group=REQUESTS,
    )
    log_level: str = opt(
        "info",
        "JSON log lines on stderr at this level and above",
        choices=["debug", "info", "warning", "error"],
        group=OPERATIONS,
    )
    dtype: str = opt(
        "auto",
        "serving dtype (default auto: fp32 for our checkpoints; bf16 for open models where native)",
        choices=["auto", "fp32", "bf16", "fp16"],
        group=MODEL,
    )
    max_context: int | None = opt(
        None,
        "longest context served and read, in tokens (default: 32768 served, and an open model reads "
        "the window its publisher evaluates it at, 2048 or 4096; its own context caps it)",
        metavar="N",
        group=MODEL,
    )
    chat_template: str = opt(
        "auto",
        "chat template for an open model's edit prompts: auto (the directory's; none for a base "
        "checkpoint), none (the raw prompt) or a Jinja file",
        metavar="auto|none|FILE",
        group=MODEL,
    )
    block_size: int | None = opt(
        None,
        "a block-diffusion model's block (SDAR/TraDo, Fast-dLLM v2, Stable-DiffCoder, LLaDA2): overrides its repository "
        "name's -bN and its config.json's block_size (default 4; 32 for Fast-dLLM v2 and LLaDA2)",
        metavar="N",
        group=MODEL,
    )
    quantize: str = opt(
        "auto",
        "CPU weights: packed (the same weights in oneDNN's layout: faster steps; auto picks it on a "
        "CPU), int8 (weight-only, per channel: half the bytes per step) or w8a8 (int8 weights, and a "
        "step's activations in int8 too: faster steps on CPUs without native bf16, answers change "
        "more) (model/infer/quant.py)",
        choices=["auto", "none", "int8", "packed", "w8a8"],
        group=MODEL,
    )
    prefix_cache_mb: float | None = opt(
        None,
        "MiB of recent contexts' keys/values reused by later requests (0: off; default: the "
        "model family's, docs/experiments.md)",
        metavar="MIB",
        group=MODEL,
    )
    prefix_cache_suffix: bool = opt(
        False,
        "with a prefix cache, reuse the text after the cursor too: a keystroke then computes only the "
        "tokens typed and the answer, not the rest of the file (approximate, docs/experiments.md)",
        group=MODEL,
    )
    extra: dict = field(
        default_factory=dict, metadata={"cli": False}
    )  # free-form provenance shown by /health
    insecure_no_auth: bool = opt(
        False,
        "allow a non-loopback --host without --api-key (anyone who reaches the port can use it)",
        group=NETWORK,
    )
    max_body_bytes: int = opt(
        MAX_BODY_BYTES, "larger request bodies are refused with 413", metavar="N", group=NETWORK
    )
    allow_origins: tuple[str, ...] = opt(
        (),
        "a browser origin allowed to call the API (CORS), e.g. http://localhost:3000; repeatable "
        "(default: none)",
        flag="--allow-origin",
        metavar="ORIGIN",
        repeat=True,
        group=NETWORK,
    )
    replica_id: str | None = opt(
        None,
        "name of this replica in /metrics (editserver_replica_info), /health and the "
        "X-Editserver-Replica header (default: HOSTNAME:PORT)",
        metavar="ID",
        group=OPERATIONS,
    )
    drain_timeout: float = opt(
        30.0,
        "on SIGTERM, seconds to let in-flight requests finish while new ones get 503",
        metavar="SECONDS",
        group=OPERATIONS,
    )

    def __post_init__(self) -> None:
        for f in fields(self):  # the flags' choices bind a Settings built in code too
            choices = f.metadata.get("choices")
            if choices and getattr(self, f.name) not in choices:
                raise ValueError(
                    f"{f.name} must be one of {', '.join(choices)}, got {getattr(self, f.name)!r}"
                )
        if self.max_queue < 1:
            raise ValueError("max_queue must be at least 1")
        if self.max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        if self.max_output_tokens is not None and self.max_output_tokens < 1:
            raise ValueError("max_output_tokens must be at least 1")
        for name in ("fim_threshold", "edit_threshold"):
            value = getattr(self, name)
            # scores are confidences in [0, 1]; NaN fails both comparisons and is refused too
            if value is not None and not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {value!r}")
        if self.prefix_cache_mb is not None and not self.prefix_cache_mb >= 0:
            raise ValueError(f"prefix_cache_mb must be at least 0, got {self.prefix_cache_mb!r}")
        if self.quantize not in ("auto", "none") and self.device != "cpu":
            raise ValueError(f"--quantize {self.quantize} runs on the CPU only")
        if self.block_size is not None and self.block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {self.block_size}")
        if self.max_context is not None and self.max_context < 1:
            raise ValueError(f"max_context must be at least 1, got {self.max_context}")
        if not self.drain_timeout >= 0:
            raise ValueError(f"drain_timeout must be at least 0, got {self.drain_timeout!r}")
        if self.max_body_bytes < 1024:
            raise ValueError(f"max_body_bytes must be at least 1024, got {self.max_body_bytes}")
        if not is_loopback(self.host) and not self.api_key and not self.insecure_no_auth:
            raise ValueError(
                f"refusing to listen on {self.host} without --api-key: anyone who reaches the port could "
                "use the model and read its answers (set --api-key or $EDITSERVER_API_KEY, or pass "
                "--insecure-no-auth)"
            )
        if self.chat_template not in ("auto", "none") and not Path(self.chat_template).expanduser().is_file():
            raise ValueError(f"--chat-template must be auto, none or a file, got {self.chat_template!r}")
        if self.device not in ("cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ValueError(f"device must be cpu or cuda, got {self.device!r}")
