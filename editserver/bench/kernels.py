"""``editserver bench kernels``: each Triton kernel against its PyTorch form (attention also against
``scaled_dot_product_attention``), side by side in one run, then end-to-end denoising tokens/s.

Design decisions:
- Shapes are the benchmarked model's own (heads, head dim, width, FFN width, vocabulary, from the
  checkpoint's config, or the ``small`` preset when no checkpoint is there), or with ``--shape`` those
  of an open-weight model (Qwen2-0.5B-, Qwen2-7B/Dream-7B- or LLaDA-8B-like; only the op shapes, no
  weights), at the sizes a denoising step sees: a canvas of queries (default 64, the FIM default)
  against contexts of several lengths, at batch 1 and batch 16.
- Per step: the ops' medians are summed as one denoising step runs them (per layer two
  add+RMSNorms, rotary, attention, SwiGLU; then the final norm and token choice), per backend. This
  is the hot-path ops' share of a step only: the matmuls are not timed here.
- Every variant of an op runs on the same inputs in the same process, one after the other; the
  table gives medians and speed ratios against the PyTorch path, never absolute claims.
- Attention columns: ``triton`` (context and block read in place), ``torch`` (what the model runs
  without Triton: concatenate the cache and the block, then SDPA), ``sdpa`` (SDPA alone on keys that
  are already concatenated: the fused kernel's own speed) and ``reference`` (explicit-math oracle of
  the tests; skipped where its score matrix would exceed ~1 GiB).
- On CPU, Triton needs CUDA (its interpreter is a correctness tool, thousands of times slower), so the
  Triton columns say so and the PyTorch paths are still timed: the command runs everywhere.
- End to end (only at the checkpoint's own shapes): ``Engine.complete_batch`` on FIM requests cut from this repository's own source files,
  greedy, at batch 1 and 16; on CUDA once per backend (``auto`` = Triton, ``torch``). Output tokens/s
  counts the tokens each completion returns (up to its end-of-text), so it depends on the model as
  much as on the kernels; ms per denoising step (one forward over the whole batch's canvas plus token
  choice) does not, and is reported next to it.
- A training run may share the CPU: ``--threads`` caps torch's threads and CPU defaults are small.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

PKG = Path(__file__).resolve().parents[1]  # the installed editserver package


@dataclass(frozen=True)
class OpShapes:
    """The widths the hot-path ops see; ``n_layers`` only scales the per-step sums."""

    dim: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    vocab_size: int
    n_layers: int
    norm_eps: float = 1e-6


# shapes of open-weight models (from their published configs); "model" means the checkpoint's own
SHAPES = {
    "qwen2-0.5b": OpShapes(896, 14, 2, 64, 4864, 151_936, 24),
    "qwen2-7b": OpShapes(3584, 28, 4, 128, 18944, 152_064, 28),  # Dream-7B shares these
    "llada-8b": OpShapes(4096, 32, 32, 128, 12288, 126_464, 32),
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("kernels", help="Triton kernels vs PyTorch and SDPA; end-to-end denoising tokens/s")
    p.add_argument("--model", type=Path, default=None, help="checkpoint directory (default: shipped)")
    p.add_argument(
        "--shape",
        choices=["model", *SHAPES],
        default="model",
        help="op shapes: the checkpoint's own (model, default) or an open-weight model's "
        "(kernels only; the end-to-end run needs the checkpoint's shapes)",
    )
    p.add_argument("--device", default="auto", help="auto (cuda if present) | cpu | cuda")
    p.add_argument(
        "--dtype", default=None, help="float32 | bfloat16 | float16 (default: bf16 on CUDA, fp32 on CPU)"
    )
    p.add_argument(
        "--contexts",
        default=None,
        help="context lengths, comma-separated (default: 512,2048[,8192,32704 on CUDA])",
    )
    p.add_argument("--batches", default="1,16", help="batch sizes, comma-separated")
    p.add_argument("--canvas", type=int, default=64, help="queries per row (canvas length)")
    p.add_argument(
        "--repeat", type=int, default=None, help="timed repetitions per variant (default 30 CUDA, 5 CPU)"
    )
    p.add_argument("--e2e-repeat", type=int, default=3, help="timed complete_batch calls per batch size")
    p.add_argument("--max-tokens", type=int, default=64, help="canvas length of the end-to-end requests")
    p.add_argument("--skip-kernels", action="store_true", help="skip the per-op timings")
    p.add_argument("--skip-e2e", action="store_true", help="skip the end-to-end decode timings")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = default)")
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    p.set_defaults(func=run)


# ---- timing ------------------------------------------------------------------------------------
def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median_ms(fn, device, repeat: int) -> float:
    """Median wall time of fn in ms; on CUDA each sample averages 10 back-to-back calls."""
    inner = 10 if device.type == "cuda" else 1
    for _ in range(2 if device.type == "cuda" else 1):
        fn()
    samples = []
    for _ in range(repeat):
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        _sync(device)
        samples.append((time.perf_counter() - t0) * 1e3 / inner)
    return statistics.median(samples)


# ---- kernel micro-benchmarks -------------------------------------------------------------------
class _Table:
    """Times each variant of one op on the same inputs, prints a row and keeps it."""

    def __init__(self, device, repeat: int):
        self.device, self.repeat, self.rows = device, repeat, []

    def add(self, op: str, shape: str, variants: dict, **where) -> None:
        import torch

        ms = {}
        for name, fn in variants.items():
            if fn is None or fn is False:
                continue
            with torch.no_grad():
                ms[name] = round(_median_ms(fn, self.device, self.repeat), 4)
        self.rows.append({"op": op, "shape": shape, **where, "ms": ms})
        base = ms.get("torch")
        cells = "  ".join(
            f"{k}={v:.3f}ms" + (f" ({base / v:.2f}x)" if base and k != "torch" else "") for k, v in ms.items()
        )
        print(f"  {op:<17} {shape:<34} {cells}", flush=True)


def _kernel_rows(cfg: OpShapes, device, dtype, contexts, batches, canvas, repeat, triton_ok) -> list[dict]:
    import importlib

    import torch
    import torch.nn.functional as F

    from editserver.kernels.reference import attention_reference as reference
    from editserver.model.infer import ops

    att, rms, rot, swi, conf = (
        importlib.import_module(f"editserver.kernels.{n}") if triton_ok else None
        for n in ("attention", "rmsnorm", "rotary", "swiglu", "token_confidence")
    )
    H, Hkv, D = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    table = _Table(device, repeat)

    def mk(*shape, dt=dtype):
        return torch.randn(*shape, device=device, dtype=dt)

    def softmax_max(logits, pen):
        return torch.softmax(logits.float() - pen[:, None], -1).max(-1)

    ops.set_backend("torch")
    try:
        for B in batches:
            T = B * canvas
            x, h, w = mk(T, cfg.dim), mk(T, cfg.dim), mk(cfg.dim)
            table.add("add+rmsnorm", f"[{T}, {cfg.dim}]", {
                "torch": partial(ops.add_rmsnorm, x, h, w, cfg.norm_eps),
                "triton": rms and partial(rms.rmsnorm, x, w, cfg.norm_eps, residual=h),
            }, batch=B)  # fmt: skip
            q, k = mk(B, canvas, H, D), mk(B, canvas, Hkv, D)
            cos, sin = mk(B, canvas, D // 2, dt=torch.float32), mk(B, canvas, D // 2, dt=torch.float32)
            table.add("rotary q+k", f"q[{B}, {canvas}, {H}, {D}]", {
                "torch": partial(ops.rotary, q, k, cos, sin),
                "triton": rot and partial(rot.rotary, q, k, cos, sin),
            }, batch=B)  # fmt: skip
            g, u = mk(T, cfg.ffn_dim), mk(T, cfg.ffn_dim)
            table.add("swiglu", f"[{T}, {cfg.ffn_dim}]", {
                "torch": partial(ops.swiglu, g, u), "triton": swi and partial(swi.swiglu, g, u),
            }, batch=B)  # fmt: skip
            logits, pen = mk(B, canvas, cfg.vocab_size), torch.zeros(B, cfg.vocab_size, device=device)
            table.add("token_confidence", f"[{B}, {canvas}, {cfg.vocab_size}]", {
                "torch": partial(ops.token_confidence, logits, pen),
                "triton": conf and partial(conf.token_confidence, logits, pen),
                "softmax+max": partial(softmax_max, logits, pen),
            }, batch=B)  # fmt: skip
            del logits, pen, g, u
            for Lc in contexts:
                qa = mk(B, canvas, H, D).transpose(1, 2)  # [B, H, N, D] as the model's projection gives it
                kc, vc = mk(B, Hkv, Lc, D), mk(B, Hkv, Lc, D)
                kb, vb = mk(B, Hkv, canvas, D), mk(B, Hkv, canvas, D)
                k_all, v_all = torch.cat([kc, kb], 2), torch.cat([vc, vb], 2)
                small = B * H * canvas * (Lc + canvas) * 4 < 2**30  # the reference's score matrix
                table.add("attention", f"B={B} H={H}/{Hkv} D={D} N={canvas} ctx={Lc}", {
                    "torch": partial(ops.attention, qa, kb, vb, past=(kc, vc)),
                    "triton": att and partial(att.attention, qa, kc, vc, kb, vb),
                    "sdpa": partial(F.scaled_dot_product_attention, qa, k_all, v_all, enable_gqa=H != Hkv),
                    "reference": small and partial(reference, qa, kc, vc, kb, vb),
                }, batch=B, context=Lc)  # fmt: skip
    finally:
        ops.set_backend("auto")
    return table.rows


def per_step(rows: list[dict], n_layers: int) -> list[dict]:
    """The ops' share of one denoising step per (batch, context) and backend: per layer two
    add+RMSNorms, rotary, attention and SwiGLU, then the final norm (timed as add+RMSNorm) and token
    choice. ``sdpa`` is the ``torch`` sum with attention timed on keys already joined (no copy)."""
    out = []
    for att in (r for r in rows if r["op"] == "attention"):
        B = att["batch"]
        by_op = {r["op"]: r["ms"] for r in rows if r.get("batch") == B and "context" not in r}
        sums = {}
        for backend, att_key in (("triton", "triton"), ("torch", "torch"), ("sdpa", "sdpa")):
            point = "triton" if backend == "triton" else "torch"
            need = [by_op.get(op, {}).get(point) for op in ("add+rmsnorm", "rotary q+k", "swiglu")]
            tail = [by_op.get("add+rmsnorm", {}).get(point), by_op.get("token_confidence", {}).get(point)]
            if att_key not in att["ms"] or None in need or None in tail:
                continue
            layer = 2 * need[0] + need[1] + need[2] + att["ms"][att_key]
            sums[backend] = round(n_layers * layer + sum(tail), 3)
        out.append({"batch": B, "context": att["context"], "layers": n_layers, "ms": sums})
    return out


# ---- end to end --------------------------------------------------------------------------------
def _fim_requests(n: int, max_tokens: int, seed: int = 0):
    """FIM requests cut at line boundaries of this repository's own Python files (deterministic)."""
    from editserver.model.infer.engine import FimRequest

    files = sorted(p for d in ("model/infer", "server", "kernels") for p in (PKG / d).glob("*.py"))
    texts = [t for t in (p.read_text(encoding="utf-8") for p in files) if t.count("\n") > 40]
    rng = random.Random(seed)
    reqs = []
    for i in range(n):
        lines = texts[i % len(texts)].splitlines(keepends=True)
        cut = rng.randrange(20, len(lines) - 5)
        reqs.append(
            FimRequest("".join(lines[max(0, cut - 40) : cut]), "".join(lines[cut + 1 : cut + 12]), max_tokens)
        )
    return reqs


