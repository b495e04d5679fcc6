"""DreamOn's loop at a published shape with random weights: the published plan (one token a step,
exact cache) against our default (the effort's rule, dual cache), on one row from a 4-mask start.

Random weights decide nothing about quality. So that the canvas really grows and every width change
pays its refresh, the lm_head row of the expand id is set along the prompt's mean final hidden state,
``--expand`` logits above the largest logit there: the gap grows to its bound, then the expand is
barred and other tokens fill it.
Prints and writes (``--json``) per plan: steps, the answer's length, wall ms and ms per step, and
whether the answers agree (one token a step from 4 masks takes 4 + 2 x expands steps). Run from the repository root: ``python docs/dreamon_step.py
--shape qwen2-7b --device cuda --dtype bfloat16`` (docs/gpu-check.sh).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import torch

from editserver.bench.kernels import SHAPES
from editserver.bench.step import _model
from editserver.model.infer.cache import DualCache, InPlaceNoCache, Rows
from editserver.model.infer.canvas_edit import ExpandDelete
from editserver.model.infer.config import InferenceConfig
from editserver.model.infer.loop_types import Tokens
from editserver.model.infer.plan import plan_for, published_plan
from editserver.model.infer.requests import SamplingOptions
from editserver.model.infer.sampler import denoise


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="qwen2-7b", choices=sorted(SHAPES))
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--suffix", type=int, default=64)
    p.add_argument("--bound", type=int, default=64, help="max_tokens: the gap's bound")
    p.add_argument("--expand", type=float, default=5.0, help="logits the expand row gains (docstring)")
    p.add_argument("--layers", type=int, default=None, help="build only this many layers")
    p.add_argument("--json", default=None)
    a = p.parse_args()
    shape = SHAPES[a.shape]
    shape = dataclasses.replace(shape, n_layers=a.layers) if a.layers else shape
    model = _model(shape, a.device, getattr(torch, a.dtype))
    V = model.cfg.vocab_size
    mask, eos, expand = V - 1, V - 2, V - 3  # as bench step's ids, the expand right before the mask
    g = torch.Generator().manual_seed(0)
    pre = torch.randint(0, V - 3, (1, a.context), generator=g).to(a.device)
    suf = torch.randint(0, V - 3, (1, a.suffix), generator=g).to(a.device)
    with torch.no_grad():  # the expand row along the mean normed hidden state (module docstring)
        h, _ = model.encode(torch.cat([pre, torch.full_like(pre[:, :4], mask), suf], dim=1))
        d = model.norm(h)[0].float().mean(0)  # [dim]
        top = float(model.head(h)[0].float().max())
        model.lm_head.weight[expand] = (d * (top + a.expand) / d.dot(d)).to(model.lm_head.weight.dtype)
    one = torch.ones(1, dtype=torch.long, device=a.device)
    rows = Rows(pre, one * a.context, None, None, suf, one * a.suffix)
    edit = ExpandDelete(expand, eos)
    opts = SamplingOptions()
    plans = {
        "published": published_plan("dreamon", opts, "fim", InPlaceNoCache(), edit),
        "default": plan_for(InferenceConfig(), opts, "fim", DualCache(), edit),
    }
    out = {}
    for name, plan in plans.items():
        sync()
        t0 = time.perf_counter()
        res = denoise(model, rows, a.bound, plan, Tokens(mask, eos), first_width=edit.start)
        sync()
        ms = 1000 * (time.perf_counter() - t0)
        n = int(res.lengths[0])
        out[name] = dict(
            steps=res.steps, length=n, ms=round(ms, 1), ms_per_step=round(ms / max(1, res.steps), 2)
        )
        out[name]["answer"] = res.tokens[0, :n].tolist()
    out["agree"] = out["published"].pop("answer") == out["default"].pop("answer")
    print(json.dumps({"shape": a.shape, "device": a.device, "dtype": a.dtype, **out}))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh)


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
