"""Open-weight families served end to end: ``editserver serve --model DIR`` on loopback, called over
HTTP as editors do, and through the LSP over stdio; ``bench fim`` on a tiny suite.

The directories are tiny random-weight models in each family's exact on-disk layout
(tests/hf_models.py): the text is gibberish, so these check shapes, fields and that decoding ends.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import httpx
import pytest

from tests.editserver.test_server import ZED_PROMPT
from tests.helpers import serve_refusal
from tests.hf_models import PUBLISHED, make_dream, make_llada, make_published
from tests.lsp.conftest import REPO, lsp_session, quiet_env, serving

FAMILIES = {"dream": make_dream, "llada": make_llada}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def served(request, tmp_path_factory):
    """(family, model dir, URL, log path) of a real server of that family's tiny directory."""
    root = tmp_path_factory.mktemp(request.param)
    d, _ = FAMILIES[request.param](root / "model")
    log = root / "serve.log"
    with serving(d, log, "--max-context", "1024", "--dtype", "fp32") as url:
        yield request.param, d, url, log


def test_start_line_and_models_card(served):
    family, _, url, log = served
    line = next(x for x in log.read_text().splitlines() if x.startswith("editserver serve:"))
    assert f"{family} model" in line and "parameters" in line and "float32" in line and "cpu" in line
    assert "loaded in" in line
    card = httpx.get(f"{url}/v1/models").json()["data"][0]
    assert card["family"] == family and card["dtype"] == "float32" and card["parameters"] > 10_000
    # the config's positions (2048 Dream, 4096 LLaDA), capped by --max-context; an open model reads its whole window
    assert card["context_length"] == 1024 and card["window"] == 1024


def test_fim_and_line_requests(served):
    _, _, url, _ = served
    body = {"model": "editserver", "prompt": "def add(a, b):\n    return ", "suffix": "\n", "max_tokens": 24}
    r = httpx.post(f"{url}/v1/fim/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    out = r.json()
    info = out["editserver"]
    assert out["object"] == "text_completion" and out["choices"][0]["finish_reason"] in ("stop", "length")
    assert info["dropped_tokens"] == 0 and info["canvas_tokens"] == 24 and info["steps"] >= 1
    line = httpx.post(f"{url}/v1/completions", json={**body, "max_tokens": 32, "stop": ["\n"]}, timeout=120)
    assert line.status_code == 200, line.text
    assert line.json()["editserver"]["canvas_tokens"] in (16, 32)  # the winning canvas is reported
    long = httpx.post(f"{url}/v1/fim/completions", json={**body, "prompt": "x = 1\n" * 2000}, timeout=120)
    assert long.status_code == 400 and "context window" in long.json()["error"]["message"]


def test_next_edit_request(served):
    _, _, url, _ = served
    body = {"model": "mercury-edit", "messages": [{"role": "user", "content": ZED_PROMPT}], "max_tokens": 64}
    r = httpx.post(f"{url}/v1/edit/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["object"] == "edit.completion"
    content = out["choices"][0]["message"]["content"]
    assert content.startswith("```\n") and content.endswith("```")
    info = out["editserver"]
    assert info["outcome"] in ("shown", "unchanged", "truncated", "below_threshold", "empty")
    assert info["dropped_tokens"] == 0 and info["canvas_tokens"] >= 1


async def test_lsp_inline_completion(served, tmp_path):
    _, _, url, _ = served
    opts = {"debounceMs": 0, "telemetry": {"enabled": True, "path": str(tmp_path / "t.sqlite3")}}
    uri = "file:///work/calc.py"
    async with lsp_session(url, opts) as s:
        s.open(uri, "def add(a, b):\n    return a + b\n\n\ndef main():\n    print(1)\n", "python")
        res = await s.inline(uri, 5, 4)
        assert res is not None
        for item in res.items:
            assert "\n" not in item.insert_text
        edit = await s.request(
            "editserver/nextEdit", {"textDocument": {"uri": uri}, "position": {"line": 1, "character": 4}}
        )
        assert isinstance(edit["edits"], list) and isinstance(edit["score"], (int, float))


def test_bench_fim_on_a_tiny_suite(served, tmp_path):
    _, d, _, _ = served
    task = {
        "task_id": "T/0",
        "entry_point": "add",
        "prompt": "def add(a, b):\n",
        "suffix": "",
        "canonical_solution": "    return a + b\n",
        "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n",
    }
    suite = tmp_path / "mini-singleline-infilling.jsonl.gz"
    with gzip.open(suite, "wt") as fh:
        fh.write(json.dumps(task) + "\n")
    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "editserver.cli", "bench", "fim", "--suite", str(suite), "--model", str(d)]
    cmd += ["--json", str(out), "--max-tokens", "8", "--no-sequential", "--threads", "1"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=quiet_env(), timeout=600)
    assert r.returncode == 0, r.stderr
    result = json.loads(out.read_text())
    assert result["middle_ce"] is not None and result["middle_ce"] > 0


def test_bad_directories_exit_2_with_one_line(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mamba", "architectures": ["MambaLM"]}))
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"")
    cmd = [sys.executable, "-m", "editserver.cli", "serve", "--model", str(tmp_path), "--port", "1"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=quiet_env(), timeout=300)
    assert r.returncode == 2
    # one plain line for the user; anything else on stderr is the JSON log
    lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith("{")]
    assert len(lines) == 1 and "cannot load the model" in lines[0], r.stderr
    assert "supported families" in lines[0]


