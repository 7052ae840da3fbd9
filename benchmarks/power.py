"""Planted-effect power of the objective lane (issue 16): does the gate keep every real win?

A champion carries a known amount of extra time per call (PLANTED: a sleep of that fraction of
the call's own work, after its device is synchronized) and a candidate carries less, so the
candidate is faster by exactly the planted effect with identical outputs (an exact change). Modes,
all judged by the gate's own lane and statistics code:

- `--mode loop`: through `dit-ar experiment` on a scratch research project, as an agent would:
  the baseline carries PLANTED, then experiments alternate an A/A commit (a comment changed) and
  a planted win over the current champion. Counts KEEPs of each kind; rounds, seconds and wall
  per decision; where the wall time went.
- `--mode lanes`: the lane alone (runtime.lanes.measure_lane, loop.perf.lanes.judge with plan_for's
  sequential plan), one champion worker and its twin (a second worker of the champion's code,
  timed in the same randomized rounds) against candidate workers planted 0-5% faster, many
  trials: the power curve and the false-KEEP count for a champion of your choice
  (`--base stock|graphs`). Every trial row keeps its evidence: each side's per-round samples,
  the round orders, the looks, the idle probes and the verdict's reason.
  `--attack interference`: instead of planted wins, an unchanged candidate (the champion's own
  planted fraction: A/A) that leaves large matmuls queued on a side CUDA stream right after each
  call, once the worker has synchronized; the gate should call it UNSTABLE ("interference: ...").
  On CPU the attack does nothing (an inert A/A), so the mode dry-runs there.
- `--mode experiment`: one gated `dit-ar experiment` of a candidate file (`--candidate`) over the
  stock baseline in a scratch project: the verdict line, the run's summary.json and wall times.
- `--table A.json B.json ...`: the verdict table of results written by the modes above.

    python benchmarks/power.py --mode loop --suite tiny --trials 10 --effect 0.03 --out power_cpu.json
    python benchmarks/power.py --mode lanes --suite tiny --trials 20 --out power_lanes_cpu.json
    python benchmarks/power.py --mode lanes --suite dit-xl-2-256 --base graphs --lanes latency_b1 \\
        --effects 0,0.02 --trials 20 --lane-budget-s 8 --out power_h200.json          # on the GPU
    python benchmarks/power.py --mode lanes --base graphs --attack interference --trials 3 --out attack.json
    python benchmarks/power.py --mode experiment --candidate pytest_ditar/demo/candidates/faster_exact.py
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


ATTACK_TAIL = """

# --- interference attack (benchmarks/power.py --attack interference) ---
# An unchanged candidate (the planted pipeline above, the champion's own fraction) that, once a
# call has returned and the worker has synchronized its device, leaves about ATTACK_MS of large
# matmuls queued on a side CUDA stream of its own, unsynchronized. The judge pauses the process
# (SIGSTOP) after the reply, but the queued kernels run on: whichever side is timed next shares
# the device with them. Without CUDA this does nothing.
import math as _att_math
import sys as _att_sys
import threading as _att_threading
import time as _att_time

ATTACK_MS = __ATTACK_MS__  # device time left queued after each call
ATTACK_DELAY_S = __ATTACK_DELAY_S__  # after generate returns: the worker's own torch.cuda.synchronize() comes first
ATTACK_WINDOW_S = 5e-3  # later than this (paused before the launch): skip, the next call is our own
_attack_build = build


