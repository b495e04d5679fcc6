"""Weight averaging on export (``editserver train --export --average-with``): the exported weights
are the stated mix of two checkpoints; mismatched checkpoints and shares are clear errors."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import torch

from editserver.model.infer.checkpoint import save_checkpoint
from editserver.model.infer.config import ModelConfig
from editserver.model.infer.loader import load_checkpoint
from editserver.model.infer.transformer import Transformer
from tests.conftest import train_cli


def _export(run: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return train_cli("--run", str(run), "--export", str(out), *extra)


def _perturbed(src: Path, dst: Path) -> None:
    ck = load_checkpoint(src)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for v in ck.model.state_dict().values():
            v.add_(torch.randn(v.shape, generator=g))
    save_checkpoint(dst, ck.model, ck.tokenizer, ck.inference, ck.meta)


def _assert_average(out: Path, src: Path, other: Path, share: float) -> None:
    """``out``'s weights are ``share`` of ``src``'s plus the rest of ``other``'s, exported in bf16."""
    a = load_checkpoint(src).model.state_dict()
    b = load_checkpoint(other).model.state_dict()
    got = load_checkpoint(out).model.state_dict()
    for k in a:
        assert torch.equal(got[k], (share * a[k] + (1 - share) * b[k]).to(torch.bfloat16).float()), k


def test_export_averages_with_the_given_share(tiny_checkpoint, tmp_path) -> None:
    import shutil

    shutil.copytree(tiny_checkpoint, tmp_path / "run" / "checkpoint")
    _perturbed(tiny_checkpoint, tmp_path / "other")
    r = _export(tmp_path / "run", tmp_path / "out", "--average-with", str(tmp_path / "other"))
    r2 = _export(
        tmp_path / "run",
        tmp_path / "out2",
        "--average-with",
        str(tmp_path / "other"),
        "--average-share",
        "0.25",
    )
    assert r.returncode == 0 and r2.returncode == 0, r.stdout + r.stderr + r2.stdout + r2.stderr
    for out, share in ((tmp_path / "out", 0.5), (tmp_path / "out2", 0.25)):
        _assert_average(out, tiny_checkpoint, tmp_path / "other", share)
    meta = json.loads((tmp_path / "out2" / "config.json").read_text())["meta"]
    assert meta["averaged_with"] == f"0.25 of {tmp_path / 'run' / 'checkpoint'}, 0.75 of {tmp_path / 'other'}"


def test_averaging_mismatched_checkpoints_or_shares_is_an_error(tiny_checkpoint, tmp_path) -> None:
    import shutil

    shutil.copytree(tiny_checkpoint, tmp_path / "run" / "checkpoint")
    ck = load_checkpoint(tiny_checkpoint)
    wider = Transformer(ModelConfig.from_dict({**ck.config.to_dict(), "n_layers": ck.config.n_layers + 1}))
    save_checkpoint(tmp_path / "wider", wider, ck.tokenizer)
    r = _export(tmp_path / "run", tmp_path / "out", "--average-with", str(tmp_path / "wider"))
    assert r.returncode == 2 and "different model shapes" in r.stdout
    r = _export(tmp_path / "run", tmp_path / "out", "--average-with", str(tmp_path / "none"))
    assert r.returncode == 2 and "not a checkpoint directory" in r.stdout
    r = _export(
        tmp_path / "run", tmp_path / "out", "--average-with", str(tiny_checkpoint), "--average-share", "1.5"
    )
    assert r.returncode == 2 and "--average-share" in r.stdout
    assert not (tmp_path / "out").exists()


def test_export_from_a_checkpoint_given_by_init(tiny_checkpoint, tmp_path) -> None:
    """A shipped checkpoint has no run directory: ``--init`` names the exported one directly."""
    _perturbed(tiny_checkpoint, tmp_path / "other")
    r = _export(
        tmp_path / "no-run",
        tmp_path / "out",
        "--init",
        str(tiny_checkpoint),
        "--average-with",
        str(tmp_path / "other"),
        "--average-share",
        "0.75",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert not (tmp_path / "no-run").exists()
    _assert_average(tmp_path / "out", tiny_checkpoint, tmp_path / "other", 0.75)
    meta = json.loads((tmp_path / "out" / "config.json").read_text())["meta"]
    assert meta["averaged_with"] == f"0.75 of {tiny_checkpoint}, 0.25 of {tmp_path / 'other'}"
