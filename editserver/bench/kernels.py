"""``editserver bench kernels``: each Triton kernel against its PyTorch form (attention also against
``scaled_dot_product_attention``), side by side in one run, then end-to-end denoising tokens/s.

Design decisions:
- Shapes are the benchmarked model's own (heads, head dim, width, FFN width, vocabulary, from the
  checkpoint's config, or the ``small`` preset when no checkpoint is there) at the sizes a denoising
  step sees: a canvas of queries (default 64, the FIM default) against contexts of several lengths,
  at batch 1 and batch 16.
- Every variant of an op runs on the same inputs in the same process, one after the other; the
  table gives medians and speed ratios against the PyTorch path, never absolute claims.
- Attention columns: ``triton`` (context and block read in place), ``torch`` (what the model runs
  without Triton: concatenate the cache and the block, then SDPA), ``sdpa`` (SDPA alone on keys that
  are already concatenated: the fused kernel's own speed) and ``reference`` (explicit-math oracle of
  the tests; skipped where its score matrix would exceed ~1 GiB).
- On CPU, Triton needs CUDA (its interpreter is a correctness tool, thousands of times slower), so the
  Triton columns say so and the PyTorch paths are still timed: the command runs everywhere.
- End to end: ``Engine.complete_batch`` on FIM requests cut from this repository's own source files,
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
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("kernels", help="Triton kernels vs PyTorch and SDPA; end-to-end denoising tokens/s")
    p.add_argument("--model", type=Path, default=None, help="checkpoint directory (default: shipped)")
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
    p.add_argument("--skip-kernels", action="store_true")
    p.add_argument("--skip-e2e", action="store_true")
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
def _kernel_rows(cfg, device, dtype, contexts, batches, canvas, repeat, triton_ok) -> list[dict]:
    import torch
    import torch.nn.functional as F

    from model import ops

    def triton_mod(name):
        import importlib

        return importlib.import_module(f"kernels.{name}") if triton_ok else None

    att, rms, rot, swi, conf = (
        triton_mod(n) for n in ("attention", "rmsnorm", "rotary", "swiglu", "token_confidence")
    )
    try:
        from kernels.attention import attention_reference as reference  # imports Triton, launches nothing
    except ImportError:
        reference = None
    H, Hkv, D = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    rows: list[dict] = []

    def add(op, shape, variants: dict):
        ms = {}
        for name, fn in variants.items():
            if fn is None:
                continue
            with torch.no_grad():
                ms[name] = round(_median_ms(fn, device, repeat), 4)
        rows.append({"op": op, "shape": shape, "ms": ms})
        base = ms.get("torch")
        cells = "  ".join(
            f"{k}={v:.3f}ms" + (f" ({base / v:.2f}x)" if base and k != "torch" else "") for k, v in ms.items()
        )
        print(f"  {op:<17} {shape:<34} {cells}", flush=True)

    def mk(*shape, dt=dtype):
        return torch.randn(*shape, device=device, dtype=dt)

    def softmax_max(logits, pen):
        return torch.softmax(logits.float() - pen[:, None], -1).max(-1)

    ops.set_backend("torch")
    try:
        for B in batches:
            T = B * canvas
            x, h, w = mk(T, cfg.dim), mk(T, cfg.dim), mk(cfg.dim)
            add(
                "add+rmsnorm",
                f"[{T}, {cfg.dim}]",
                {
                    "torch": partial(ops.add_rmsnorm, x, h, w, cfg.norm_eps),
                    "triton": rms and partial(rms.rmsnorm, x, w, cfg.norm_eps, residual=h),
                },
            )
            q, k = mk(B, canvas, H, D), mk(B, canvas, Hkv, D)
            cos, sin = mk(B, canvas, D // 2, dt=torch.float32), mk(B, canvas, D // 2, dt=torch.float32)
            add(
                "rotary q+k",
                f"q[{B}, {canvas}, {H}, {D}]",
                {
                    "torch": partial(ops.rotary, q, k, cos, sin),
                    "triton": rot and partial(rot.rotary, q, k, cos, sin),
                },
            )
            g, u = mk(T, cfg.ffn_dim), mk(T, cfg.ffn_dim)
            add(
                "swiglu",
                f"[{T}, {cfg.ffn_dim}]",
                {
                    "torch": partial(ops.swiglu, g, u),
                    "triton": swi and partial(swi.swiglu, g, u),
                },
            )
            logits, pen = mk(B, canvas, cfg.vocab_size), torch.zeros(B, cfg.vocab_size, device=device)
            add(
                "token_confidence",
                f"[{B}, {canvas}, {cfg.vocab_size}]",
                {
                    "torch": partial(ops.token_confidence, logits, pen),
                    "triton": conf and partial(conf.token_confidence, logits, pen),
                    "softmax+max": partial(softmax_max, logits, pen),
                },
            )
            for Lc in contexts:
                qa = mk(B, canvas, H, D).transpose(1, 2)  # [B, H, N, D] as the model's projection gives it
                kc, vc = mk(B, Hkv, Lc, D), mk(B, Hkv, Lc, D)
                kb, vb = mk(B, Hkv, canvas, D), mk(B, Hkv, canvas, D)
                k_all, v_all = torch.cat([kc, kb], 2), torch.cat([vc, vb], 2)
                small = B * H * canvas * (Lc + canvas) * 4 < 2**30  # the reference's score matrix
                add(
                    "attention",
                    f"B={B} H={H}/{Hkv} D={D} N={canvas} ctx={Lc}",
                    {
                        "torch": partial(ops.attention, qa, kb, vb, past=(kc, vc)),
                        "triton": att and partial(att.attention, qa, kc, vc, kb, vb),
                        "sdpa": partial(
                            F.scaled_dot_product_attention, qa, k_all, v_all, enable_gqa=H != Hkv
                        ),
                        "reference": reference and small and partial(reference, qa, kc, vc, kb, vb),
                    },
                )
    finally:
        ops.set_backend("auto")
    return rows


# ---- end to end --------------------------------------------------------------------------------
def _fim_requests(n: int, max_tokens: int, seed: int = 0):
    """FIM requests cut at line boundaries of this repository's own Python files (deterministic)."""
    from model.api import FimRequest

    files = sorted(p for d in ("model", "editserver", "kernels") for p in (REPO / d).glob("*.py"))
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

    from model import ops
    from model.api import Engine
    from model.checkpoint import load_checkpoint

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