class _Leftover:
    def __init__(self, inner, spec):
        self.inner, self.spec = inner, spec
        self.launches = self.skips = 0
        self.count = 0
        self._due = 0.0
        self._go = _att_threading.Event()
        if not (spec.device.startswith("cuda") and ATTACK_MS > 0):
            return
        import torch

        self.dev = torch.device(spec.device)
        if self.dev.index is None:
            self.dev = torch.device("cuda", torch.cuda.current_device())
        self.stream = torch.cuda.Stream(device=self.dev)
        n = 12288  # 3.7 TFLOP a matmul (~5 ms on an H200): a handful of launches, queued in microseconds
        with torch.cuda.stream(self.stream):
            self.a = torch.randn(n, n, device=self.dev, dtype=torch.float16)
            self.b = torch.randn(n, n, device=self.dev, dtype=torch.float16)
            self.c = torch.empty(n, n, device=self.dev, dtype=torch.float16)
            for _ in range(3):
                torch.mm(self.a, self.b, out=self.c)
            t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0.record(self.stream)
            for _ in range(5):
                torch.mm(self.a, self.b, out=self.c)
            t1.record(self.stream)
        t1.synchronize()
        per_ms = max(t0.elapsed_time(t1) / 5, 1e-3)
        self.count = max(1, min(2000, _att_math.ceil(ATTACK_MS / per_ms)))
        print(f"[attack] {self.count} matmuls of {per_ms:.2f} ms queued after each call", file=_att_sys.stderr,
              flush=True)
        _att_sys.setswitchinterval(1e-4)  # the launching thread gets the GIL within the window
        _att_threading.Thread(target=self._loop, name="leftover", daemon=True).start()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate(self, request):
        out = self.inner.generate(request)  # synchronized by the planted wrapper
        if self.count:
            self._due = _att_time.perf_counter() + ATTACK_DELAY_S
            self._go.set()
        return out

    def _loop(self):
        import torch

        torch.cuda.set_device(self.dev)
        while True:
            self._go.wait()
            self._go.clear()
            wait = self._due - _att_time.perf_counter()
            if wait > 0:
                _att_time.sleep(wait)
            if _att_time.perf_counter() - self._due > ATTACK_WINDOW_S:  # stopped before the launch: it
                self.skips += 1  # would land in our own next call
                if self.skips in (1, 10, 100) or self.skips % 500 == 0:
                    print(f"[attack] skip {self.skips} (paused before the launch), {self.launches} launches so far",
                          file=_att_sys.stderr, flush=True)
                continue
            with torch.cuda.stream(self.stream):
                for _ in range(self.count):
                    torch.mm(self.a, self.b, out=self.c)
            self.launches += 1
            if self.launches in (1, 10, 100) or self.launches % 500 == 0:
                late = (_att_time.perf_counter() - self._due) * 1e3
                print(f"[attack] launch {self.launches}, queued {late:.2f} ms after it was due", file=_att_sys.stderr,
                      flush=True)


def build(spec):  # noqa: F811 - the attack around the planted pipeline above
    return _Leftover(_attack_build(spec), spec)
"""


def attacked(source: str, fraction: float, attack_ms: float, delay_ms: float = 0.2) -> str:
    """The planted pipeline at `fraction` (the champion's: an A/A) plus the interference attack."""
    return planted(source, fraction) + (ATTACK_TAIL.replace("__ATTACK_MS__", repr(float(attack_ms)))
                                        .replace("__ATTACK_DELAY_S__", repr(delay_ms / 1e3)))


# ------------------------------------------------------------------ loop mode


def _project(ws: Path, args) -> tuple[Path, dict]:
    """A scratch research project (ladder.setup) and its config with this run's lane settings."""
    from ladder import setup

    setup(ws, args.suite)
    cfg_path = ws / "config/autoresearch.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["perf"].update({k: v for k, v in (("lane_budget_s", args.lane_budget_s), ("max_rounds", args.max_rounds))
                        if v is not None})
    if getattr(args, "sandbox", None):
        cfg["sandbox"] = args.sandbox  # before the baseline: the project owner's choice
    return cfg_path, cfg


def loop_mode(args) -> dict:
    from ladder import ditar, git

    ws = Path(args.workdir)
    cfg_path, cfg = _project(ws, args)
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
        before = set((ws / ".autoresearch/power/runs").glob("*/summary.json"))
        t0 = time.perf_counter()
        res = ditar(ws, "experiment", "--classification", "exact", "--description", subject, check=False)
        wall = time.perf_counter() - t0
        last = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else res.stderr.strip()[-300:]
        status = last.split()[2] if last.startswith("DITAR VERDICT") else "REFUSED"
        runs = sorted(set((ws / ".autoresearch/power/runs").glob("*/summary.json")) - before,
                      key=lambda p: p.stat().st_mtime)  # this trial's run only: a refused one wrote none
        summary = json.loads(runs[-1].read_text()) if runs else {}
        if status == "REFUSED":  # nothing was judged or reverted: take the commit back, or every later trial is refused
            git(ws, "reset", "-q", "--hard", "HEAD~1")
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


