"""DreamOn on the tiny fixture the tests build (tests/hf_dreamon.py): the publisher's loop
(``--decode published``: one token a step, exact cache) against the default decode (the effort's
rule, dual cache), in one run: answers that agree, steps, answer tokens and seconds.

Random weights decide nothing about quality; the figures say what the fast path changes. Needs the
test extra (the fixture is built with ``transformers``' tokenizer classes) and the HumanEval
infilling suite in ../shared/data (``--suite``). Run from the repository root:
``python docs/dreamon_fixture.py --tasks 8``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/ builds the fixture

from editserver.model.infer.engine import Engine  # noqa: E402
from editserver.model.infer.requests import FimRequest, SamplingOptions  # noqa: E402
from tests.hf_dreamon import make_dreamon  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--suite", default="../shared/data/fim/humaneval-multiline-infilling.jsonl.gz")
    p.add_argument("--tasks", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=32)
    args = p.parse_args()
    torch.set_num_threads(1)
    with gzip.open(args.suite, "rt") as f:
        tasks = [json.loads(line) for _, line in zip(range(args.tasks), f)]
    with tempfile.TemporaryDirectory() as tmp:
        engine = Engine.load(make_dreamon(Path(tmp)))
        runs = {}
        for name, published in (("published", True), ("default", False)):
            t0, out = time.perf_counter(), []
            for t in tasks:
                opts = SamplingOptions(published=published)
                out.append(engine.complete(FimRequest(t["prompt"], t["suffix"], args.max_tokens, opts)))
            runs[name] = (out, time.perf_counter() - t0)
    ref = runs["published"][0]
    for name, (out, secs) in runs.items():
        agree = sum(a.text == b.text for a, b in zip(out, ref))
        steps, tokens = sum(c.steps for c in out), sum(c.completion_tokens for c in out)
        print(f"{name:10} agree {agree}/{len(ref)}  steps {steps:4d}  tokens {tokens:4d}  {secs:.2f} s")


if __name__ == "__main__":
    main()
