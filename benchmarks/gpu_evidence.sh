#!/usr/bin/env bash
# Issue 52's one device call (benchmarks/gpu_evidence.py says what it runs). From the repo root:
#   OUT=/tmp/out bash benchmarks/gpu_evidence.sh                           on the GPU machine
#   SUITE=tiny BUDGET_S=900 OUT=/tmp/out bash benchmarks/gpu_evidence.sh   the CPU rehearsal
set -uo pipefail
OUT=${OUT:-/tmp/ditar-out}
mkdir -p "$OUT"
. benchmarks/gpu_env.sh || exit 1
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv 2>&1 || true
  python3 -c "import torch, diffusers; print('torch', torch.__version__, 'diffusers', diffusers.__version__)"
  nproc; } > "$OUT/gpu.txt"
python3 benchmarks/gpu_evidence.py --suite "${SUITE:-dit-xl-2-256}" --budget-s "${BUDGET_S:-530}" \
  ${RUNGS:+--rungs "$RUNGS"} ${MODES:+--modes "$MODES"} ${RUNG_S:+--rung-s "$RUNG_S"} \
  ${RESERVE_S:+--reserve-s "$RESERVE_S"} ${COMPILE_LANES:+--compile-lanes "$COMPILE_LANES"} --out "$OUT" 2>&1 | tee "$OUT/run.log"
