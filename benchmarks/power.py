"""Planted-effect power of the objective lane (issue 16): does the gate keep every real win?

A champion carries a known amount of extra time per call (PLANTED: a sleep of that fraction of
the call's own work, after its device is synchronized) and a candidate carries less, so the
candidate is faster by exactly the planted effect with identical outputs (an exact change). Two
modes, both judged by the gate's own lane and statistics code:

- `--mode loop`: through `dit-ar experiment` on a scratch research project, as an agent would:
  the baseline carries PLANTED, then experiments alternate an A/A commit (a comment changed) and
  a planted win over the current champion. Counts KEEPs of each kind; rounds, seconds and wall
  per decision; where the wall time went.
- `--mode lanes`: the lane alone (runtime.lanes.measure_lane + judge_lane with the sequential
  plan), one champion worker against candidate workers planted 0-5% faster, many trials: the
  power curve and the false-KEEP count for a champion of your choice (`--base stock|graphs`).

    python benchmarks/power.py --mode loop --suite tiny --trials 10 --effect 0.03 --out power_cpu.json
    python benchmarks/power.py --mode lanes --suite tiny --trials 20 --out power_lanes_cpu.json
    python benchmarks/power.py --mode lanes --suite dit-xl-2-256 --base graphs --lanes latency_b1 \\
        --effects 0,0.02 --trials 20 --lane-budget-s 8 --out power_h200.json          # on the GPU
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

PLANTED_TAIL = '''

# --- planted delay (benchmarks/power.py): a known, output-free cost per call ---
import time as _planted_time

PLANTED = {planted!r}  # extra time, as a fraction of the call's own work
_planted_build = build


class _Planted:
    def __init__(self, inner, spec):
        self.inner, self.spec = inner, spec

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate(self, request):
        t0 = _planted_time.perf_counter()
        out = self.inner.generate(request)
        if self.spec.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()
        if PLANTED:
            _planted_time.sleep(PLANTED * (_planted_time.perf_counter() - t0))
        return out


def build(spec):  # noqa: F811 - the planted wrapper around the pipeline above
    return _Planted(_planted_build(spec), spec)
'''


def base_source(base: str) -> str:
    """The pipeline the delay is planted in: stock (mutable/ as shipped) or the ladder's graph-replayed champion."""
    if base == "stock":
        return (ROOT / "mutable/pipeline.py").read_text()
    from ladder import render
    from worker_overhead import rendered_flags

    return render(rendered_flags("champion" if base == "graphs" else base))


def planted(source: str, fraction: float, note: str = "") -> str:
    return source + PLANTED_TAIL.format(planted=round(fraction, 6)) + (f"# {note}\n" if note else "")


def faster_by(fraction: float, effect: float) -> float:
    """The planted fraction of a candidate `effect` faster than one carrying `fraction`."""
    return (1.0 + fraction) / (1.0 + effect) - 1.0


# ------------------------------------------------------------------ loop mode