def per_lane(text, cast, lanes) -> dict:
    """`12` (every lane) or `latency_b1=12,throughput_b8=6` (lanes not named get the first bare value, else None)."""
    out: dict = {}
    default = None
    for part in filter(None, str(text).split(",")):
        key, eq, value = part.partition("=")
        if eq:
            out[key.strip()] = cast(value)
        else:
            default = cast(key)
    unknown = set(out) - set(lanes)
    if unknown:
        raise SystemExit(f"unknown lane(s) {', '.join(sorted(unknown))}: the suite has {', '.join(lanes)}")
    return {lane: out.get(lane, default) for lane in lanes}


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def trial_row(label: str, t: int, m, res) -> dict:
    """One trial with its evidence: every side's per-round samples, the orders, looks, probes, reason."""
    oc = res.outcome
    twin = (res.comparison or {}).get("twin_vs_champion") or {}
    return {"candidate": label, "trial": t, "verdict": oc.verdict, "reason": oc.reason, "speedup": oc.speedup,
            "ci": [oc.ci_low, oc.ci_high], "min_effect": res.min_effect, "rounds": len(m.samples),
            "seconds": m.wall_s, "timed_s": m.timed_s, "undecided": m.undecided,
            "twin_vs_champion": twin.get("speedup"), "foreign": [vars(f) for f in m.foreign()],
            "samples": m.samples, "champion_samples": m.champion_samples, "twin_samples": m.twin_samples,
            "warmup_s": m.warmup_s, "champion_warmup_s": m.champion_warmup_s, "orders": m.orders,
            "looks": m.looks, "probes": m.probes, "pids": m.pids, "overhead_s": m.overhead_s,
            "peak_reserved_gib": m.peak_reserved_gib}


def _plan(args, champ, twin, suite, lanes, plans, perf) -> dict:
    """Issue 41: the planner's smallest win per lane (loop.perf.reach), before any candidate worker
    exists, from an A/A: the champion against its twin (two processes, as a gated run's
    references; --plan-aa twin) or against itself as `dit-ar baseline` times it (--plan-aa self)."""
    from dataclasses import replace

    from pytest_ditar.loop.perf.reach import lane_reach
    from pytest_ditar.runtime.lanes import measure_lane

    out = {}
    for w in (champ, twin):
        if w is not None:
            w.built(args.timeout)
    for lane in lanes:
        if twin is not None:
            twin.pause()
        other = twin if args.plan_aa == "twin" and twin is not None else champ
        aa = measure_lane(champ, suite, lane, champion=other, timeout_s=args.timeout)
        r = lane_reach(aa.to_dict(), lane, replace(perf, lane_budget_s=plans[lane.name].budget_s, twin=bool(args.twin)))
        out[lane.name] = vars(r) if r is not None else None
        print(f"[power] {lane.name} planner: {r.text() if r else 'no A/A rounds'}", flush=True)
    return out


class _Deadline(Exception):
    """The next trial would likely end past --deadline-s."""


