"""``editserver serve --prefix-cache-mb`` and ``--quantize``: bad values are one clear line and exit 2,
and a server with both on answers."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from editserver.bench.load import LocalServer


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--prefix-cache-mb", "-1"], "prefix_cache_mb must be at least 0"),
        (["--quantize", "int8", "--device", "cuda"], "CPU only"),
        (["--quantize", "packed", "--device", "cuda"], "CPU only"),
        (["--quantize", "w8a8", "--device", "cuda"], "CPU only"),
    ],
)
def test_bad_speed_flags_are_one_line_and_exit_2(flags, words):
    cmd = [sys.executable, "-m", "editserver.cli", "serve", *flags]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and words in r.stderr and r.stderr.count("\n") == 1


@pytest.mark.parametrize("weights", ["int8", "packed", "w8a8"])
def test_a_server_with_reuse_and_cpu_weights_answers(tiny_checkpoint, weights):
    args = ["--model", str(tiny_checkpoint), "--prefix-cache-mb", "16", "--quantize", weights]
    body = {"prompt": "def add(a, b):\n    return ", "suffix": "\n", "max_tokens": 6, "stop": ["\n"]}
    with LocalServer(args) as server:
        for _ in range(2):  # the second finds the first's context
            r = httpx.post(f"{server.url}/v1/fim/completions", json=body, timeout=120)
            assert r.status_code == 200 and isinstance(r.json()["choices"][0]["text"], str)
