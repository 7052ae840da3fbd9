#!/usr/bin/env bash
# One device call: the dit-xl-2-256 suite through the real loop (baseline, quality gates, one gated
# experiment) plus the perf-lane trust benchmark. Usage on the GPU machine, from the repo root:
#   bash benchmarks/gpu_session.sh            (SUITE=tiny for a CPU dry run; OUT=dir for results)
set -uo pipefail
SUITE=${SUITE:-dit-xl-2-256}
OUT=${OUT:-/tmp/ditar-out}; mkdir -p "$OUT"
if [ -d .whl ] && ! python3 -c "import diffusers" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export DITAR_CACHE=${DITAR_CACHE:-/tmp/ditar-cache} PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
PY=python3
REPO=$PWD
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv 2>/dev/null | tee "$OUT/gpu.txt"
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/steps.log"; }

# A scratch research project that uses this checkout's package, suites and candidate.
P=/tmp/ditar-proj; rm -rf $P; mkdir -p $P
cp -r mutable suites conftest.py $P/; mkdir -p $P/config
$PY - "$SUITE" <<'PYEOF'
import json, sys
cfg = json.load(open("config/autoresearch.json"))
cfg.update(suite=sys.argv[1], fixed_paths=["config/", "suites/", "conftest.py"])
json.dump(cfg, open("/tmp/ditar-proj/config/autoresearch.json", "w"), indent=1)
PYEOF
cd $P && printf '.autoresearch/\n__pycache__/\n' > .gitignore
git init -q -b main && git -c user.email=g@x -c user.name=g add -A && git -c user.email=g@x -c user.name=g commit -qm stock
DITAR="$PY -m pytest_ditar.cli --config config/autoresearch.json"
PLUG=$($PY -c "import importlib.metadata as m; print('' if any(e.name == 'ditar' for e in m.entry_points(group='pytest11')) else '-p pytest_ditar.plugin.hooks')")
PYT="$PY -m pytest $PLUG -p no:cacheprovider"
$DITAR init --tag gpu >/dev/null
stamp "baseline start"
$DITAR baseline 2>&1 | tee "$OUT/baseline.log"
stamp "baseline done"
$PYT -m quality -q 2>&1 | tail -4 | tee "$OUT/quality.log"
stamp "quality done"
cp $REPO/pytest_ditar/demo/candidates/faster_exact.py mutable/pipeline.py
git -c user.email=g@x -c user.name=g commit -qam "Lean sampling loop: cut per-step dispatch overhead" -m "Ditar-Class: exact"
$PYT --ditar-gate -q 2>&1 | tail -25 | tee "$OUT/experiment.log"
stamp "experiment done"
cp .autoresearch/gpu/baseline/manifest.json "$OUT/baseline_manifest.json"
cp .autoresearch/gpu/baseline/lanes.json "$OUT/baseline_lanes.json"
cp .autoresearch/gpu/runs/*/summary.json "$OUT/experiment_summary.json" 2>/dev/null
cd $REPO
stamp "perf lanes start"
$PY benchmarks/perf_lanes.py --suite "$SUITE" --aa-runs ${AA_RUNS:-10} --rounds ${ROUNDS:-10} --out "$OUT/perf_lanes.json" 2>&1 \
  | grep -v Warning | tee "$OUT/perf_lanes.log"
stamp "all done"