def lanes_mode(args) -> dict:
    import signal
    from dataclasses import replace

    from pytest_ditar.config.project import PerfConfig
    from pytest_ditar.config.suite import load_suite
    from pytest_ditar.loop.perf.lanes import judge, plan_for
    from pytest_ditar.runtime.calls import new_stream
    from pytest_ditar.runtime.harness import make_spec, pick_device
    from pytest_ditar.runtime.lanes import measure_lane
    from pytest_ditar.runtime.models import resolve_model_dir
    from pytest_ditar.runtime.worker import CandidateWorker

    from worker_overhead import device_label, write_candidate

    t_start = time.perf_counter()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a `timeout` still closes every worker
    suite = load_suite(ROOT / "suites" / args.suite)
    names = [lane.name for lane in suite.lanes]
    wanted = [n for n in (args.lanes.split(",") if args.lanes else names) if n]
    lanes = [lane for lane in suite.lanes if lane.name in wanted]
    if not lanes or set(wanted) - set(names):
        raise SystemExit(f"--lanes {args.lanes}: the suite has {', '.join(names)}")
    trials = per_lane(args.trials, int, names)
    budgets = per_lane(args.lane_budget_s, float, names) if args.lane_budget_s is not None else {}
    device = pick_device(args.device)
    spec = make_spec(suite, resolve_model_dir(suite), device)
    perf = replace(PerfConfig(), max_rounds=args.max_rounds or PerfConfig.max_rounds)
    plans = {lane.name: plan_for(lane, replace(perf, lane_budget_s=budgets.get(lane.name) or perf.lane_budget_s))
             for lane in lanes}
    src = base_source(args.base)
    logs = Path(args.logs or tempfile.mkdtemp(prefix="ditar-power-"))
    logs.mkdir(parents=True, exist_ok=True)
    from pytest_ditar.runtime import sandbox_check

    boxed = sandbox_check.check() is None  # as a gated run's workers, where this host can make the sandbox
    print(f"[power] workers {'in the sandbox' if boxed else 'unsandboxed: ' + str(sandbox_check.check())}", flush=True)

    def worker(name: str, source: str) -> CandidateWorker:
        w = CandidateWorker(name, write_candidate(source, f"power-{name}-"), spec, log_path=logs / f"{name}.log",
                            sandboxed=boxed)
        w.start().request_build()
        return w

    champ = worker("champion", planted(src, args.start))
    twin = worker("twin", planted(src, args.start)) if args.twin else None
    planner = _plan(args, champ, twin, suite, lanes, plans, perf) if args.plan else {}
    if args.attack:
        labels = {args.attack: None}
    else:
        if args.effects.startswith("plan:"):  # multiples of the planner's effect (one lane), and A/A
            base = planner[lanes[0].name]["effect"]
            effects = [0.0] + [round(base * float(x), 4) for x in args.effects[5:].split(",")]
        else:
            effects = [float(e) for e in args.effects.split(",")]
        if faster_by(args.start, max(effects)) < 0:
            raise SystemExit(f"--start {args.start} leaves no room for a planted win of {max(effects):.0%}")
        labels = {f"{e:g}": e for e in effects}
    cands = {}
    for label, e in labels.items():
        source = (attacked(src, args.start, args.attack_ms, args.attack_delay_ms) if e is None
                  else planted(src, faster_by(args.start, e)))
        cands[label] = worker(f"cand-{label}", source)
    everyone = [w for w in (champ, twin, *cands.values()) if w is not None]
    out = {"mode": "lanes", "suite": args.suite, "base": args.base, "device": device_label(device),
           "attack": args.attack, "attack_ms": args.attack_ms if args.attack else None,
           "attack_delay_ms": args.attack_delay_ms if args.attack else None, "start": args.start,
           "twin": bool(args.twin), "logs": str(logs),
           "perf": {"alpha": perf.alpha, "min_speedup": perf.min_speedup, "max_rounds": perf.max_rounds,
                    "max_cv": perf.max_cv, "lane_budget_s": {n: sq.budget_s for n, sq in plans.items()},
                    "looks": {n: list(sq.plan.looks) for n, sq in plans.items()}},
           "trials": {lane.name: trials[lane.name] for lane in lanes}, "lanes": {}, "cut": None,
           "planner": planner}
    t0 = time.perf_counter()
    try:
        for w in everyone:
            w.built(args.timeout)
        out["build_s"] = time.perf_counter() - t0
        print(f"[power] {len(everyone)} workers built in {out['build_s']:.1f}s on {out['device']}", flush=True)
        stream = new_stream(suite)
        rows = {lane.name: {label: [] for label in labels} for lane in lanes}
        longest: dict = {}
        # Trial by trial across the lanes, so a deadline cuts every lane alike.
        for t in range(max(trials[lane.name] or 0 for lane in lanes)):
            for lane in lanes:
                if t >= (trials[lane.name] or 0):
                    continue
                sq = plans[lane.name]
                for label, cand in cands.items():
                    guess = longest.get(lane.name, sq.budget_s * 1.3 + 5.0)
                    if args.deadline_s and time.perf_counter() - t_start + guess > args.deadline_s:
                        out["cut"] = (f"--deadline-s {args.deadline_s:g}: stopped before {lane.name} trial {t + 1} "
                                      f"({label}), which would likely end past it")
                        raise _Deadline
                    for w in everyone:  # the workers outside this lane stay paused
                        if w not in (cand, champ, twin):
                            w.pause()
                    one_core = {"on": True, "off": False}.get(args.one_core, t % 2 == 0)  # "ab": alternate per trial
                    m = measure_lane(cand, suite, lane, champion=champ, twin=twin, timeout_s=args.timeout,
                                     stream=stream, sequential=sq, one_core=one_core)
                    longest[lane.name] = max(longest.get(lane.name, 0.0), m.wall_s)
                    res = judge(m, m.champion_samples, objective=True, source="interleaved", noise=None,
                                perf_cfg=perf, sequential=sq, cpu=device == "cpu")
                    row = trial_row(label, t, m, res)
                    row["one_core"] = one_core
                    rows[lane.name][label].append(row)
                    sp = f"{row['speedup']:.3f}x" if row["speedup"] is not None else "-"
                    tw = f" twin {row['twin_vs_champion']:.3f}x" if row["twin_vs_champion"] is not None else ""
                    print(f"[power] {lane.name} trial {t + 1} {_label(label)}: {row['verdict']} {sp}{tw} in "
                          f"{row['rounds']} rounds, {m.wall_s:.1f}s; {row['reason'][:160]}", flush=True)
                    out["lanes"] = {n: _tally(r) for n, r in rows.items() if any(r.values())}
                    out["wall_s"] = time.perf_counter() - t_start
                    Path(args.out).write_text(json.dumps(out, indent=1, default=str))  # a cut run keeps its trials
    except _Deadline:
        print(f"[power] {out['cut']}", flush=True)
    finally:
        for w in everyone:
            w.close()
    out["wall_s"] = time.perf_counter() - t_start
    return out


