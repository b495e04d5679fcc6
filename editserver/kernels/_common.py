"""Shared host-side helpers for the kernels: device checks and launch-size arithmetic.

Design decisions:
- Whether Triton interprets is read once, at import, exactly as ``@triton.jit`` does when it
  decorates the kernels: a process cannot switch half-way and end up with mixed kernels.
"""

from __future__ import annotations

import functools
import os

import torch

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


def check_tensors(*tensors: torch.Tensor | None) -> None:
    """Kernels need CUDA tensors, or CPU tensors under the interpreter; never autograd inputs."""
    for t in tensors:
        if t is None:
            continue
        if not t.is_cuda and not INTERPRET:
            raise RuntimeError(
                "Triton kernels need CUDA tensors (or TRITON_INTERPRET=1 set before importing kernels "
                f"to run them on CPU through Triton's interpreter); got a tensor on {t.device}"
            )
        if t.requires_grad and torch.is_grad_enabled():
            raise RuntimeError("Triton kernels are forward-only: call them under torch.no_grad()")


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors on a CUDA device (a nominal 8 under the interpreter)."""
    if device.type == "cuda":
        return _cuda_sm_count(device.index if device.index is not None else torch.cuda.current_device())
    return 8


@functools.cache
def _cuda_sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count
