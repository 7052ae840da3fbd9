#!/usr/bin/env bash
# One device call: issue 49's verdict rates (benchmarks/verdict_rates.py) on the device host's CPUs,
# streams in parallel, each pinned to two cores of its own with its own torch-burst load: a loaded
# 2-core CI box each. The tiny suite runs on the CPU (no GPU figure comes out of this).
#   OUT=dir bash benchmarks/gpu_rates.sh                 (on the device machine, from the repo root)
#   SPECS="aa:1" BUDGET=400 OUT=/tmp/r bash benchmarks/gpu_rates.sh   (a dry run here)
# Writes three files into OUT: rates.json (every trial), streams.log, table.txt.
set -uo pipefail
OUT=${OUT:-/tmp/ditar-rates}; mkdir -p "$OUT"
if [ -d .whl ]; then source benchmarks/gpu_env.sh || exit 1; fi
export CUDA_VISIBLE_DEVICES=  # the tiny suite on the CPU, as CI runs it
BUDGET=${BUDGET:-480}  # seconds per stream: a stream cut short keeps the trials it finished
SPECS=${SPECS:-"win12:10 aa:10 win2:10 win2:10 tail:10 tail:10 timebomb:8"}
LOAD=${LOAD:-2}
PY=${PY:-python3}
n=$(nproc); i=0; work=$(mktemp -d)
for spec in $SPECS; do
  name=${spec%%:*}; runs=${spec##*:}
  cores="$(( (2 * i) % n )),$(( (2 * i + 1) % n ))"
  timeout "$BUDGET" taskset -c "$cores" $PY benchmarks/verdict_rates.py --scenarios "$name" --runs "$runs" \
    --load "$LOAD" --workdir "/tmp/vr-$i" --out "$work" --label "-$i" > "$work/stream-$i.log" 2>&1 &
  i=$((i + 1))
done
wait
for f in "$work"/stream-*.log; do echo "== $f"; cat "$f"; done > "$OUT/streams.log"
$PY - "$work" "$OUT/rates.json" <<'EOF'
import json, pathlib, sys
rows = [r for f in sorted(pathlib.Path(sys.argv[1]).glob("verdict_rates-*.json")) for r in json.loads(f.read_text())]
pathlib.Path(sys.argv[2]).write_text(json.dumps(rows, indent=1))
EOF
$PY benchmarks/verdict_rates.py --table "$OUT/rates.json" | tee "$OUT/table.txt"