def _label(label: str) -> str:
    try:
        return f"effect {float(label):.0%}"
    except ValueError:
        return f"attack {label}"


def _tally(rows: dict) -> dict:
    out = {}
    for label, r in rows.items():
        if not r:
            continue
        counts: dict = {}
        for x in r:
            counts[x["verdict"]] = counts.get(x["verdict"], 0) + 1
        out[label] = {"trials": len(r), "kept": counts.get("FASTER", 0), "verdicts": counts,
                      "median_rounds": _median(x["rounds"] for x in r),
                      "median_seconds": _median(x["seconds"] for x in r),
                      "median_speedup": _median(x["speedup"] for x in r),
                      "median_twin_vs_champion": _median(x["twin_vs_champion"] for x in r),
                      "reasons": sorted({x["reason"].split(" [")[0][:300] for x in r if x["verdict"] != "FASTER"})[:5],
                      "rows": r}
    return out


# ------------------------------------------------------------------ experiment mode


def experiment_mode(args) -> dict:
    """One gated experiment through `dit-ar experiment`: baseline of the stock pipeline, then the
    candidate file committed as mutable/pipeline.py (an exact claim), judged by the real loop."""
    from ladder import ditar, git

    t_start = time.perf_counter()
    ws = Path(args.workdir)
    cfg_path, cfg = _project(ws, args)
    if cfg_path.read_text() != json.dumps(cfg, indent=1):
        cfg_path.write_text(json.dumps(cfg, indent=1))
        git(ws, "commit", "-qam", "Lane budget for this benchmark")
    out = {"mode": "experiment", "suite": args.suite, "candidate": args.candidate, "config_perf": cfg["perf"]}
    ditar(ws, "init", "--tag", "power")
    t0 = time.perf_counter()
    res = ditar(ws, "baseline", check=False)
    out["baseline_s"] = time.perf_counter() - t0
    out["baseline_out"] = res.stdout[-4000:] + res.stderr[-2000:]
    print(res.stdout.strip()[-2000:], flush=True)
    Path(args.out).write_text(json.dumps(out, indent=1, default=str))  # a cut run keeps its baseline
    if res.returncode != 0:
        out["verdict_line"] = f"BASELINE FAILED rc={res.returncode}"
        print(res.stderr[-3000:])
        return out
    (ws / "mutable/pipeline.py").write_text((ROOT / args.candidate).read_text())
    subject = args.description or f"{Path(args.candidate).stem}: one exact change"
    git(ws, "commit", "-qam", f"{subject}\n\nDitar-Class: {args.classification}")
    t0 = time.perf_counter()
    res = ditar(ws, "experiment", "--classification", args.classification, "--description", subject, check=False)
    out["experiment_s"] = time.perf_counter() - t0
    lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
    out["verdict_line"] = next((ln for ln in reversed(lines) if ln.startswith("DITAR VERDICT")),
                               lines[-1] if lines else res.stderr.strip()[-300:])
    out["experiment_out"] = res.stdout[-6000:] + res.stderr[-3000:]
    runs = sorted((ws / ".autoresearch/power/runs").glob("*/summary.json"), key=lambda p: p.stat().st_mtime)
    out["summary"] = json.loads(runs[-1].read_text()) if runs else None
    out["wall_s"] = time.perf_counter() - t_start
    print("\n".join(lines[-12:]), flush=True)
    return out


