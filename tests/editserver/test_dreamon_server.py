"""DreamOn served end to end: ``editserver serve --model DIR`` on loopback answers FIM with an answer
whose length the model chose (``max_tokens`` is only its bound), and ``bench fim --decode
published,default`` runs on the directory. The directory is tests/hf_dreamon.py's: random weights with
the ``<|expand|>`` and end-of-text rows of the lm_head scaled so one text shrinks its 4-mask gap and
another grows it (that module says how)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import httpx
import pytest

from tests.editserver.test_bench_fim import TASK
from tests.hf_dreamon import make_dreamon
from tests.lsp.conftest import REPO, quiet_env, serving


@pytest.fixture(scope="module")
def directory(tmp_path_factory):
    return make_dreamon(tmp_path_factory.mktemp("dreamon"))


def test_fim_answers_are_as_long_as_the_model_chooses(directory, tmp_path):
    with serving(directory, tmp_path / "serve.log", "--dtype", "fp32") as url:
        assert httpx.get(f"{url}/v1/models").json()["data"][0]["family"] == "dreamon"

        def fim(prompt: str, max_tokens: int) -> dict:
            body = {"model": "editserver", "prompt": prompt, "suffix": "\n", "max_tokens": max_tokens}
            r = httpx.post(f"{url}/v1/fim/completions", json=body, timeout=120)
            assert r.status_code == 200, r.text
            return r.json()

        short = fim("x = ", 16)
        assert short["usage"]["completion_tokens"] < 4  # below the 4 masks it started from
        assert short["choices"][0]["finish_reason"] == "stop"
        long = fim("def add(a, b):\n    return ", 16)
        assert 4 < long["usage"]["completion_tokens"] <= 16  # grown, up to max_tokens
        capped = fim("def add(a, b):\n    return ", 6)
        assert capped["usage"]["completion_tokens"] <= 6 and capped["editserver"]["canvas_tokens"] == 6


def test_bench_fim_compares_published_and_default(directory, tmp_path):
    suite = tmp_path / "mini-singleline-infilling.jsonl.gz"
    suite.write_bytes(gzip.compress((json.dumps(TASK) + "\n").encode()))
    out = tmp_path / "r.json"
    args = ["bench", "fim", "--suite", suite, "--model", directory, "--json", out, "--max-tokens", "8"]
    args += ["--no-sequential", "--threads", "1", "--decode", "published,default"]
    cmd = [sys.executable, "-m", "editserver.cli", *map(str, args)]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=quiet_env(), timeout=600)
    assert r.returncode == 0, r.stderr
    result = json.loads(out.read_text())
    assert result["decode"] == ["published", "default"] and "default_agreement" in result