def _e2e_rows(model_dir, device, dtype, batches, max_tokens, repeat, backends) -> list[dict]:

    from editserver.model.infer import ops
    from editserver.model.infer.engine import Engine
    from editserver.model.infer.loader import load_checkpoint

    engine = Engine(load_checkpoint(model_dir, device=str(device), dtype=dtype), str(device))
    rows = []
    for B in batches:
        reqs = _fim_requests(B, max_tokens)
        for backend in backends:
            ops.set_backend(backend)
            try:
                engine.complete_batch(reqs)  # warm-up (Triton compiles here)
                out_tokens = steps = 0
                _sync(device)
                t0 = time.perf_counter()
                for _ in range(repeat):
                    comps = engine.complete_batch(reqs)
                    out_tokens += sum(c.completion_tokens for c in comps)
                    steps += comps[0].steps
                _sync(device)
                dt = time.perf_counter() - t0
            finally:
                ops.set_backend("auto")
            row = {
                "batch": B,
                "backend": backend,
                "output_tokens_per_s": round(out_tokens / dt, 1),
                "steps_per_s": round(steps / dt, 2),
                "ms_per_call": round(dt * 1e3 / repeat, 2),
                "steps_per_call": round(steps / repeat, 1),
                "ms_per_step": round(dt * 1e3 / max(1, steps), 3),
                "mean_output_tokens": round(out_tokens / (repeat * B), 1),
            }
            rows.append(row)
            print(
                f"  batch {B:>3} {backend:<6} {row['output_tokens_per_s']:>9.1f} output tok/s  "
                f"{row['ms_per_step']:>9.2f} ms/step  {row['ms_per_call']:>8.1f} ms/call  "
                f"{row['steps_per_call']:>5.1f} steps  {row['mean_output_tokens']:>5.1f} tokens/request",
                flush=True,
            )
    return rows