# ------------------------------------------------------------------ tables


def aa_noise(rows: list) -> dict:
    """The A/A noise of trials run at effect 0: paired CI half-width (candidate vs champion, and
    twin vs champion) and robust CV per side, medians over the trials."""
    from pytest_ditar.core import stats

    half, twin_half, cvs = [], [], {"candidate": [], "champion": [], "twin": []}
    for r in rows:
        if len(r["samples"]) >= 3 and len(r["champion_samples"]) == len(r["samples"]):
            half.append(stats.paired_noise_floor(r["samples"], r["champion_samples"]).ci_half_width)
        if len(r.get("twin_samples") or []) == len(r["champion_samples"]) >= 3:
            twin_half.append(stats.paired_noise_floor(r["twin_samples"], r["champion_samples"]).ci_half_width)
        for side, key in (("candidate", "samples"), ("champion", "champion_samples"), ("twin", "twin_samples")):
            if len(r.get(key) or []) >= 3:
                cvs[side].append(stats.robust_cv(r[key]))
    return {"paired_half_width": _median(half), "twin_paired_half_width": _median(twin_half),
            "robust_cv": {k: _median(v) for k, v in cvs.items()},
            "median_ms": _median(statistics.median(r["champion_samples"]) * 1e3 for r in rows if r["champion_samples"])}


def effect_at_power(by: dict, power: float = 0.8) -> float | None:
    """The planted effect whose KEEP rate reaches `power`, interpolated linearly between the two
    effects around it (None where no effect reached it)."""
    pts = sorted((float(label), r["kept"] / r["trials"]) for label, r in by.items()
                 if label[0].isdigit() and float(label) > 0 and r["trials"])
    prev = (0.0, 0.0)
    for e, rate in pts:
        if rate >= power:
            (e0, r0) = prev
            return e0 + (e - e0) * (power - r0) / (rate - r0) if rate > r0 else e
        prev = (e, rate)
    return None


def _pct(x) -> str:
    return "-" if x is None else f"{x * 100:.2f}%"


