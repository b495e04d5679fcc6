"""The wheel installs one import name, ``editserver``, and lives beside the ML ecosystem.

transformers depends on PyPI's ``kernels``; a wheel of ours that installed a top-level ``kernels``
(or ``lsp``, ``protocol``, ``model``) would write into the same ``site-packages`` folder and shadow
it. These tests build the wheel from a copy of the source, check its top-level names, then install
it into a fresh virtual environment whose other packages (torch, transformers, kernels) are this
environment's, and import both from the repository root and from elsewhere.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP = shutil.ignore_patterns(
    ".git",
    ".venv",
    "node_modules",
    "__pycache__",
    "*.egg-info",
    "build",
    "dist",
    "tests",
    "extensions",
    "runs",
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src") / "editserver-src"
    shutil.copytree(ROOT, src, ignore=SKIP)
    out = tmp_path_factory.mktemp("wheel")
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        str(out),
        str(src),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    (whl,) = out.glob("editserver-*.whl")
    return whl


def test_the_wheel_installs_only_the_editserver_import_name(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"editserver"}, tops
    (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
    assert zipfile.ZipFile(wheel).read(top_level).decode().split() == ["editserver"]
    # the rooms travel inside it, the shipped checkpoint too
    for room in ("model", "kernels", "lsp", "protocol", "server", "cli"):
        assert f"editserver/{room}/__init__.py" in names, room
    assert "editserver/model/checkpoints/default/model.safetensors" in names


def _fresh_env(tmp: Path, wheel: Path) -> Path:
    """A new virtual environment holding the wheel; torch, transformers and PyPI's kernels come
    from this environment's site-packages, named after the venv's own (so ours is found first)."""
    env = tmp / "venv"
    venv.EnvBuilder(with_pip=False).create(env)
    py = env / "bin" / "python"
    site = Path(
        subprocess.run(
            [py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "ecosystem.pth").write_text(sysconfig.get_path("purelib") + "\n")
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        "--no-index",
        "--target",
        str(site),
        str(wheel),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return py


PROBE = (
    "import kernels, editserver.kernels, editserver.lsp, editserver.protocol\n"
    "from transformers.integrations import hub_kernels\n"  # what failed when our kernels shadowed theirs
    "assert hasattr(kernels, 'CUDAProperties'), kernels.__file__\n"
    "assert 'site-packages' in kernels.__file__, kernels.__file__\n"
    "assert editserver.kernels.OPS, editserver.kernels.__file__\n"
    "print(kernels.__file__); print(editserver.__file__)\n"
)


@pytest.mark.parametrize("where", ["repository root", "elsewhere"])
def test_installed_beside_transformers_both_kernels_import(wheel, tmp_path, where):
    pytest.importorskip("transformers")
    py = _fresh_env(tmp_path, wheel)
    cwd = ROOT if where == "repository root" else tmp_path
    r = subprocess.run([py, "-c", PROBE], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    theirs, ours = r.stdout.split()
    assert Path(theirs).parent.name == "kernels" and Path(ours).parent.name == "editserver"
    if where == "elsewhere":
        assert str(tmp_path) in ours, "the wheel's own copy is imported"
    # `python -m` from either folder runs ours and leaves theirs alone
    r = subprocess.run(
        [py, "-m", "editserver.cli", "--version"], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0 and r.stdout.startswith("editserver "), r.stderr
