"""``editserver bench step``: milliseconds per denoising step of an open-weight-shaped model.

Design decisions:
- No download: a randomly initialised model of a published shape (``editserver bench kernels``'s
  ``SHAPES``, or ``tiny``) decodes an in-place FIM canvas through the real loop, dual cache and
  token choice (model/infer/sampler.py), so a step costs what it costs when serving, matmuls
  included. Random weights decide nothing about quality; the time per step does not depend on them.
- Backends side by side in one run: the Triton kernels against the PyTorch/SDPA path
  (``model.infer.ops.set_backend``), alternating per repetition so machine noise falls on both.
- One token per step (``TopKRule(1)``), so every repetition takes the same number of steps; the
  figure is the decode's wall time over its steps (the block refreshes of the dual cache included).
  Beside it, "later": the steps after the first, whose forward over the whole context (a one-step
  decode, timed in the same round) is a prefill's cost, not a step's: the floor compares with them.
- ``--quantize`` also takes ``packed`` (oneDNN's blocked layout for the same weights,
  model/infer/quant.py).
- The floor beside it: a batch-1 step reads every weight once (the embedding table aside: a step
  reads only its rows, unless the head is tied to it), so it takes at least weight bytes / memory
  bandwidth. The bandwidth is measured in the same run (a sum over a ``--bandwidth-mib`` tensor,
  best of five), so the ratio compares like with like on a busy machine.
- ``--reuse off,on,suffix`` adds the typing case: every decode of a batch size runs the same rows
  but for one more token typed at the end of the prefix (every variant types, so the contexts stay
  equal), so with a prefix store (model/infer/prefix.py) each refresh after the warm-up round
  recomputes the typed token, the canvas and, with ``on``, the suffix after it; ``suffix`` reuses
  that too (``--suffix`` sets its length: the cursor's place in the file).
- ``--shape llada-moe-7b-a1b`` is LLaDA-MoE's mixture of experts (model/infer/hf/moe.py) and
  ``dense-7b-as-llada-moe`` a dense model of the same total size (one SwiGLU as wide as all 64
  experts); ``--layers N`` builds fewer layers where the whole model does not fit in memory. For the
  MoE shape the run also prints what a step's canvas reads of the experts (``expert_reads``): the
  floor beside it counts every expert, which a 16-row canvas nearly reaches. ``llada2-mini`` is
  LLaDA2.0/2.1-mini's shape and routing (model/infer/hf/llada2.py), a block shape (below) with its
  experts, so it prints what a step reads of them too.
- ``--quantize none,int8`` times the bf16/fp32 weights against weight-only int8 (model/infer/quant.py)
  in the same interleaved rounds, each against its own floor.
- Block-diffusion shapes (``fast-dllm-v2-1.5b``, ``sdar-1.7b``, ...; bench/_step_shapes.py) decode on
  the block cache with their family's rule, one token per step as the in-place shapes do.
- ``--shape a,b,c``: several shapes in one run, every model built first and the rounds interleaved
  over shapes as over backends, so the machine's noise falls on all of them.
- Beside ms per step, "answer": the wall time of a one-line answer (an ``--answer``-token canvas,
  default 16, decoded to its end, the context's prefill included), each one typed token after the
  decode before it, so with ``--reuse on`` it is the answer after a keystroke with the head of the
  file reused. The last lines give its p50 per shape at the smallest batch (reuse ``on`` when
  timed) and each shape's ratio to the first: the figure "one-line answer of a block model after a
  keystroke, against the dual-cache model", from one command.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

from editserver.bench._step_shapes import BLOCK_SHAPES, block_model, decode_ms
from editserver.bench.kernels import SHAPES, OpShapes
from editserver.model.infer.hf.moe import MoeSpec

TINY = OpShapes(64, 4, 2, 16, 128, 512, 2)
# LLaDA-MoE-7B-A1B (docs/open-weights.md: 16 layers, hidden 2048, 16 heads, 64 experts of width 1024,
# 8 per token, vocabulary 157,184; all but the layer count from third-party notes, consistent with the
# 14.7 GB bf16 listing) and a dense model of the same total size: one SwiGLU of width 64 x 1024
MOE_SHAPE = OpShapes(2048, 16, 16, 128, 0, 157_184, 16, norm_eps=1e-5)
MOE_SHAPES = {
    "llada-moe-7b-a1b": (MOE_SHAPE, MoeSpec(n_experts=64, top_k=8, expert_dim=1024)),
    "dense-7b-as-llada-moe": (dataclasses.replace(MOE_SHAPE, ffn_dim=64 * 1024), None),
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("step", help="ms per denoising step of a random open-weight-shaped model")
    p.add_argument(
        "--shape",
        default="tiny",
        help=f"model shapes, comma-separated, timed interleaved (default tiny): "
        f"{', '.join(['tiny', *SHAPES, *MOE_SHAPES, *BLOCK_SHAPES])}",
    )
    p.add_argument("--layers", type=int, default=None, help="build only this many layers (memory)")
    p.add_argument("--batches", default="1,16", help="batch sizes, comma-separated (default 1,16)")
    p.add_argument(
        "--context",
        type=int,
        default=512,
        help="prefix tokens per row: the file before the cursor (default 512)",
    )
    p.add_argument(
        "--suffix", type=int, default=64, help="suffix tokens per row: the file after it (default 64)"
    )
    p.add_argument("--canvas", type=int, default=32, help="canvas tokens: steps per decode (default 32)")
    p.add_argument(
        "--answer",
        type=int,
        default=16,
        help="canvas of the one-line answer timed whole (default 16; 0: none)",
    )
    p.add_argument(
        "--backends", default="torch,triton", help="ops backends to compare (default torch,triton)"
    )
    p.add_argument("--device", default="auto", help="auto (cuda if present) | cpu | cuda")
    p.add_argument("--dtype", default=None, help="float32 | bfloat16 (default: bf16 on CUDA, fp32 on CPU)")
    p.add_argument("--repeat", type=int, default=3, help="timed rounds per variant and batch (default 3)")
    p.add_argument(
        "--quantize", default="none", help="weights to compare: none,int8,packed,w8a8 (default none)"
    )
    p.add_argument(
        "--reuse",
        default="off",
        help="context reuse to compare: off,on,suffix (on: the rows' context is in the prefix store, as "
        "while typing; suffix: the text after the cursor reused too; default off)",
    )
    p.add_argument(
        "--bandwidth-mib", type=int, default=1024, help="tensor read for the bandwidth (default 1024)"
    )
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    p.set_defaults(func=run)


def _model(shape: OpShapes, device: str, dtype, moe: MoeSpec | None = None):
    import torch

    from editserver.model.infer.hf.families import OpenConfig
    from editserver.model.infer.hf.model import OpenModel

    cfg = OpenConfig(
        family="dream", vocab_size=shape.vocab_size, dim=shape.dim, n_layers=shape.n_layers,
        n_heads=shape.n_heads, n_kv_heads=shape.n_kv_heads, head_dim=shape.head_dim,
        ffn_dim=shape.ffn_dim, rope_theta=1e6, norm_eps=shape.norm_eps, qkv_bias=True,
        tie_embeddings=False, max_position_embeddings=32768, shift=True, mask_id=shape.vocab_size - 1,
        max_seq_len=32768,
    )  # fmt: skip
    if moe is not None:  # LLaDA-MoE: q/k norms, no q/k/v bias, the routed block on every layer
        cfg = dataclasses.replace(cfg, family="llada-moe", qkv_bias=False, shift=False, qk_norm=True, moe=moe)
    torch.manual_seed(0)
    with torch.device(device):
        model = OpenModel(cfg)
    return model.to(dtype).eval()


def bandwidth(mib: int, device: str) -> float:
    """Bytes per second this machine reads: best of five sums over a ``mib`` MiB float32 tensor."""
    import torch

    x = torch.ones(mib * 2**18, device=device)  # 4 bytes each
    best = float("inf")
    for _ in range(5):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        float(x.sum())
        best = min(best, time.perf_counter() - t0)
    return x.numel() * 4 / best


def weight_bytes(model) -> int:
    """Bytes a batch-1 step reads: every parameter and buffer but the embedding table (a step reads
    only its rows), which a tied head (no ``lm_head``) reads whole."""
    import torch

    skip = {id(model.embed_tokens.weight)} if getattr(model, "lm_head", None) is not None else set()
    tensors = [t for t in [*model.parameters(), *model.buffers()] if id(t) not in skip]
    # oneDNN-packed weights (model/infer/quant.py PackedLinear) are plain attributes, not buffers
    tensors += [m.packed for m in model.modules() if isinstance(getattr(m, "packed", None), torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors)


def expert_reads(model, canvas: int) -> dict:
    """What one step's forward over a batch-1 ``canvas``-row span reads of the experts: the distinct
    experts its rows choose per layer (random weights: a router near uniform, so an upper estimate
    for a trained, skewed one), their bytes, all experts' bytes, and the uniform expectation
    E * (1 - (1 - k/E)^canvas) of distinct experts."""
    import torch

    from editserver.model.infer.hf.moe import MoE

    blocks = [m for m in model.modules() if isinstance(m, MoE)]
    chosen: list[int] = []
    hooks = [b.register_forward_hook(lambda b, a, o: chosen.append(b.route(a[0].reshape(-1, a[0].shape[-1]))[1].unique().numel())) for b in blocks]  # fmt: skip
    ids = torch.randint(0, model.cfg.vocab_size - 2, (1, canvas), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model(ids.to(model.embed_tokens.weight.device))
    for h in hooks:
        h.remove()
    spec = blocks[0].spec
    per_expert = sum(p.numel() * p.element_size() for p in blocks[0].experts[0].parameters())
    return {
        "canvas_rows": canvas,
        "experts": spec.n_experts,
        "top_k": spec.top_k,
        "distinct_per_layer": round(sum(chosen) / len(chosen), 2),
        "uniform_expectation": round(spec.n_experts * (1 - (1 - spec.top_k / spec.n_experts) ** canvas), 2),
        "expert_bytes_read": sum(chosen) * per_expert,
        "expert_bytes_total": len(blocks) * spec.n_experts * per_expert,
    }


def expert_line(e: dict) -> str:
    return (
        f"experts: a {e['canvas_rows']}-row canvas chooses {e['distinct_per_layer']} of {e['experts']} per layer "
        f"(uniform routing: {e['uniform_expectation']}); a step reads {e['expert_bytes_read'] / 1e9:.2f} GB of "
        f"{e['expert_bytes_total'] / 1e9:.2f} GB of experts"
    )


def _timed(models, batch: int, args, device: str, variants, stores, specs) -> dict:
    """Per variant: [ms/step over the decode], [ms of a one-step decode: the forward over the whole
    context], [ms/step of the steps after it], [ms of a one-line answer]; rounds interleaved, the
    first one a warm-up. Each decode follows the one before it on its store by one typed token."""
    from editserver.model.infer import ops

    times: dict = {v: ([], [], [], [], []) for v in variants}
    for r in range(args.repeat + 1):  # the first round warms up (compilation, caches)
        for v in variants if r % 2 == 0 else variants[::-1]:
            ops.set_backend(v[1])
            model, store, spec = models[v[0], v[2]], stores[v], specs[v[0]]
            kw = {"rule": spec.rule(spec.block), "spm": spec.spm} if spec else {}
            ms, steps = decode_ms(model, batch, args, device, store, typed=3 * r, **kw)
            first, _ = decode_ms(model, batch, args, device, store, canvas=1, typed=3 * r + 1, **kw)
            answer, answer_steps = 0.0, 0
            if args.answer:
                answer, answer_steps = decode_ms(
                    model, batch, args, device, store, args.answer, 3 * r + 2, **kw
                )
            if r:
                times[v][0].append(ms / steps)
                times[v][1].append(first)
                times[v][2].append(max(ms - first, 0.0) / max(steps - 1, 1))
                times[v][3].append(answer)
                times[v][4].append(answer_steps)
    ops.set_backend("auto")
    return times


def _build(name: str, args, device: str, dtype, quants: list[str]) -> tuple[dict, object, dict | None]:
    """({quant: model}, its block shape or None, what a step reads of the experts or None) of a shape."""
    from editserver.model.infer.quant import quantize

    spec = BLOCK_SHAPES.get(name)
    shape, moe = MOE_SHAPES.get(name, (TINY if name == "tiny" else SHAPES.get(name), None))
    shape = spec.ops if spec else shape
    if args.layers:
        shape = dataclasses.replace(shape, n_layers=args.layers)
    make = (
        (lambda: block_model(spec, shape, device, dtype))
        if spec
        else (lambda: _model(shape, device, dtype, moe))
    )
    models = {q: quantize(make(), q) for q in quants}
    routed = moe is not None or (spec is not None and spec.moe is not None)
    return models, spec, expert_reads(models[quants[0]], args.canvas) if routed else None


def _answer_lines(out: dict, args, shapes: list[str], variants, names, reuse: list[str]) -> list[str]:
    """The one-line answer's p50 per shape and backend at the smallest batch (reuse ``on`` if timed)."""
    batch = min(out["answer_ms"])
    use = "on" if "on" in reuse else reuse[0]
    per, steps = {}, {}
    for v in variants:
        if v[3] == use and v[2] == variants[0][2]:
            per.setdefault(v[0], {})[v[1]] = out["answer_ms"][batch][names[v]]
            steps[v[0]] = out["answer_steps"][batch][names[v]]
    out["answer"] = {"batch": batch, "reuse": use, "tokens": args.answer, "p50_ms": per}
    suffix = f" + suffix {args.suffix}" if args.suffix else ""
    lines = [
        f"one-line answer ({args.answer} tokens, the context's prefill included) after one typed token, "
        f"context {args.context}{suffix}, reuse {use}, batch {batch}, p50 of {args.repeat}:"
    ]
    base = per[shapes[0]]
    for s in shapes:
        kind = f"block {BLOCK_SHAPES[s].block}, block cache" if s in BLOCK_SHAPES else "in place, dual cache"
        kind += f", {steps[s]:g} steps"
        lines.append(f"  {s:<22} {'(' + kind + ')':<36} " + "  ".join(
            f"{b} {ms:9.1f} ms" + (f" x{ms / base[b]:.2f}" if s != shapes[0] and base.get(b) else "")
            for b, ms in per[s].items()
        ))  # fmt: skip
    return lines


