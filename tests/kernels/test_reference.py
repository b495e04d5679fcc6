"""``kernels.reference`` is Triton-free and is the one PyTorch form: kernel modules re-export it, and
importing it (or the model's dispatch) in a fresh process loads no Triton."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from editserver.kernels import OPS, reference

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "module", ["editserver.kernels.reference", "editserver.model.infer.ops", "editserver.kernels"]
)
def test_import_loads_no_triton(module):
    code = (
        "import sys\n"
        f"import {module}\n"
        "bad = sorted(k for k in sys.modules if k == 'triton' or k.startswith('triton.'))\n"
        "assert not bad, bad\n"
        "print('ok')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_reference_source_never_imports_triton():
    """Not even lazily inside a function: the module's text has no triton import at all."""
    text = Path(reference.__file__).read_text()
    assert "import triton" not in text and "from triton" not in text


@pytest.mark.parametrize("op", OPS)
def test_kernel_modules_reexport_the_one_reference(op):
    import importlib

    mod = importlib.import_module(f"editserver.kernels.{op}")
    assert getattr(mod, f"{op}_reference") is getattr(reference, f"{op}_reference")