def print_table(out: dict) -> None:
    if out["mode"] == "loop":
        print(f"\nloop, suite {out['suite']}, planted {out['effect']:.0%} exact win vs A/A:")
        print(f"  planted: KEPT {out['planted_kept']} of {out['planted_trials']}, median rounds "
              f"{out['planted_median_rounds']}, median gated-run wall {out['planted_median_wall_s']:.1f}s")
        print(f"  A/A:     KEPT {out['aa_kept']} of {out['aa_trials']}, median rounds {out['aa_median_rounds']}, "
              f"median gated-run wall {out['aa_median_wall_s']:.1f}s")
        return
    if out["mode"] == "experiment":
        s = out.get("summary") or {}
        print(f"\nexperiment, suite {out['suite']}, {out['candidate']} over the stock baseline "
              f"(baseline {out.get('baseline_s', 0):.0f}s, experiment {out.get('experiment_s', 0):.0f}s):")
        print(f"  {out.get('verdict_line')}")
        if s.get("reason"):
            print(f"  reason: {s['reason'][:300]}")
        for line in (out.get("baseline_out") or "").splitlines():
            if line.startswith("  lane "):
                print(f"  baseline (stock A/A):{line[1:]}")
        for lane, d in (s.get("lanes") or {}).items():
            m = d.get("measurement", {})
            med = {side: statistics.median(m[k]) * 1e3 for side, k in
                   (("candidate", "samples"), ("champion", "champion_samples"), ("twin", "twin_samples")) if m.get(k)}
            twin = (d.get("comparison") or {}).get("twin_vs_champion") or {}
            tw = (f", twin vs champion {twin['speedup']:.3f}x [{twin['ci_low']:.3f},{twin['ci_high']:.3f}]"
                  if twin.get("speedup") else "")
            print(f"  lane {lane}: {d.get('outcome', {}).get('verdict')} in {len(m.get('samples', []))} rounds, "
                  f"{m.get('wall_s') or 0:.1f}s; medians ms " + " ".join(f"{k} {v:.1f}" for k, v in med.items())
                  + tw)
        return
    what = f"attack {out['attack']} ({out['attack_ms']:g} ms)" if out.get("attack") else "planted wins"
    print(f"\nlanes, suite {out['suite']}, champion {out['base']} (start {out['start']:g}, "
          f"twin {'on' if out.get('twin') else 'off'}), {what}, device {out['device']}:")
    print(f"{'lane':15s} {'candidate':>12s} {'trials':>6s} {'FASTER':>6s} {'NOT_F':>6s} {'UNSTAB':>6s} {'other':>6s} "
          f"{'med rounds':>10s} {'med s':>7s} {'med x':>7s} {'twin x':>7s}")
    for lane, by in out["lanes"].items():
        for label, r in by.items():
            v = r["verdicts"]
            other = r["trials"] - v.get("FASTER", 0) - v.get("NOT_FASTER", 0) - v.get("UNSTABLE", 0)
            med = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
            name = f"{float(label) * 100:.0f}%" if label[0].isdigit() else label
            print(f"{lane:15s} {name:>12s} {r['trials']:6d} {v.get('FASTER', 0):6d} {v.get('NOT_FASTER', 0):6d} "
                  f"{v.get('UNSTABLE', 0):6d} {other:6d} {r['median_rounds']:10.0f} {r['median_seconds']:7.1f} "
                  f"{med(r['median_speedup']):>7s} {med(r['median_twin_vs_champion']):>7s}")
            for reason in r["reasons"][:2]:
                print(f"{'':15s}   {reason[:230]}")
        aa = [x for label, r in by.items() if label == "0" for x in r["rows"]]
        if aa:
            n = aa_noise(aa)
            print(f"{lane:15s} A/A noise: paired CI half-width {_pct(n['paired_half_width'])} (twin vs champion "
                  f"{_pct(n['twin_paired_half_width'])}), robust CV champion {_pct(n['robust_cv']['champion'])} "
                  f"candidate {_pct(n['robust_cv']['candidate'])} twin {_pct(n['robust_cv']['twin'])}, "
                  f"champion median {n['median_ms']:.1f} ms")
        plan = (out.get("planner") or {}).get(lane)
        if plan:
            seen = effect_at_power(by)
            ratio = f", ratio {seen / plan['effect']:.2f}" if seen and plan["effect"] > 0 else ""
            print(f"{lane:15s} planner (loop.perf.reach, from an A/A before the trials): "
                  f"1+{plan['effect'] * 100:.1f}% at {plan['power']:.0%} power (spread {plan['spread'] * 100:.1f}%, "
                  f"{plan['rounds']} rounds); "
                  f"measured: " + (f"{seen * 100:.1f}%{ratio}" if seen else f"no effect kept {plan['power']:.0%}"))
    if out.get("cut"):
        print(f"cut: {out['cut']}")