def _device_dtype(args: argparse.Namespace):
    """(device, dtype), or an error message."""
    import torch

    name = "cuda" if args.device == "auto" and torch.cuda.is_available() else args.device
    device = torch.device("cpu" if name == "auto" else name)
    if device.type == "cuda" and not torch.cuda.is_available():
        return "CUDA was asked for but is not available"
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"), None)
    if not isinstance(dtype, torch.dtype):
        return f"unknown dtype {args.dtype!r}"
    return device, dtype


def _shapes(args: argparse.Namespace) -> tuple[OpShapes, str, Path, bool]:
    """(op shapes, where they come from, checkpoint dir, whether that checkpoint exists)."""
    from editserver.model.infer.checkpoint import DEFAULT_CHECKPOINT
    from editserver.model.infer.config import PRESETS, ModelConfig

    model_dir = args.model or DEFAULT_CHECKPOINT
    have_ckpt = (Path(model_dir) / "config.json").is_file()
    if args.shape != "model":
        return SHAPES[args.shape], f"--shape {args.shape}", model_dir, have_ckpt
    cfg = (
        ModelConfig.from_dict(json.loads((Path(model_dir) / "config.json").read_text())["model"])
        if have_ckpt
        else PRESETS["small"]
    )
    shapes = OpShapes(
        cfg.dim,
        cfg.n_heads,
        cfg.n_kv_heads,
        cfg.head_dim,
        cfg.ffn_dim,
        cfg.vocab_size,
        cfg.n_layers,
        cfg.norm_eps,
    )
    return (
        shapes,
        str(model_dir) if have_ckpt else "the small preset (no checkpoint found)",
        model_dir,
        have_ckpt,
    )


