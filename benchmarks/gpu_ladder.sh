#!/usr/bin/env bash
# Issue 29 on one GPU, in two device calls of under 10 minutes on one warm machine (the workspace
# kept between them with --resume; where the second call finds a fresh machine, it restores the
# workspace the first one packed into $OUT, less its compile cache, and the champion compiles again).
#   PART=1 bash benchmarks/gpu_ladder.sh   baseline, then the exact stack, the compiled block and the
#                                          compiled VAE decoder (the run after the compiled KEEP)
#   PART=2 bash benchmarks/gpu_ladder.sh   further rungs, the champion profiled, then beside
#                                          torch.compile(mode="reduce-overhead") of the stock pipeline
# SUITE=tiny for the CPU dry run. Results under $OUT/ladder.
set -uo pipefail
SUITE=${SUITE:-dit-xl-2-256}
OUT=${OUT:-/tmp/ditar-out}
WS=${WS:-/tmp/ditar-ladder}
PART=${PART:-1}
mkdir -p "$OUT/ladder"
. benchmarks/gpu_env.sh || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv > "$OUT/gpu.txt" 2>&1
python3 -c "import torch, diffusers; print('torch', torch.__version__, 'diffusers', diffusers.__version__)" | tee -a "$OUT/gpu.txt"
if [ "$PART" = 1 ]; then
  python3 benchmarks/ladder.py --suite "$SUITE" --workdir "$WS" --out "$OUT/ladder" \
    --rungs "${RUNGS:-exact_stack,regional_compile,vae_compile}" --budget-s "${BUDGET_S:-520}"
  rc=$?
  # the workspace for a second call on a fresh machine (git, state, baseline; not the compile cache)
  tar -C "$(dirname "$WS")" --exclude="*/compile-cache" -czf "$OUT/workspace.tgz" "$(basename "$WS")"
  exit $rc
fi
if [ ! -d "$WS/.git" ] && [ -f "${RESTORE:-.gpu/workspace.tgz}" ]; then
  echo "[gpu_ladder] fresh machine: the workspace restored from ${RESTORE:-.gpu/workspace.tgz}"
  tar -C "$(dirname "$WS")" -xzf "${RESTORE:-.gpu/workspace.tgz}"
fi
python3 benchmarks/ladder.py --suite "$SUITE" --workdir "$WS" --out "$OUT/ladder" --resume \
  --rungs "${RUNGS:-sdpa,same_again}" --budget-s "${BUDGET_S:-200}" \
  --profile-lanes throughput_b8 --compile-reference "${MODES:-reduce-overhead}"