def loop_mode(args) -> dict:
    from ladder import ditar, git, setup

    ws = Path(args.workdir)
    setup(ws, args.suite)
    cfg_path = ws / "config/autoresearch.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["perf"].update({k: v for k, v in (("lane_budget_s", args.lane_budget_s), ("max_rounds", args.max_rounds))
                        if v is not None})
    cfg_path.write_text(json.dumps(cfg, indent=1))
    src = base_source(args.base)
    frac = args.start  # enough headroom for every planted win: (1 + start) / (1 + effect)^trials >= 1
    (ws / "mutable/pipeline.py").write_text(planted(src, frac))
    git(ws, "commit", "-qam", "Planted baseline: a known delay per call")
    ditar(ws, "init", "--tag", "power")
    t0 = time.perf_counter()
    ditar(ws, "baseline")
    out = {"mode": "loop", "suite": args.suite, "base": args.base, "effect": args.effect, "start": args.start,
           "baseline_s": time.perf_counter() - t0, "config_perf": cfg["perf"], "rows": []}
    for n in range(args.trials * 2):
        kind = "aa" if n % 2 == 0 else "planted"
        new = frac if kind == "aa" else faster_by(frac, args.effect)
        (ws / "mutable/pipeline.py").write_text(planted(src, new, f"trial {n}"))
        subject = "A/A: a comment changed" if kind == "aa" else f"Planted win of {args.effect:.0%}"
        git(ws, "commit", "-qam", f"{subject}\n\nDitar-Class: exact")
        t0 = time.perf_counter()
        res = ditar(ws, "experiment", "--classification", "exact", "--description", subject, check=False)
        wall = time.perf_counter() - t0
        last = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else res.stderr.strip()[-300:]
        status = last.split()[2] if last.startswith("DITAR VERDICT") else "REFUSED"
        runs = sorted((ws / ".autoresearch/power/runs").glob("*/summary.json"), key=lambda p: p.stat().st_mtime)
        summary = json.loads(runs[-1].read_text()) if runs else {}
        lane = summary.get("lanes", {}).get(cfg["objective_lane"], {})
        m = lane.get("measurement", {})
        row = {"trial": n, "kind": kind, "verdict": status, "wall_s": wall, "rounds": len(m.get("samples", [])),
               "lane_wall_s": m.get("wall_s"), "looks": len(m.get("looks", [])),
               "speedup": lane.get("outcome", {}).get("speedup"), "reason": summary.get("reason", last),
               "timings": summary.get("timings", {})}
        if status == "KEEP":
            frac = new
        out["rows"].append(row)
        print(f"[power] {n:2d} {kind:7s} {status:8s} rounds={row['rounds']:3d} wall={wall:5.1f}s "
              f"speedup={row['speedup'] or 0:.3f} {row['reason'][:110]}", flush=True)
    for kind in ("aa", "planted"):
        rows = [r for r in out["rows"] if r["kind"] == kind]
        out[f"{kind}_kept"] = sum(r["verdict"] == "KEEP" for r in rows)
        out[f"{kind}_trials"] = len(rows)
        out[f"{kind}_median_rounds"] = statistics.median(r["rounds"] for r in rows) if rows else None
        out[f"{kind}_median_wall_s"] = statistics.median(r["wall_s"] for r in rows) if rows else None
    return out


# ------------------------------------------------------------------ lanes mode


def lanes_mode(args) -> dict:
    from dataclasses import replace

    from pytest_ditar.config.project import PerfConfig
    from pytest_ditar.config.suite import load_suite
    from pytest_ditar.core import sequential as seq
    from pytest_ditar.runtime.harness import make_spec, pick_device
    from pytest_ditar.runtime.lanes import Sequential, judge_lane, measure_lane, new_stream
    from pytest_ditar.runtime.models import resolve_model_dir
    from pytest_ditar.runtime.worker import CandidateWorker
    from worker_overhead import device_label, write_candidate

    suite = load_suite(ROOT / "suites" / args.suite)
    device = pick_device(args.device)
    spec = make_spec(suite, resolve_model_dir(suite), device)
    perf = replace(PerfConfig(), lane_budget_s=args.lane_budget_s or PerfConfig.lane_budget_s,
                   max_rounds=args.max_rounds or PerfConfig.max_rounds)
    src = base_source(args.base)
    logs = Path(tempfile.mkdtemp(prefix="ditar-power-"))
    effects = [float(e) for e in args.effects.split(",")]

    def worker(name: str, fraction: float) -> CandidateWorker:
        w = CandidateWorker(name, write_candidate(planted(src, fraction), f"power-{name}-"), spec,
                            log_path=logs / f"{name}.log")
        w.start().request_build()
        return w

    champ = worker("champion", args.start)
    cands = {e: worker(f"cand-{e:g}", faster_by(args.start, e)) for e in effects}
    t0 = time.perf_counter()
    for w in (champ, *cands.values()):
        w.built(args.timeout)
    out = {"mode": "lanes", "suite": args.suite, "base": args.base, "device": device_label(device),
           "build_s": time.perf_counter() - t0, "perf": {"alpha": perf.alpha, "min_speedup": perf.min_speedup,
                                                         "max_rounds": perf.max_rounds,
                                                         "lane_budget_s": perf.lane_budget_s}, "lanes": {}}
    stream = new_stream(suite)
    try:
        for lane in suite.lanes:
            if args.lanes and lane.name not in args.lanes.split(","):
                continue
            plan = seq.plan(lane.repeats, max(perf.max_rounds, lane.repeats), perf.alpha)
            sq = Sequential(plan, perf.min_speedup, perf.lane_budget_s)
            rows = {e: [] for e in effects}
            for t in range(args.trials):
                for e in effects:
                    m = measure_lane(cands[e], suite, lane, champion=champ, timeout_s=args.timeout, stream=stream,
                                     sequential=sq)
                    res = judge_lane(m, m.champion_samples, objective=True, source="interleaved", noise=None,
                                     perf_cfg=perf, sequential=sq)
                    rows[e].append({"verdict": res.outcome.verdict, "speedup": res.outcome.speedup,
                                    "rounds": len(m.samples), "seconds": m.wall_s})
                    print(f"[power] {lane.name} trial {t + 1} effect {e:.0%}: {res.outcome.verdict} "
                          f"{res.outcome.speedup:.3f}x in {len(m.samples)} rounds, {m.wall_s:.1f}s", flush=True)
                out["lanes"][lane.name] = _tally(rows)
                Path(args.out).write_text(json.dumps(out, indent=1, default=str))  # a cut run keeps its trials
    finally:
        for w in (champ, *cands.values()):
            w.close()
    return out