def run(args: argparse.Namespace) -> int:
    import torch

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    dtype = getattr(torch, args.dtype or ("bfloat16" if device == "cuda" else "float32"))
    backends = [b for b in args.backends.split(",") if b]
    if "triton" in backends and device != "cuda":
        print("editserver bench step: the Triton backend needs CUDA here; timing torch only", file=sys.stderr)
        backends = [b for b in backends if b != "triton"]
    shapes = [s for s in args.shape.split(",") if s]
    known = ["tiny", *SHAPES, *MOE_SHAPES, *BLOCK_SHAPES]
    reuse = [x for x in args.reuse.split(",") if x]
    for bad, msg in (
        ([s for s in shapes if s not in known] or not shapes, f"--shape takes {', '.join(known)}, comma-separated"),
        (not set(reuse) <= {"off", "on", "suffix"}, "--reuse takes off, on and suffix, comma-separated"),
    ):  # fmt: skip
        if bad:
            print(f"editserver bench step: error: {msg}", file=sys.stderr)
            return 2
    quants = [q for q in args.quantize.split(",") if q]
    multi = len(shapes) > 1
    models, specs, experts = {}, {}, {}
    try:
        for s in shapes:
            built, specs[s], experts[s] = _build(s, args, device, dtype, quants)
            models.update({(s, q): m for q, m in built.items()})
    except ValueError as e:
        print(f"editserver bench step: error: {e}", file=sys.stderr)
        return 2
    bw = bandwidth(args.bandwidth_mib, device)
    floors = {k: 1000 * weight_bytes(m) / bw for k, m in models.items()}
    label = {k: f"{k[0]}/{k[1]}" if multi else k[1] for k in models}
    out: dict = {"shape": args.shape, "shapes": shapes, "device": device, "dtype": str(dtype), "rows": {}}
    out["bandwidth_gb_s"] = round(bw / 1e9, 2)
    out["floor_ms"] = {label[k]: round(f, 6) for k, f in floors.items()}  # tiny shapes read microseconds
    for s, e in experts.items():
        if e is not None:
            out["experts" if not multi else f"experts/{s}"] = e
            print(expert_line(e))
    print(f"bandwidth {bw / 1e9:.1f} GB/s; floor (weight bytes / bandwidth): "
          + ", ".join(f"{label[k]} {f:.1f} ms" for k, f in floors.items()))  # fmt: skip
    from editserver.model.infer.prefix import PrefixStore

    variants = [(s, b, q, u) for s in shapes for b in backends for q in quants for u in reuse]
    stores = {v: PrefixStore(2**34, suffix=v[3] == "suffix") if v[3] != "off" else None for v in variants}
    names = {
        v: "/".join([
            *([v[0]] if multi else []), v[1], *([v[2]] if len(quants) > 1 else []),
            *([v[3]] if len(reuse) > 1 else []),
        ])
        for v in variants
    }  # fmt: skip
    width = max(12, *(len(n) for n in names.values()))
    print(
        f"{'batch':>5} {'variant':<{width}} {'ms/step':>9} {'x floor':>7} {'later':>9} {'x floor':>7} {'answer ms':>10}"
    )
    for key in ("first_ms", "later_ms", "answer_ms", "answer_steps"):
        out[key] = {}
    for batch in [int(x) for x in args.batches.split(",") if x]:
        times = _timed(models, batch, args, device, variants, stores, specs)
        for key, i in (("rows", 0), ("first_ms", 1), ("later_ms", 2), ("answer_ms", 3), ("answer_steps", 4)):
            out[key][batch] = {names[v]: round(statistics.median(t[i]), 3) for v, t in times.items()}
        for v in variants:
            step, later, floor = (
                out["rows"][batch][names[v]],
                out["later_ms"][batch][names[v]],
                floors[v[0], v[2]],
            )
            print(f"{batch:5d} {names[v]:<{width}} {step:9.2f} {step / floor:7.2f} {later:9.2f} {later / floor:7.2f}"
                  f" {out['answer_ms'][batch][names[v]]:10.1f}")  # fmt: skip
    print("later: ms per step after the first, whose forward over the whole context is timed alone")
    if args.answer and out["answer_ms"]:
        print("\n".join(_answer_lines(out, args, shapes, variants, names, reuse)))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0