def run(args: argparse.Namespace) -> int:
    import torch

    from model import ops
    from model.checkpoint import DEFAULT_CHECKPOINT
    from model.config import PRESETS, ModelConfig

    if args.threads:
        torch.set_num_threads(args.threads)
    name = "cuda" if args.device == "auto" and torch.cuda.is_available() else args.device
    if name == "auto":
        name = "cpu"
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("CUDA was asked for but is not available")
        return 2
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"), None)
    if not isinstance(dtype, torch.dtype):
        print(f"unknown dtype {args.dtype!r}")
        return 2
    triton_ok = device.type == "cuda" and ops._has_triton()
    cuda_name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    contexts = [
        int(c)
        for c in (args.contexts or ("512,2048,8192,32704" if device.type == "cuda" else "512,2048")).split(
            ","
        )
    ]
    batches = [int(b) for b in args.batches.split(",")]
    repeat = args.repeat or (30 if device.type == "cuda" else 5)
    model_dir = args.model or DEFAULT_CHECKPOINT
    have_ckpt = (Path(model_dir) / "config.json").is_file()
    cfg = (
        ModelConfig.from_dict(json.loads((Path(model_dir) / "config.json").read_text())["model"])
        if have_ckpt
        else PRESETS["small"]
    )
    print(
        f"device: {cuda_name or 'cpu'} ({device}), dtype {str(dtype).removeprefix('torch.')}, torch threads {torch.get_num_threads()}"
    )
    if not triton_ok:
        why = "Triton is not importable" if device.type == "cuda" else "Triton kernels need CUDA"
        print(f"{why}: Triton columns are absent; the PyTorch paths are timed")
    print(
        f"model shapes from {model_dir if have_ckpt else 'the small preset (no checkpoint found)'}: "
        f"dim {cfg.dim}, heads {cfg.n_heads}/{cfg.n_kv_heads}, head dim {cfg.head_dim}, ffn {cfg.ffn_dim}, vocab {cfg.vocab_size}"
    )
    result = {
        "device": cuda_name or "cpu",
        "dtype": str(dtype),
        "triton": triton_ok,
        "threads": torch.get_num_threads(),
    }
    if not args.skip_kernels:
        print(f"kernels (median of {repeat}; ratio = torch time / variant time, >1 is faster):")
        result["kernels"] = _kernel_rows(
            cfg, device, dtype, contexts, batches, args.canvas, repeat, triton_ok
        )
    if not args.skip_e2e:
        if not have_ckpt:
            print(f"end to end: skipped, no checkpoint at {model_dir} (pass --model DIR)")
        else:
            backends = ["auto", "torch"] if triton_ok else ["torch"]
            print(
                f"end to end: Engine.complete_batch, FIM, greedy, {args.max_tokens}-token canvas, {args.e2e_repeat} calls each:"
            )
            result["e2e"] = _e2e_rows(
                model_dir, device, dtype, batches, args.max_tokens, args.e2e_repeat, backends
            )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0
