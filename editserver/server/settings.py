"""Server settings: one typed object built from the command line (or by tests) and read everywhere.

Design decisions:
- A frozen dataclass, not environment magic: ``editserver serve`` fills it from argparse, tests and the
  load benchmark build it directly, and ``create_app(settings)`` reads nothing else.
- Defaults favour one developer machine: loopback only, a bounded queue (so overload is a fast 429,
  never an ever-growing backlog), small opportunistic batches.
- ``fim_threshold`` / ``edit_threshold`` override the checkpoint's tuned thresholds for this server
  only (``serve --fim-threshold 0`` shows every non-blank completion of a checkpoint whose tuned
  threshold hides them all); None keeps the checkpoint's value, and the checkpoint is never edited.
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
from dataclasses import dataclass, field
from pathlib import Path

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


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"  # loopback only unless the user says otherwise
    port: int = 8000
    model: Path | None = None  # None: the shipped checkpoint (model/checkpoints/default)
    device: str = "cpu"  # "cpu" | "cuda"
    api_key: str | None = None  # when set, /v1/* needs "Authorization: Bearer <key>"
    served_model_name: str = "editserver"  # the id /v1/models lists first
    aliases: tuple[str, ...] = MODEL_ALIASES
    max_queue: int = 64  # requests waiting (not yet running) before new ones get 429
    max_batch: int = 8  # compatible queued requests decoded together in one batch
    join_running: bool = True  # queued greedy requests join a running decode at its block boundaries
    max_output_tokens: int | None = None  # canvas cap; None: the engine's own limit (1024)
    threads: int = 0  # torch intra-op threads; 0 keeps torch's default
    fim_threshold: float | None = None  # None: the checkpoint's inference.fim_threshold
    edit_threshold: float | None = None  # None: the checkpoint's inference.selectivity_threshold
    log_level: str = "info"
    dtype: str = "auto"  # serving dtype: auto (bf16 where native, else fp32), fp32, bf16, fp16
    # the longest context served (an open model's own is capped to it); None: 32K, and an open model
    # reads the window its publisher evaluates it at (model/infer/hf/__init__.py)
    max_context: int | None = None
    chat_template: str = "auto"  # open models' edit prompts: auto (none for base checkpoints), none, FILE
    quantize: str = "none"  # "int8": weight-only int8 on the CPU (model/infer/quant.py)
    prefix_cache_mb: float | None = None  # reused context keys/values; None: the family's default
    extra: dict = field(default_factory=dict)  # free-form provenance shown by /health
    insecure_no_auth: bool = False  # allow a non-loopback host without api_key (module docstring)
    max_body_bytes: int = MAX_BODY_BYTES  # larger request bodies get 413
    allow_origins: tuple[str, ...] = ()  # CORS: browser origins allowed to call the API; none by default

    def __post_init__(self) -> None:
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
        if self.dtype not in ("auto", "fp32", "bf16", "fp16"):
            raise ValueError(f"dtype must be auto, fp32, bf16 or fp16, got {self.dtype!r}")
        if self.prefix_cache_mb is not None and not self.prefix_cache_mb >= 0:
            raise ValueError(f"prefix_cache_mb must be at least 0, got {self.prefix_cache_mb!r}")
        if self.quantize not in ("none", "int8"):
            raise ValueError(f"quantize must be none or int8, got {self.quantize!r}")
        if self.quantize == "int8" and self.device != "cpu":
            raise ValueError("--quantize int8 runs on the CPU only")
        if self.max_context is not None and self.max_context < 1:
            raise ValueError(f"max_context must be at least 1, got {self.max_context}")
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