def _print_per_step(steps: list[dict]) -> None:
    print("per denoising step, hot-path ops only (no matmuls): layers x (2 add+rmsnorm, rotary, attention,")
    print("swiglu) + final norm + token_confidence; sdpa = the torch path with attention on pre-joined keys:")
    for s in steps:
        base = s["ms"].get("torch")
        cells = "  ".join(
            f"{k}={v:.3f}ms" + (f" ({base / v:.2f}x)" if base and k != "torch" else "")
            for k, v in s["ms"].items()
        )
        print(f"  batch {s['batch']:>3} ctx {s['context']:>6} ({s['layers']} layers)  {cells}", flush=True)


def run(args: argparse.Namespace) -> int:
    import torch

    from editserver.model.infer import ops

    if args.threads:
        torch.set_num_threads(args.threads)
    got = _device_dtype(args)
    if isinstance(got, str):
        print(got)
        return 2
    device, dtype = got
    triton_ok = device.type == "cuda" and ops._has_triton()
    cuda_name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    default_contexts = "512,2048,8192,32704" if device.type == "cuda" else "512,2048"
    contexts = [int(c) for c in (args.contexts or default_contexts).split(",")]
    batches = [int(b) for b in args.batches.split(",")]
    repeat = args.repeat or (30 if device.type == "cuda" else 5)
    cfg, source, model_dir, have_ckpt = _shapes(args)
    print(
        f"device: {cuda_name or 'cpu'} ({device}), dtype {str(dtype).removeprefix('torch.')}, "
        f"torch threads {torch.get_num_threads()}"
    )
    if not triton_ok:
        why = "Triton is not importable" if device.type == "cuda" else "Triton kernels need CUDA"
        print(f"{why}: Triton columns are absent; the PyTorch paths are timed")
    print(
        f"op shapes from {source}: dim {cfg.dim}, heads {cfg.n_heads}/{cfg.n_kv_heads}, head dim "
        f"{cfg.head_dim}, ffn {cfg.ffn_dim}, vocab {cfg.vocab_size}, layers {cfg.n_layers}"
    )
    result = {
        "device": cuda_name or "cpu",
        "dtype": str(dtype),
        "triton": triton_ok,
        "threads": torch.get_num_threads(),
        "shape": {"name": args.shape, **cfg.__dict__},
    }
    if not args.skip_kernels:
        print(f"kernels (median of {repeat}; ratio = torch time / variant time, >1 is faster):")
        result["kernels"] = _kernel_rows(
            cfg, device, dtype, contexts, batches, args.canvas, repeat, triton_ok
        )
        result["per_step"] = per_step(result["kernels"], cfg.n_layers)
        _print_per_step(result["per_step"])
    if not args.skip_e2e:
        if args.shape != "model":
            print(f"end to end: skipped, --shape {args.shape} has no checkpoint (the default shape runs it)")
        elif not have_ckpt:
            print(f"end to end: skipped, no checkpoint at {model_dir} (pass --model DIR)")
        else:
            backends = ["auto", "torch"] if triton_ok else ["torch"]
            print(
                f"end to end: Engine.complete_batch, FIM, greedy, {args.max_tokens}-token canvas, "
                f"{args.e2e_repeat} calls each:"
            )
            result["e2e"] = _e2e_rows(
                model_dir, device, dtype, batches, args.max_tokens, args.e2e_repeat, backends
            )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0
