"""Compile every kernel ahead of time for an NVIDIA GPU architecture, with no GPU present.

``python -m editserver.kernels.compile_check [--arch 90] [--quick]`` runs Triton's whole pipeline (TTIR, TTGIR,
LLVM IR, PTX, then ``ptxas`` to a cubin) for each kernel in the variants the model launches, and
prints each cubin's registers, spill stack, local and shared memory (``cuobjdump``).

Design decisions:
- The interpreter checks semantics on CPU but never runs the GPU compiler, so a kernel can pass every
  interpreter test and still fail to compile (or spill) on the device. Compiling offline for a
  ``GPUTarget`` closes that gap on machines without a GPU; exit status 1 on any compile error.
- Spills are reported, not failed: they cost speed, not correctness.
- Must run without ``TRITON_INTERPRET=1`` (interpreted kernels cannot be compiled); it refuses
  otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

_FLOATS = {"qk_scale", "eps", "inv_temp"}
_TORCH = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


@dataclass
class Variant:
    label: str
    kernel: object  # a triton JITFunction
    pointers: dict[str, str]  # pointer argument -> element type ("fp32", "bf16", "i64", "u8", ...)
    constexprs: dict[str, object]
    num_warps: int = 4
    num_stages: int = 2
    ints64: set[str] = field(default_factory=set)
    ones: set[str] = field(default_factory=set)  # int arguments that are 1 at run time (unit strides)


def _signature(v: Variant) -> tuple[dict[str, str], dict[str, object], dict]:
    """As Triton's launcher specialises: ints equal to 1 become constants, pointers and the other
    strides (multiples of the head dim or width) are marked 16-divisible."""
    sig, consts, attrs = {}, {}, {}
    for i, name in enumerate(v.kernel.arg_names):
        if name in v.constexprs:
            sig[name], consts[name] = "constexpr", v.constexprs[name]
        elif name in v.ones:
            sig[name], consts[name] = "constexpr", 1
        elif name in v.pointers:
            sig[name] = "*" + v.pointers[name]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif name in _FLOATS:
            sig[name] = "fp32"
        else:
            sig[name] = "i64" if name in v.ints64 else "i32"
            if name.startswith("s"):  # strides
                attrs[(i,)] = [["tt.divisibility", 16]]
    return sig, consts, attrs


def variants(quick: bool) -> list[Variant]:
    import torch

    from editserver.kernels.attention import _attention_combine_kernel, _attention_kernel, launch_config
    from editserver.kernels.rmsnorm import _rmsnorm_kernel
    from editserver.kernels.rotary import _rotary_kernel
    from editserver.kernels.swiglu import _swiglu_kernel
    from editserver.kernels.token_confidence import _token_confidence_kernel

    out: list[Variant] = []
    dtypes = ["bf16"] if quick else ["bf16", "fp16", "fp32"]
    for dt in dtypes:
        for d in (64, 128):
            if quick and d == 128:
                continue
            bm, bn, bd, warps, stages = launch_config(d, 3 * 64, getattr(torch, _TORCH[dt]))
            for lens, k2, mask, splits in (
                (True, True, False, 1),
                (True, True, False, 8),
                (False, False, True, 1),
            ):
                if quick and (mask or splits == 1):
                    continue
                ptr = {n: dt for n in ("Q", "K", "V", "K2", "V2", "OUT")}
                ptr |= {"KV_LENS": "i64", "MASK": "u8", "O_PART": "fp32", "LSE_PART": "fp32"}
                out.append(Variant(
                    f"attention {dt} D={d} lens={lens} block={k2} mask={mask} splits={splits}",
                    _attention_kernel, ptr,
                    dict(GROUP=3, HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=bd, HAS_LENS=lens, HAS_K2=k2,
                         HAS_MASK=mask, NUM_SPLITS=splits, F32_DOT=dt == "fp32", UPCAST=False),
                    num_warps=warps, num_stages=stages, ones={"sqd", "skd", "svd", "s2kd", "s2vd", "sod"},
                ))  # fmt: skip
        out.append(Variant(
            f"attention combine {dt}", _attention_combine_kernel,
            {"O_PART": "fp32", "LSE_PART": "fp32", "OUT": dt},
            dict(HEAD_DIM=64, BLOCK_D=64, NUM_SPLITS=8, BLOCK_S=8),
        ))  # fmt: skip
        for res in (False, True):
            out.append(Variant(
                f"rmsnorm {dt} residual={res}", _rmsnorm_kernel, {n: dt for n in ("X", "R", "W", "Y", "S")},
                dict(HAS_RES=res, BLOCK=512), num_warps=2,
            ))  # fmt: skip
        out.append(Variant(
            f"rotary {dt}", _rotary_kernel, {"Q": dt, "K": dt, "COS": "fp32", "SIN": "fp32"},
            dict(BLOCK_T=8, BLOCK_H=8, BLOCK_HALF=32),  # what the host picks for 6/2 heads of 64
        ))  # fmt: skip
        out.append(Variant(f"swiglu {dt}", _swiglu_kernel, {"G": dt, "U": dt, "OUT": dt}, dict(BLOCK=1024)))
        for sample, margin in ((False, True), (True, False)):
            out.append(Variant(
                f"token_confidence {dt} sample={sample} margin={margin}", _token_confidence_kernel,
                {"LOGITS": dt, "PEN": "fp32", "TOK": "i64", "PROB": "fp32", "MARGIN": "fp32"},
                dict(HAS_PEN=True, WANT_MARGIN=margin, SAMPLE=sample, BLOCK_V=4096), num_warps=8,
            ))  # fmt: skip
    return out + _open_weight_variants()


def _open_weight_variants() -> list[Variant]:
    """bf16 at the widths of 7B/8B open-weight models (Qwen2-7B/Dream 28/4 heads, LLaDA-8B 32/32, head
    dim 128, hidden 3584), with the block sizes the host functions pick for a 64-token canvas."""
    import torch

    from editserver.kernels._common import next_pow2
    from editserver.kernels.attention import _attention_kernel, launch_config
    from editserver.kernels.rmsnorm import _rmsnorm_kernel
    from editserver.kernels.rotary import _rotary_kernel

    out: list[Variant] = []
    for name, heads, kv_heads in (("qwen2-7b", 28, 4), ("llada-8b", 32, 32)):
        group = heads // kv_heads
        bm, bn, bd, warps, stages = launch_config(128, group * 64, torch.bfloat16)
        ptr = {n: "bf16" for n in ("Q", "K", "V", "K2", "V2", "OUT")}
        ptr |= {"KV_LENS": "i64", "MASK": "u8", "O_PART": "fp32", "LSE_PART": "fp32"}
        out.append(Variant(
            f"attention bf16 D=128 {name} G={group} splits=8", _attention_kernel, ptr,
            dict(GROUP=group, HEAD_DIM=128, BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=bd, HAS_LENS=True, HAS_K2=True,
                 HAS_MASK=False, NUM_SPLITS=8, F32_DOT=False, UPCAST=False),
            num_warps=warps, num_stages=stages, ones={"sqd", "skd", "svd", "s2kd", "s2vd", "sod"},
        ))  # fmt: skip
        block_h = next_pow2(heads)
        out.append(Variant(
            f"rotary bf16 D=128 {name}", _rotary_kernel, {"Q": "bf16", "K": "bf16", "COS": "fp32", "SIN": "fp32"},
            dict(BLOCK_T=max(1, min(16, 2048 // (block_h * 64))), BLOCK_H=block_h, BLOCK_HALF=64),
        ))  # fmt: skip
    out.append(Variant(
        "rmsnorm bf16 residual=True N=3584", _rmsnorm_kernel, {n: "bf16" for n in ("X", "R", "W", "Y", "S")},
        dict(HAS_RES=True, BLOCK=4096), num_warps=8,
    ))  # fmt: skip
    return out


def _resources(cubin: bytes) -> str:
    from triton.backends.nvidia import compiler as nv

    tool = Path(nv.__file__).parent / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
        fh.write(cubin)
        fh.flush()
        text = subprocess.run(
            [str(tool), "--dump-resource-usage", fh.name], capture_output=True, text=True
        ).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", text)
    return f"regs {m[1]:>3}  spill-stack {m[2]:>4}  local {m[4]:>4}" if m else "?"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", type=int, default=90, help="compute capability x10 (80 = A100, 90 = H100)")
    p.add_argument("--quick", action="store_true", help="one variant per kernel (bf16), for tests")
    args = p.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("unset TRITON_INTERPRET: interpreted kernels cannot be compiled")
        return 2
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target, failures = GPUTarget("cuda", args.arch, 32), 0
    for v in variants(args.quick):
        sig, consts, attrs = _signature(v)
        try:
            k = triton.compile(
                ASTSource(v.kernel, sig, consts, attrs), target=target,
                options={"num_warps": v.num_warps, "num_stages": v.num_stages},
            )  # fmt: skip
            res = f"{_resources(k.asm['cubin'])}  dyn-shared {k.metadata.shared:>6}"
            print(f"ok    sm_{args.arch}  {v.label:<62} {res}", flush=True)
        except Exception as e:  # noqa: BLE001 - report every failing variant, then fail once
            failures += 1
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            print(f"FAIL  sm_{args.arch}  {v.label}: {type(e).__name__}: {first}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
