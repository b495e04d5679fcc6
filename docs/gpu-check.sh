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
# ms per step at the 7B shape against its bandwidth floor (weight bytes / the GPU's measured read
# bandwidth, printed beside each figure), batch 1 and 16, Triton against SDPA, bf16.
python -m editserver.cli bench step --shape qwen2-7b --batches 1,16 --canvas 16 --repeat 3 --dtype bfloat16 \
  --bandwidth-mib 4096 --json "$OUT/step-qwen2-7b.json" 2>&1 | tee "$OUT/step-qwen2-7b.txt"
# The typing case at 7B: 512 tokens each side of the cursor, one token typed between decodes, context
# reuse off, head only, and with the text after the cursor.
python -m editserver.cli bench step --shape qwen2-7b --batches 1 --canvas 16 --context 512 --suffix 512 \
  --reuse off,on,suffix --repeat 3 --dtype bfloat16 --bandwidth-mib 4096 \
  --json "$OUT/step-qwen2-7b-typing.json" 2>&1 | tee "$OUT/step-qwen2-7b-typing.txt"
# DreamOn at the 7B shape (random weights, its expand forced so the gap grows 4 -> 64): the published
# loop (one token a step, exact cache) against our default (dual cache), steps and ms per step.
python docs/dreamon_step.py --shape qwen2-7b --device cuda --dtype bfloat16 --bound 64 \
  --json "$OUT/dreamon-qwen2-7b.json" 2>&1 | tee "$OUT/dreamon-qwen2-7b.txt"
# LLaDA-MoE-7B-A1B at its real shape (random weights) against a dense model of the same total size:
# ms per step and the expert bytes a 16-row canvas reads.
for shape in llada-moe-7b-a1b dense-7b-as-llada-moe; do
  python -m editserver.cli bench step --shape $shape --batches 1,16 --canvas 16 --context 512 --repeat 3 \
    --dtype bfloat16 --json "$OUT/step-$shape.json" 2>&1 | tee "$OUT/step-$shape.txt"
done
# Block diffusion at the published 7B/8B sizes (random weights, bf16), each on the block cache with its
# family's rule, one token a step: ms per step and the 16-token one-line answer after a typed token,
# 512 tokens of context plus 64 after the cursor (in the chat prompt), reuse off and on, Triton
# against SDPA, batch 1 and 16. Fast-dLLM v2 7B (Qwen2.5-7B shape, q/k/v biases, shifted logits,
# 32-token blocks, 8-token sub-blocks at threshold 0.9):
python -m editserver.cli bench step --shape fast-dllm-v2-7b --batches 1,16 --canvas 16 --context 512 \
  --reuse off,on --repeat 3 --dtype bfloat16 --bandwidth-mib 4096 \
  --json "$OUT/step-fast-dllm-v2-7b.json" 2>&1 | tee "$OUT/step-fast-dllm-v2-7b.txt"
# SDAR-8B (Qwen3-8B shape, q/k norms, 4-token blocks, BlockSchedule(0.9, 4)):
python -m editserver.cli bench step --shape sdar-8b --batches 1,16 --canvas 16 --context 512 \
  --reuse off,on --repeat 3 --dtype bfloat16 --bandwidth-mib 4096 \
  --json "$OUT/step-sdar-8b.json" 2>&1 | tee "$OUT/step-sdar-8b.txt"
# Stable-DiffCoder-8B (Seed-Coder-8B's Llama shape, vocabulary 155,136, rope 5e5, 4-token blocks, its
# BlockSchedule(0.95, 4), the suffix-prefix-middle prompt, so a typed token ends the prompt):
python -m editserver.cli bench step --shape stable-diffcoder-8b --batches 1,16 --canvas 16 --context 512 \
  --reuse off,on --repeat 3 --dtype bfloat16 --bandwidth-mib 4096 \
  --json "$OUT/step-stable-diffcoder-8b.json" 2>&1 | tee "$OUT/step-stable-diffcoder-8b.txt"
# The small block models against the 0.5B dual-cache model in one interleaved run: its last lines are
# the one-line answer after a keystroke with the head of the file reused (p50, batch 1, reuse on).
python -m editserver.cli bench step --shape qwen2-0.5b,fast-dllm-v2-1.5b,sdar-1.7b --batches 1,16 \
  --canvas 16 --context 512 --reuse off,on --repeat 5 --dtype bfloat16 --bandwidth-mib 4096 \
  --json "$OUT/step-block-small.json" 2>&1 | tee "$OUT/step-block-small.txt"
# LLaDA2.0/2.1-mini at its real shape (random weights: 16B in all, 256 experts, 8 a token, sigmoid
# group routing), on its 32-token block grid and the block cache: ms per step and the expert bytes a
# 16-row canvas reads, bf16.
python -m editserver.cli bench step --shape llada2-mini --batches 1,16 --canvas 16 --context 512 --repeat 3 \
  --dtype bfloat16 --json "$OUT/step-llada2-mini.json" 2>&1 | tee "$OUT/step-llada2-mini.txt"
# The typing replay at 7B through two servers (context reuse off and on): needs a downloaded 7B
# diffusion model directory in MODEL_7B (for example Dream-Coder-v0-Instruct-7B) and the commit
# records in EDITS (default ../shared/data/edits).
if [ -n "${MODEL_7B:-}" ]; then
  python -m editserver.cli bench keystrokes --model "$MODEL_7B" --device cuda --dtype bf16 \
    --edits "${EDITS:-../shared/data/edits}" --lines 20 --chars 3 --threads 4 \
    --json "$OUT/keystrokes-7b.json" 2>&1 | tee "$OUT/keystrokes-7b.txt"
  python -m editserver.cli bench keystrokes --model "$MODEL_7B" --device cuda --dtype bf16 \
    --edits "${EDITS:-../shared/data/edits}" --lines 20 --chars 3 --threads 4 --prefix-cache-suffix \
    --json "$OUT/keystrokes-7b-suffix.json" 2>&1 | tee "$OUT/keystrokes-7b-suffix.txt"
else
  echo "MODEL_7B unset: the 7B typing replay is skipped" | tee "$OUT/keystrokes-7b.txt"
fi
