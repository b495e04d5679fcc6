#!/bin/bash
# The device check for a machine with a GPU: the CUDA test tier (kernels against their references at
# open-weight shapes, parity), then ms per denoising step, Triton against SDPA, for a tiny and a
# Qwen2-0.5B-shaped random model at batch 1 and 16, and the per-op timings at 7B shapes. Results go
# to $OUT (default /tmp/gpu-check). Run from the repository root with the project installed.
set -u
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python -m pytest -q -p no:cacheprovider -m gpu 2>&1 | tee "$OUT/pytest-gpu.txt"
for shape in tiny qwen2-0.5b; do
  python -m editserver.cli bench step --shape $shape --batches 1,16 --repeat 5 \
    --json "$OUT/step-$shape.json" 2>&1 | tee "$OUT/step-$shape.txt"
done
python -m editserver.cli bench kernels --shape qwen2-7b --json "$OUT/kernels-qwen2-7b.json" \
  2>&1 | tee "$OUT/kernels-qwen2-7b.txt"
