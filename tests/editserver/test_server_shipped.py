"""``editserver serve`` as a user starts it: the shipped checkpoint by default, a bad --model refused.

The shipped-model test skips until ``model/checkpoints/default`` exists; it asserts behaviour and
shape (whether the suggestions are good is the replay harness's business).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from editserver.bench.load import LocalServer
from tests.editserver.test_server import ZED_PROMPT, check_edit_content


@pytest.fixture(scope="module")
def shipped_server(shipped_checkpoint):
    with LocalServer(["--max-output-tokens", "64"], threads=2) as s:  # no --model: the shipped default
        yield s


def test_shipped_fim_and_zed_edit(shipped_server):
    url = shipped_server.url
    body = {
        "model": "mercury-coder",
        "prompt": "def add(a, b):\n    return ",
        "suffix": "\n",
        "max_tokens": 16,
    }
    r = httpx.post(f"{url}/v1/fim/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] <= 16
    body = {"model": "mercury-coder", "messages": [{"role": "user", "content": ZED_PROMPT}], "stream": False}
    d = httpx.post(f"{url}/v1/edit/completions", json=body, timeout=120).json()
    choice = d["choices"][0]
    check_edit_content(choice["message"]["content"], d["editserver"], choice["finish_reason"])
    assert all(c["context_length"] == 32768 for c in httpx.get(f"{url}/v1/models").json()["data"])


def test_serve_bad_model_dir_fails_fast(tmp_path):
    exe = Path(sys.executable).with_name("editserver")
    r = subprocess.run(
        [str(exe), "serve", "--model", str(tmp_path), "--port", "9"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "not a checkpoint directory" in r.stderr


def test_shipped_with_openai_client(shipped_server):
    import openai

    client = openai.OpenAI(base_url=f"{shipped_server.url}/v1", api_key="unused", max_retries=0)
    c = client.completions.create(model="mercury-edit-2", prompt="import os\n", suffix="\n", max_tokens=8)
    assert c.object == "text_completion" and c.choices[0].finish_reason in ("stop", "length")


@pytest.mark.gpu
def test_serve_on_cuda(tiny_checkpoint):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    with LocalServer(["--model", str(tiny_checkpoint), "--device", "cuda", "--max-output-tokens", "16"]) as s:
        assert httpx.get(f"{s.url}/health").json()["device"].startswith("cuda")
        body = {"prompt": "def f(", "max_tokens": 8, "stream": True, "diffusing": True}
        with httpx.stream("POST", f"{s.url}/v1/fim/completions", json=body, timeout=120) as r:
            lines = [line for line in r.iter_lines() if line.startswith("data: ")]
        assert r.status_code == 200 and lines[-1] == "data: [DONE]"
