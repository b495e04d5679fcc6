"""Kernel tests run on CUDA when present, else on CPU through Triton's interpreter.

Design decisions:
- ``@triton.jit`` reads ``TRITON_INTERPRET`` when it decorates a kernel, i.e. when ``kernels.<op>`` is
  first imported, Triton's own library functions (``tl.zeros``...) are decorated when ``triton`` is
  first imported, and the interpreter reads it again while running (restoring it after the imports
  breaks launches: verified with triton 3.9). So without CUDA this conftest sets it for the rest of
  the test run, before anything imports ``triton``, and imports every op module at once. The choice is
  frozen in ``kernels._common.INTERPRET``. If something imported Triton earlier in the run, the
  CPU cases fail with a message saying so, and the rest of the suite is not disturbed.
- Every test takes ``device``: ``"cpu"`` (interpreter; small shapes) and ``"cuda"`` (marked ``gpu``,
  skipped without CUDA; larger shapes too).
- Tolerances are per dtype: fp32 near machine precision; fp16/bf16 a couple of units in the last
  place of the output (the interpreter also rounds fp32 -> bf16 differently from PyTorch).
"""

from __future__ import annotations

import importlib
import os
import sys

import pytest
import torch

CUDA = torch.cuda.is_available()

# Triton imported (by something else) before this conftest could ask for the interpreter: its own
# library functions are in compiled mode, and the CPU cases below fail with this message.
TOO_LATE = not CUDA and "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1"
if not CUDA:
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton")
if not CUDA:
    for _op in ("attention", "rmsnorm", "rotary", "swiglu", "token_confidence"):
        importlib.import_module(f"editserver.kernels.{_op}")

from editserver.kernels import _common  # noqa: E402

TOL = {
    torch.float32: dict(atol=2e-5, rtol=2e-5),
    torch.float16: dict(atol=2e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=3e-2, rtol=3e-2),
}

DEVICES = [pytest.param("cpu", id="interp"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    if request.param == "cuda" and not CUDA:
        pytest.skip("needs CUDA")
    if request.param == "cpu":
        if CUDA:
            pytest.skip("CUDA present: the kernels are compiled, not interpreted")
        if TOO_LATE or not _common.INTERPRET:
            pytest.fail(
                "triton or kernels were imported before tests/kernels set TRITON_INTERPRET=1: run "
                "tests/kernels on its own, or set TRITON_INTERPRET=1 in tests/conftest.py"
            )
    return request.param


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    torch.testing.assert_close(actual.float(), expected.float(), **TOL[dtype])
