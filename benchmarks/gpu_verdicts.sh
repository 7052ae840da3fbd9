#!/usr/bin/env bash
# The gate's verdicts on one GPU (issue 23), in two device calls of under 10 minutes each. From the repo root:
#   bash benchmarks/gpu_verdicts.sh part1   # the lean rung through the real loop on the stock eager champion;
#                                           # the interference attack; latency_b1 on the graph-replayed champion:
#                                           # 12 A/A and 12 planted 2% wins, alternating
#   bash benchmarks/gpu_verdicts.sh part2   # throughput_b8 likewise, 6 and 6; then MORE_B1 more latency_b1 trials
#                                           # of each kind (for those part1 had no time left for)
# The host's stock A/A noise is the experiment's own twin against its champion (part1); the graph-replayed
# champion's is the A/A trials'. SANDBOX_ROUNDS>0 adds the sandbox's round trip (issue 24) to part1.
# SUITE (default dit-xl-2-256; SUITE=tiny for a CPU dry run), OUT=dir for results (default /tmp/ditar-verdicts).
# Each part writes a few files under $OUT/<part>/ (the device tool brings back 8 at most): gpu.txt,
# steps.log, table.txt, the JSON results (every trial with its per-round samples of all sides, orders,
# looks, probes and reason) and logs.tgz (stdout of every step and the workers' logs).
# Every knob is a variable: TRIALS_ATTACK TRIALS_B1 TRIALS_B8, BUDGET_ATTACK BUDGET_B1 BUDGET_B8
# (seconds per lane run), LOOP_BUDGET (the experiment's perf.lane_budget_s), START (the graphs champion's
# planted fraction), ATTACK_MS ATTACK_DELAY_MS, PART_BUDGET (seconds the part may take; a step that would end
# past it is cut short, and the table is printed all the same); ONLY=experiment runs part1's step (b) alone.
set -uo pipefail
PART=${1:-}
case "$PART" in part1|part2) ;; *) echo "usage: bash benchmarks/gpu_verdicts.sh part1|part2" >&2; exit 2;; esac
T0=$(date +%s)
SUITE=${SUITE:-dit-xl-2-256}
OUT=${OUT:-/tmp/ditar-verdicts}; R=$OUT/$PART; mkdir -p "$R"
WORK=${WORK:-/tmp/ditar-verdicts-work/$PART}; rm -rf "$WORK"; mkdir -p "$WORK"
PART_BUDGET=${PART_BUDGET:-560}
REPO=$PWD
if [ -d .whl ]; then
  . benchmarks/gpu_env.sh || exit 1   # the carried wheels into /tmp/site, once per machine
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} DITAR_CACHE=${DITAR_CACHE:-/tmp/ditar-cache} PYTHONUNBUFFERED=1
fi
export PYTHONDONTWRITEBYTECODE=1
PY=${PY:-python3}
POWER="$PY benchmarks/power.py --suite $SUITE"

elapsed() { echo $(( $(date +%s) - T0 )); }
STEP_T=$T0
stamp() { local now; now=$(date +%s); echo "[$(( now - T0 ))s total, $(( now - STEP_T ))s step] $*" | tee -a "$R/steps.log"; STEP_T=$now; }
# cap WANT RESERVE: seconds a step may take, leaving RESERVE for the steps after it
cap() { local left=$(( PART_BUDGET - $(elapsed) - $2 )); [ "$left" -lt 30 ] && left=30; echo $(( $1 < left ? $1 : left )); }

DEVICE=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
DEVICE=${DEVICE:-"no GPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') ($(nproc) cores)"}
{ echo "device: $DEVICE"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv 2>/dev/null; } | tee "$R/gpu.txt"
$PY -c "import torch, diffusers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'diffusers', diffusers.__version__)" \
  2>&1 | tee -a "$R/gpu.txt"
echo "part $PART, suite $SUITE, budget ${PART_BUDGET}s" | tee "$R/steps.log"
stamp "environment ready"

# graph_power EFFECTS LANE TRIALS BUDGET NAME: lane-level trials on the graph-replayed champion, one lane,
# one build of the workers; results in $R/NAME.json.
graph_power() {
  local C; C=$(cap "${6:-600}" "${7:-25}")
  timeout --kill-after=20 $(( C + 20 )) $POWER --mode lanes --base graphs --start "${START:-0.05}" --effects "$1" \
    --lanes "$2" --trials "$2=$3" --lane-budget-s "$2=$4" --deadline-s "$C" \
    --logs "$WORK/workers" --out "$R/$5.json" > "$WORK/$5.log" 2>&1
  echo "rc=$?" >> "$WORK/$5.log"; grep -E '^\[power\]|rc=' "$WORK/$5.log" | cut -c1-220
  stamp "lane-level power ($5) done"
  RESULTS="${RESULTS:-} $R/$5.json"
}

