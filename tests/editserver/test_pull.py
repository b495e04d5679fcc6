"""``editserver pull NAME`` against a loopback HTTP server that serves a fixture directory the way the
Hugging Face hub does (``/{repo}/resolve/{revision}/{file}``, ``X-Repo-Commit``, ``ETag``, byte
ranges, ``X-Error-Code: EntryNotFound``): only the files the loader reads are fetched, a connection
dropped halfway through a shard is taken up again in the same run, files already pulled are not
fetched again, and ``--model NAME`` then loads the pulled directory."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.hf_models import make_published

REPO = "apple/DiffuCoder-7B-Instruct"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


class Hub:
    """A fixture directory served as the hub serves ``REPO``; the first GET of ``cut`` stops halfway."""

    def __init__(self, d: Path, cut: str | None, repo: str = REPO):
        self.d, self.cut, self.requests = d, cut, []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_HEAD(self):
                self._serve(body=False)

            def do_GET(self):
                self._serve(body=True)

            def _serve(self, body: bool):
                prefix = f"/{repo}/resolve/main/"
                name = self.path.split("?")[0].removeprefix(prefix)
                hub.requests.append((self.command, name, self.headers.get("Range")))
                f = hub.d / name
                if not self.path.startswith(prefix) or not f.is_file():
                    self.send_response(404)
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = f.read_bytes()
                start = (
                    int(self.headers["Range"].split("=")[1].split("-")[0]) if self.headers.get("Range") else 0
                )
                self.send_response(206 if start else 200)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", '"' + hashlib.sha256(data).hexdigest() + '"')
                self.send_header("Content-Length", str(len(data) - start))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.end_headers()
                if not body:
                    return
                if name == hub.cut and not start:
                    hub.cut = None  # once: half the bytes, then the connection drops
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(data[start:])

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    d, _ = make_published(root, "DiffuCoder-7B-Instruct")
    h = Hub(d, cut=sorted(d.glob("model-*.safetensors"))[1].name)
    yield h
    h.server.shutdown()


def _env(hub: Hub, cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    return {
        **env,
        "HF_ENDPOINT": hub.url,
        "HF_HUB_CACHE": str(cache),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_ETAG_TIMEOUT": "5",
        "HF_HUB_DOWNLOAD_TIMEOUT": "5",
        "NO_PROXY": "127.0.0.1",
    }


def _pull(env: dict, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "editserver.cli.main", "pull", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def test_pull_fetches_what_the_loader_reads_resumes_and_serves(hub, tmp_path):
    env = _env(hub, tmp_path / "cache")
    cut = hub.cut
    first = _pull(env, "diffucoder-7b-instruct")
    assert first.returncode == 0, first.stderr
    got = {name for method, name, _ in hub.requests if method == "GET"}
    assert not any(r[1].endswith(".py") for r in hub.requests), "code is never fetched"
    shards = {p.name for p in hub.d.glob("model-*.safetensors")}
    assert shards | {"config.json", "vocab.json", "merges.txt", "chat_template.jinja"} <= got
    assert [r[1] for r in hub.requests if r[0] == "GET"].count(cut) == 2, (
        "the dropped shard was taken up again"
    )
    d = Path(first.stdout.split(" is in ")[1].split(";")[0])
    for f in [*shards, "config.json", "tokenizer_config.json", "vocab.json", "merges.txt"]:
        assert (d / f).read_bytes() == (hub.d / f).read_bytes(), f

    hub.requests.clear()
    again = _pull(env, "diffucoder-7b-instruct")
    assert again.returncode == 0, again.stderr
    assert not [r for r in hub.requests if r[0] == "GET" and r[1] in shards], "cached files are not fetched"

    code = "from editserver.model.infer.loader import load_checkpoint as l; print(l('diffucoder-7b-instruct').family)"
    loaded = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert loaded.returncode == 0 and loaded.stdout.strip() == "dream", loaded.stderr


def test_pull_errors_are_one_line(hub, tmp_path):
    env = _env(hub, tmp_path / "cache")
    bad = _pull(env, "no-such-model")
    assert bad.returncode == 2 and "pullable: dream-coder-7b" in bad.stderr and "Traceback" not in bad.stderr
    missing = _pull(env, "llada-8b-instruct")  # this hub serves only the DiffuCoder repository
    assert missing.returncode == 2 and missing.stderr.startswith("editserver pull:"), missing.stderr
    assert "Traceback" not in missing.stderr
    code = "from editserver.model.infer.loader import load_checkpoint as l; l('open-dcoder-0.5b')"
    never = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert "editserver pull open-dcoder-0.5b" in never.stderr


def test_pull_llada_moe_asks_for_the_files_its_publisher_lists(tmp_path):
    """The LLaDA-MoE names ask for exactly the listed files the loader reads (docs/open-weights.md),
    never its code, and the pulled directory loads as the llada-moe family."""
    from editserver.model.infer.hub import PULLABLE

    assert PULLABLE["dreamon-7b"] == "Dream-org/DreamOn-v0-7B"
    assert PULLABLE["sdar-8b-chat"] == "JetLM/SDAR-8B-Chat"  # block diffusion, served
    assert PULLABLE["trado-8b-instruct"] == "Gen-Verse/TraDo-8B-Instruct"
    assert PULLABLE["fast-dllm-v2-7b"] == "Efficient-Large-Model/Fast_dLLM_v2_7B"
    assert PULLABLE["fast-dllm-v2-1.5b"] == "Efficient-Large-Model/Fast_dLLM_v2_1.5B"
    assert PULLABLE["llada-moe-7b-a1b-base"] == "inclusionAI/LLaDA-MoE-7B-A1B-Base"
    assert PULLABLE["stable-diffcoder-8b-base"] == "ByteDance-Seed/Stable-DiffCoder-8B-Base"
    assert PULLABLE["stable-diffcoder-8b-instruct"] == "ByteDance-Seed/Stable-DiffCoder-8B-Instruct"
    d, _ = make_published(tmp_path / "hub", "LLaDA-MoE-7B-A1B-Instruct")
    hub = Hub(d, cut=None, repo="inclusionAI/LLaDA-MoE-7B-A1B-Instruct")
    try:
        env = _env(hub, tmp_path / "cache")
        out = _pull(env, "llada-moe-7b-a1b-instruct")
        assert out.returncode == 0, out.stderr
        asked = {name for method, name, _ in hub.requests if method == "GET"}
        listed = {p.name for p in d.iterdir()} - {"configuration_lladamoe.py", "modeling_lladamoe.py"}
        assert asked == listed
        code = "from editserver.model.infer.loader import load_checkpoint as l; print(l('llada-moe-7b-a1b-instruct').family)"
        loaded = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
        )
        assert loaded.returncode == 0 and loaded.stdout.strip() == "llada-moe", loaded.stderr
    finally:
        hub.server.shutdown()


def test_pull_stable_diffcoder_asks_for_the_listed_files_and_loads(tmp_path):
    """The Stable-DiffCoder names ask for the listed files the loader reads (docs/open-weights.md),
    never its modelling code, and the pulled directory loads as its family."""
    from tests.hf_stable_diffcoder import make_stable_diffcoder

    d, _ = make_stable_diffcoder(tmp_path / "hub", dim=32, layers=1, ffn=48)
    hub = Hub(d, cut=None, repo="ByteDance-Seed/Stable-DiffCoder-8B-Instruct")
    try:
        env = _env(hub, tmp_path / "cache")
        out = _pull(env, "stable-diffcoder-8b-instruct")
        assert out.returncode == 0, out.stderr
        asked = {name for method, name, _ in hub.requests if method == "GET"}
        assert asked == {p.name for p in d.iterdir()} - {"modeling_stable_diffcoder.py"}
        code = (
            "from editserver.model.infer.loader import load_checkpoint as l; "
            "print(l('stable-diffcoder-8b-instruct').family)"
        )
        loaded = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
        )
        assert loaded.returncode == 0 and loaded.stdout.strip() == "stable-diffcoder", loaded.stderr
    finally:
        hub.server.shutdown()