def test_train_refuses_an_open_weight_directory(tmp_path) -> None:
    """`editserver train --init` trains this project's checkpoints: an open-weight directory is
    refused up front with one line, not a traceback from deep in the training loop."""
    d = tmp_path / "dream"
    make_dream(d)
    cmd = [sys.executable, "-m", "editserver.cli", "train", "--init", str(d), "--run", str(tmp_path / "r")]
    r = subprocess.run(cmd + ["--steps", "1"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "open-weight model directory" in r.stdout + r.stderr
    assert "Traceback" not in r.stderr


# two in the default tier (a slow-tokenizer directory with its template in chat_template.jinja and
# its own pad, and LLaDA); every one with -m slow: a real server start costs 15-30 s on 2 cores
FAST = ("DiffuCoder-7B-Instruct", "LLaDA-8B-Instruct")


@pytest.mark.parametrize(
    "name", [n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in sorted(PUBLISHED)]
)
def test_published_directory_serves_fim_and_edit(name, tmp_path):
    """Each directory laid out as its publisher ships it (tests/hf_models.py ``PUBLISHED``) starts the
    server and answers FIM and next edit; text that spells a special token is text."""
    d, _ = make_published(tmp_path, name)
    with serving(d, tmp_path / "serve.log", "--dtype", "fp32") as url:
        card = httpx.get(f"{url}/v1/models").json()["data"][0]
        assert card["window"] == (4096 if "LLaDA" in name else 2048)
        body = {"model": "editserver", "prompt": "s = '<|mask|>'\nt = ", "suffix": "\n", "max_tokens": 8}
        r = httpx.post(f"{url}/v1/fim/completions", json=body, timeout=120)
        assert r.status_code == 200, r.text
        body = {
            "model": "mercury-edit",
            "messages": [{"role": "user", "content": ZED_PROMPT}],
            "max_tokens": 16,
        }
        r = httpx.post(f"{url}/v1/edit/completions", json=body, timeout=120)
        assert r.status_code == 200 and r.json()["object"] == "edit.completion", r.text


def test_chat_template_flag_is_checked_before_loading(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "editserver.cli.main",
        "serve",
        "--chat-template",
        str(tmp_path / "nope.jinja"),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=quiet_env())
    assert r.returncode == 2 and "--chat-template must be auto, none or a file" in r.stderr
    assert "Traceback" not in r.stderr


def test_chat_template_file_for_our_checkpoint_exits_2(tmp_path):
    """Our checkpoint writes its own prompts: a template file would change nothing, so it is one clear
    line and exit 2 rather than silently ignored."""
    (tmp_path / "template.jinja").write_text("{{ messages[0]['content'] }}")
    line = serve_refusal("--chat-template", str(tmp_path / "template.jinja"))
    assert "--chat-template applies to open-weight models" in line, line