if [ "$PART" = part1 ]; then
  # The workers' sandbox (issue 24) on this host: where none can be made, the loop runs with "sandbox": "off"
  # and says so, so that the verdicts below still come back.
  WHY=$($PY -c "from pytest_ditar.runtime import sandbox_check; print(sandbox_check.check() or '')" 2>&1)
  SANDBOX=${SANDBOX:-$([ -z "$WHY" ] && echo on || echo off)}
  echo "sandbox: $SANDBOX${WHY:+ ($WHY)}" | tee -a "$R/steps.log"
  # In the order of what matters most (the loop's KEEP, the attack's verdict), the A/A noise last, with the
  # time that is left: as many of its trials as fit.
  # (b) The lean rung through the real loop: baseline of stock, faster_exact.py committed as exact, dit-ar experiment.
  C=$(cap 270 $([ "${ONLY:-}" = experiment ] && echo 15 || echo 200))
  timeout --kill-after=20 "$C" $POWER --mode experiment --candidate pytest_ditar/demo/candidates/faster_exact.py \
    --classification exact --description "Lean sampling loop: cut per-step dispatch overhead" \
    --lane-budget-s "${LOOP_BUDGET:-45}" --sandbox "$SANDBOX" --workdir "$WORK/proj" --out "$R/experiment.json" \
    > "$WORK/experiment.log" 2>&1
  echo "rc=$?" >> "$WORK/experiment.log"; grep -E 'DITAR|baseline|lane |passed|failed|rc=' "$WORK/experiment.log" | cut -c1-220
  stamp "(b) lean rung through dit-ar experiment done"
  RESULTS="$R/experiment.json"

  if [ "${ONLY:-}" != experiment ]; then  # ONLY=experiment: step (b) alone
  # (c) The interference attack: an unchanged candidate that leaves GPU work queued after each call,
  # against the graph-replayed champion and its twin. The gate should say UNSTABLE ("interference: ...").
  C=$(cap 150 130)
  timeout --kill-after=20 $(( C + 20 )) $POWER --mode lanes --base graphs --start "${START:-0.05}" --attack interference \
    --attack-ms "${ATTACK_MS:-30}" --attack-delay-ms "${ATTACK_DELAY_MS:-0.2}" --lanes latency_b1 \
    --trials "${TRIALS_ATTACK:-3}" --lane-budget-s "${BUDGET_ATTACK:-10}" \
    --deadline-s "$C" --logs "$WORK/workers_attack" --out "$R/attack.json" > "$WORK/attack.log" 2>&1
  echo "rc=$?" >> "$WORK/attack.log"; grep -E '^\[power\]|rc=' "$WORK/attack.log" | cut -c1-260
  grep -h '\[attack\]' "$WORK"/workers_attack/*.log 2>/dev/null | tail -6
  stamp "(c) interference attack done"
  # latency_b1 on the graph-replayed champion (champion + twin): A/A (effect 0) and a planted 2% win, trial
  # by trial, each lane run within the product's default budget (60 s): as many as the part has time for.
  RESULTS="$RESULTS $R/attack.json"
  graph_power 0,0.02 latency_b1 "${TRIALS_B1:-12}" "${BUDGET_B1:-60}" power_b1 600 $([ "${SANDBOX_ROUNDS:-0}" -gt 0 ] && echo 70 || echo 15)
  # (d) optional: the sandbox's cost (issue 24), latency_b1's round trip through a sandboxed and an
  # unsandboxed worker, interleaved, and the start-up of each way a worker is made.
  if [ "${SANDBOX_ROUNDS:-0}" -gt 0 ]; then
    C=$(cap 150 15)
    timeout --kill-after=20 "$C" $PY benchmarks/sandbox_overhead.py --suite "$SUITE" --rounds "$SANDBOX_ROUNDS" \
      --workers "${SANDBOX_WORKERS:-2}" --out "$R/sandbox.json" > "$WORK/sandbox.log" 2>&1
    echo "rc=$?" >> "$WORK/sandbox.log"; cut -c1-260 "$WORK/sandbox.log" | tail -8
    stamp "(d) sandbox round trip and start-up done"
  fi
  fi
  [ -f "$R/sandbox.json" ] && $PY - "$R/sandbox.json" <<'PY' | tee -a "$R/steps.log"
import json, sys
d = json.load(open(sys.argv[1])); rt = d["round_trip"]
print(f"sandbox round trip ({d['device']}, {rt['rounds']} rounds): sandboxed {rt['boxed_median_s'] * 1e3:.2f} ms, "
      f"unsandboxed {rt['plain_median_s'] * 1e3:.2f} ms, ratio {rt['ratio_median']:.4f} "
      f"[{rt['ratio_ci95'][0]:.4f},{rt['ratio_ci95'][1]:.4f}]")
for k, v in d["startup"].items():
    print(f"  start-up {k}: hello {v['hello_median_s']:.2f} s, built {v['built_median_s']:.2f} s")
PY
else
  # throughput_b8 likewise; then latency_b1 trials part1 had no time for (MORE_B1 of each kind).
  graph_power 0,0.02 throughput_b8 "${TRIALS_B8:-6}" "${BUDGET_B8:-60}" power_b8 600 $([ "${MORE_B1:-0}" -gt 0 ] && echo 110 || echo 15)
  [ "${MORE_B1:-0}" -gt 0 ] && graph_power 0,0.02 latency_b1 "$MORE_B1" "${BUDGET_B1:-60}" power_b1_more 600 15
fi
(cd "$WORK" && tar czf "$R/logs.tgz" *.log workers* \
   $(ls -d proj/.autoresearch/power/runs proj/.autoresearch/power/results.tsv 2>/dev/null) 2>/dev/null)

{ echo; echo "==== $PART on $DEVICE, suite $SUITE"; cat "$R/steps.log"
  $PY benchmarks/power.py --table $RESULTS; } 2>&1 | tee "$R/table.txt"
stamp "table written: $(ls "$R" | tr '\n' ' ')"
