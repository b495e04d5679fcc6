"""Loading a sharded open-weight directory holds one copy of the weights: peak RSS against weight bytes.

The load runs in a fresh subprocess (so earlier tests' allocations do not hide its peak). Importing
torch peaks above what it keeps, so the process first resets its peak (``/proc/self/clear_refs``,
Linux) and the peak's growth over the resident size before loading (``VmHWM`` against ``VmRSS``;
``resource.getrusage`` where the reset is refused) is compared with the bytes of tensor data.
Building any module on the meta device first imports torch's Python meta kernels (about 150 MB
resident, once per process, whatever the model's size); the probe pays that before measuring and
reports it apart as the fixed overhead. Every weight is read once after loading, so the peak counts
them resident however the shards were mapped.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from editserver.model.infer.hf.loader import weight_bytes
from tests.hf_models import make_dream
from tests.lsp.conftest import REPO, quiet_env

PROBE = """
import json, resource, sys, torch
from editserver.model.infer.loader import load_checkpoint
torch.set_num_threads(1)

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024

start = status("VmRSS")
with torch.device("meta"):
    torch.nn.Embedding(2, 2)  # the meta kernels' one-time import, paid before measuring
fixed = status("VmRSS") - start
try:
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # reset the peak resident size to the current one
    before, peak = status("VmRSS"), lambda: status("VmHWM")
except OSError:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
ck = load_checkpoint(sys.argv[1], dtype=torch.float32)
params = sum(p.numel() for p in ck.model.parameters())
float(sum(p.float().sum() for p in ck.model.parameters()))  # every weight read: resident now
print(json.dumps({"peak_growth": peak() - before, "params": params, "fixed": fixed}))
"""


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    d = tmp_path_factory.mktemp("big") / "dream"
    make_dream(d, shard="12MB", dim=512, layers=4, ffn=1536, vocab=4096)
    return d


def test_sharded_load_peak_memory_is_about_one_copy(sharded):
    shards = sorted(sharded.glob("model-*-of-*.safetensors"))
    assert len(shards) >= 3
    weights = weight_bytes(sharded)
    assert weights > 40e6  # tens of MB: large enough that a second copy would show
    r = subprocess.run(
        [sys.executable, "-c", PROBE, str(sharded)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=quiet_env(),
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["params"] * 4 == weights
    ratio = out["peak_growth"] / weights
    print(
        f"peak RSS growth {out['peak_growth'] / 1e6:.1f} MB for {weights / 1e6:.1f} MB of weights: {ratio:.2f}x"
    )
    assert out["peak_growth"] < 1.6 * weights + 32e6, f"peak growth {ratio:.2f}x the weights"