def _tally(rows: dict) -> dict:
    return {f"{e:g}": {"trials": len(r), "kept": sum(x["verdict"] == "FASTER" for x in r),
                       "median_rounds": statistics.median(x["rounds"] for x in r),
                       "median_seconds": statistics.median(x["seconds"] for x in r),
                       "median_speedup": statistics.median(x["speedup"] for x in r), "rows": r}
            for e, r in rows.items() if r}


def print_table(out: dict) -> None:
    if out["mode"] == "loop":
        print(f"\nloop, suite {out['suite']}, planted {out['effect']:.0%} exact win vs A/A:")
        print(f"  planted: KEPT {out['planted_kept']} of {out['planted_trials']}, median rounds "
              f"{out['planted_median_rounds']}, median gated-run wall {out['planted_median_wall_s']:.1f}s")
        print(f"  A/A:     KEPT {out['aa_kept']} of {out['aa_trials']}, median rounds {out['aa_median_rounds']}, "
              f"median gated-run wall {out['aa_median_wall_s']:.1f}s")
        return
    print(f"\nlanes, suite {out['suite']}, champion {out['base']}, device {out['device']}:")
    print("lane            effect  kept/trials  median rounds  median s  median speedup")
    for lane, by in out["lanes"].items():
        for e, r in by.items():
            print(f"{lane:15s} {float(e) * 100:5.0f}%  {r['kept']:4d}/{r['trials']:<6d} {r['median_rounds']:13.0f} "
                  f"{r['median_seconds']:9.1f}  {r['median_speedup']:14.3f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("loop", "lanes"), default="loop")
    ap.add_argument("--suite", default="tiny")
    ap.add_argument("--base", default="stock", help="stock, graphs (the ladder's exact champion) or ladder switches")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--effect", type=float, default=0.03, help="loop mode: the planted win")
    ap.add_argument("--effects", default="0,0.01,0.02,0.03,0.05", help="lanes mode: planted wins (0: A/A)")
    ap.add_argument("--lanes", default="", help="lanes mode: only these lanes (comma-separated)")
    ap.add_argument("--start", type=float, default=0.40, help="the champion's planted fraction")
    ap.add_argument("--lane-budget-s", type=float, default=None)
    ap.add_argument("--max-rounds", type=int, default=None)
    ap.add_argument("--device", default=None)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--workdir", default="/tmp/ditar-power")
    ap.add_argument("--out", default="power.json")
    args = ap.parse_args()
    if args.mode == "loop" and (1 + args.start) / (1 + args.effect) ** args.trials < 1:
        raise SystemExit(f"--start {args.start} leaves no room for {args.trials} planted wins of {args.effect:.0%}")
    out = loop_mode(args) if args.mode == "loop" else lanes_mode(args)
    Path(args.out).write_text(json.dumps(out, indent=1, default=str))
    print_table(out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