def tables(paths: list[str]) -> int:
    for p in paths:
        try:
            out = json.loads(Path(p).read_text())
        except (OSError, ValueError) as exc:
            print(f"\n{p}: no result ({exc})")
            continue
        print(f"\n== {Path(p).name}", end="")
        print_table(out)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("loop", "lanes", "experiment"), default="loop")
    ap.add_argument("--table", nargs="+", metavar="JSON", help="print the tables of these results and exit")
    ap.add_argument("--suite", default="tiny")
    ap.add_argument("--base", default="stock", help="stock, graphs (the ladder's exact champion) or ladder switches")
    ap.add_argument("--trials", default="10", help="trials; lanes mode also per lane: latency_b1=12,throughput_b8=6")
    ap.add_argument("--effect", type=float, default=0.03, help="loop mode: the planted win")
    ap.add_argument("--effects", default="0,0.01,0.02,0.03,0.05",
                    help="lanes mode: planted wins (0: A/A); with --plan, `plan:0.67,1,1.5` plants those multiples "
                         "of the planner's effect, beside an A/A")
    ap.add_argument("--lanes", default="", help="lanes mode: only these lanes (comma-separated)")
    ap.add_argument("--attack", choices=("interference",), default=None,
                    help="lanes mode: time this attack candidate (an unchanged pipeline) instead of planted wins")
    ap.add_argument("--attack-ms", type=float, default=30.0, help="device time the attack leaves queued per call")
    ap.add_argument("--attack-delay-ms", type=float, default=0.2,
                    help="the attack's wait after generate returns (the worker syncs first), before it queues")
    ap.add_argument("--plan", action="store_true",
                    help="lanes mode: first an A/A of the champion as the baseline times it, and the planner's "
                         "smallest resolvable win from it (loop.perf.reach), beside the measured KEEP rates")
    ap.add_argument("--plan-aa", choices=("twin", "self"), default="twin",
                    help="--plan's A/A: champion against its twin (default) or against itself (the baseline's)")
    ap.add_argument("--no-twin", dest="twin", action="store_false", help="lanes mode: no twin of the champion")
    ap.add_argument("--one-core", choices=("on", "off", "ab"), default="on",
                    help="lanes mode: every side's launching thread on one core (the gate's default), not pinned, "
                         "or alternating per trial (ab) to compare the two")
    ap.add_argument("--start", type=float, default=0.40, help="the champion's planted fraction")
    ap.add_argument("--lane-budget-s", default=None, help="seconds per lane run; lanes mode also latency_b1=8,...")
    ap.add_argument("--max-rounds", type=int, default=None)
    ap.add_argument("--sandbox", choices=["on", "off"], default=None,
                    help="loop and experiment modes: the project's sandbox key (default: the config's, on)")
    ap.add_argument("--deadline-s", type=float, default=None,
                    help="lanes mode: start no trial that would likely end past this many seconds from the start")
    ap.add_argument("--candidate", default="pytest_ditar/demo/candidates/faster_exact.py",
                    help="experiment mode: the candidate file, relative to the repository")
    ap.add_argument("--classification", default="exact", help="experiment mode: the candidate's class")
    ap.add_argument("--description", default=None, help="experiment mode: the commit subject")
    ap.add_argument("--device", default=None)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--workdir", default="/tmp/ditar-power")
    ap.add_argument("--logs", default=None, help="lanes mode: the workers' logs here (default: a temporary folder)")
    ap.add_argument("--out", default="power.json")
    args = ap.parse_args()
    if args.table:
        return tables(args.table)
    if args.mode != "lanes":
        if not args.trials.isdigit():
            raise SystemExit(f"--trials {args.trials}: per-lane trials are for --mode lanes")
        args.trials = int(args.trials)
        args.lane_budget_s = float(args.lane_budget_s) if args.lane_budget_s is not None else None
    if args.mode == "loop" and (1 + args.start) / (1 + args.effect) ** args.trials < 1:
        raise SystemExit(f"--start {args.start} leaves no room for {args.trials} planted wins of {args.effect:.0%}")
    mode = {"loop": loop_mode, "lanes": lanes_mode, "experiment": experiment_mode}[args.mode]
    out = mode(args)
    Path(args.out).write_text(json.dumps(out, indent=1, default=str))
    print_table(out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
