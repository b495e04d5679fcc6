"""``editserver align`` as a user runs it: a real replay, a telemetry log written through the LSP's
own schema, a tiny checkpoint aligned, exported, re-tuned and served."""

from __future__ import annotations

import json
import lzma
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from editserver.bench.load import LocalServer
from editserver.cli.main import main
from editserver.lsp.telemetry import Telemetry

APP = """import math


def area(width, height):
    return width * height


def perimeter(width, height):
    return 2 * (width + height)


def report(width, height):
    print("area", area(width, height))
    print("perimeter", perimeter(width, height))
"""


def record(sha: str, old: str, new: str) -> dict:
    """A commit renaming ``old`` to ``new`` everywhere in APP: one hunk per changed line."""
    lines = APP.splitlines(keepends=True)
    hunks = [[i, 1, x.replace(old, new)] for i, x in enumerate(lines) if old in x]
    return {
        "repo": "acme/geometry",
        "sha": sha * 10,
        "parent": "0" * 40,
        "date": "2024-03-01T09:00:00+00:00",
        "subject": f"Rename {old} to {new}",
        "path": "geo.py",
        "lang": "python",
        "before": APP,
        "hunks": hunks,
    }


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``editserver ARGS`` in a subprocess on one thread (a tiny model gains nothing from more, and a
    busy machine loses much to oversubscribed threads)."""
    cmd = [sys.executable, "-m", "editserver.cli", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def telemetry_log(path: Path, suggestions: int) -> Path:
    """``suggestions`` FIM suggestions, each shown, then accepted or rejected (two events each)."""
    t = Telemetry(str(path), keep_prompts=True)
    for i in range(suggestions):
        prompt = {"prefix": f"def f{i}(width, height):\n    return ", "suffix": "\n", "max_tokens": 32}
        text = "width * height" if i % 2 == 0 else "width - height - height"
        t.suggestion(f"s{i}", "fim", "file:///geo.py", "python", prompt, text, None)
        t.event(f"s{i}", "show")
        t.event(f"s{i}", "accept" if i % 2 == 0 else "reject")
    t.close()
    return path


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("align-records") / "acme+geometry.jsonl.xz"
    with lzma.open(out, "wt", encoding="utf-8") as fh:
        for sha, (old, new) in zip("abc", [("width", "w"), ("height", "h"), ("area", "surface")]):
            fh.write(json.dumps(record(sha, old, new)) + "\n")
    return out


def test_small_telemetry_log_is_refused(tmp_path, tiny_checkpoint):
    log = telemetry_log(tmp_path / "t.sqlite3", 10)
    p = cli("align", "--telemetry", str(log), "--init", str(tiny_checkpoint), "--export", str(tmp_path / "o"))
    assert p.returncode == 2, p.stderr
    assert "20 events" in p.stderr and "at least 50" in p.stderr
    assert not (tmp_path / "o").exists()


def test_non_native_checkpoint_and_lora_are_refused_clearly(tmp_path, tiny_checkpoint, capsys):
    log = telemetry_log(tmp_path / "t.sqlite3", 30)
    odd = tmp_path / "odd"
    odd.mkdir()
    for f in ("model.safetensors", "tokenizer.json"):
        (odd / f).write_bytes((tiny_checkpoint / f).read_bytes())
    (odd / "config.json").write_text(json.dumps({"architectures": ["SomethingForCausalLM"]}))
    common = ["align", "--telemetry", str(log), "--export", str(tmp_path / "o"), "--run", str(tmp_path / "r")]
    assert main([*common, "--init", str(odd)]) == 2
    assert "not a native editserver checkpoint" in capsys.readouterr().err
    assert main([*common, "--init", str(tiny_checkpoint), "--lora", "8"]) == 2
    assert "open-weight" in capsys.readouterr().err


def test_align_end_to_end_exports_a_checkpoint_the_server_loads(tmp_path, tiny_checkpoint, records):
    replay = tmp_path / "replay.json"
    p = cli(
        "replay", "--records", str(records), "--in-process", "--model", str(tiny_checkpoint),
        "--max-points", "4", "--max-fim", "2", "--json", str(replay), "--no-progress",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    rows = json.loads(replay.read_text())["suggestions"]
    assert rows and all("developer" in r for r in rows)
    log = telemetry_log(tmp_path / "t.sqlite3", 30)
    out, run = tmp_path / "aligned", tmp_path / "run"
    p = cli(
        "align", "--replay", str(replay), "--telemetry", str(log), "--init", str(tiny_checkpoint),
        "--export", str(out), "--run", str(run), "--steps", "2", "--k", "2", "--batch-size", "4",
        "--tune-records", str(records), "--tune-points", "2", "--tune-fim", "2", "--no-progress",
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    assert "exported" in p.stdout and "next-edit threshold" in p.stdout
    cfg = json.loads((out / "config.json").read_text())
    aligned = cfg["meta"]["aligned"]
    assert aligned["method"] == "kto" and aligned["k"] == 2 and aligned["beta"] == 0.1
    assert aligned["steps"] == 2 and aligned["desirable"] > 0 and aligned["undesirable"] > 0
    assert aligned["sources"] == [str(replay), str(log)]
    assert {"selectivity_threshold", "fim_threshold"} <= set(cfg["inference"])
    assert (run / "state.pt").exists() and (run / "align.log.jsonl").read_text().count("\n") == 2
    with LocalServer(["--model", str(out), "--max-output-tokens", "16"]) as s:
        r = httpx.post(f"{s.url}/v1/fim/completions", json={"prompt": "def f(", "max_tokens": 8}, timeout=60)
    assert r.status_code == 200 and "choices" in r.json()
