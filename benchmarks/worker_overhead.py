"""What the candidate worker costs a lane: in-process generate vs the worker's round trip.

Candidate code runs in a worker process (pytest_ditar.runtime.worker); a lane sample is the
judge's clock from the request sent to the outputs received. This benchmark builds the same
pipeline twice, once in this process (`harness.build_candidate`, the worker's own function) and
once in a `CandidateWorker`, and for each lane of the suite, after warm-up, times N rounds
interleaved ABBA (in-process, worker, worker, in-process, ...) with the lane's request:

- in-process: generate + device sync on time.perf_counter, exactly what the old in-process lanes
  timed, with the worker paused (SIGSTOP) so nothing of it runs meanwhile;
- worker: `CandidateWorker.generate`, the judge's clock (request sent -> arrays received; the
  worker syncs its device before it replies), as `runtime.lanes` times it (worker resumed first,
  GC off on both sides as in a steady lane).

Per lane: both medians, the paired ratio worker/in-process (median per-round ratio, rounds
resampled for a bootstrap 95% CI: `stats.paired_noise_floor`), the round trip's own cost
(judge seconds - the worker's own generate+sync time, per call), and the worker's own time vs
in-process. Also the cost of one pause/resume pair and the transport alone: a worker whose
generate returns fixed arrays of 8x256x256x3 uint8 + 8x4x32x32 float32 (throughput_b8's reply
on dit-xl-2-256). Targets (the issue): the round trip adds at most 1% to a latency_b1 call and
0.5% to a throughput_b8 call on an NVIDIA H200 (dit-xl-2-256).

    python benchmarks/worker_overhead.py --suite tiny --out /tmp/wo.json                  # CPU smoke
    python benchmarks/worker_overhead.py --suite dit-xl-2-256 --out wo_stock.json          # GPU, stock
    python benchmarks/worker_overhead.py --suite dit-xl-2-256 --render champion --out wo_champion.json
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402

from pytest_ditar.config.suite import load_suite  # noqa: E402
from pytest_ditar.core import stats  # noqa: E402
from pytest_ditar.runtime.calls import lane_request  # noqa: E402
from pytest_ditar.runtime.clock import judge_clock  # noqa: E402
from pytest_ditar.runtime.harness import make_spec, no_gc, pick_device  # noqa: E402
from pytest_ditar.runtime.worker import CandidateWorker  # noqa: E402
from pytest_ditar.runtime.worker_process import only_running  # noqa: E402

TARGETS = {"latency_b1": 0.01, "throughput_b8": 0.005}  # the issue's, for dit-xl-2-256 on an H200
# The ladder's exact champion (docs/benchmarks.md, run 3): every exact rung kept, CUDA graphs last.
CHAMPION_RUNGS = ("lean", "fused_qkv", "batched_cond", "cuda_graphs")

TRANSPORT_PIPELINE = '''"""Transport probe: generate returns fixed arrays at once (no model, no device work)."""
import numpy as np

from pytest_ditar.interface import Generated


class Fixed:
    def __init__(self):
        self.latents = np.random.default_rng(0).standard_normal(({n}, 4, {lat}, {lat}), dtype=np.float32)
        self.images = np.random.default_rng(1).integers(0, 256, ({n}, {res}, {res}, 3), dtype=np.uint8)

    def generate(self, request):
        return Generated(self.latents, self.images)


def build(spec):
    return Fixed()
'''


def write_candidate(source: str, prefix: str) -> Path:
    d = Path(tempfile.mkdtemp(prefix=prefix))
    (d / "__init__.py").write_text("")
    (d / "pipeline.py").write_text(source)
    return d


def rendered_flags(text: str) -> dict:
    """`champion`, or KEY=VALUE,... switches of the ladder's template (on top of its defaults)."""
    from ladder import DEFAULTS, RUNGS

    flags = dict(DEFAULTS)
    if text == "champion":
        for name, _cls, _subject, updates, _expected in RUNGS:
            if name in CHAMPION_RUNGS:
                flags.update(updates)
        return flags
    for part in filter(None, text.split(",")):
        key, _, value = part.partition("=")
        if key not in DEFAULTS:
            raise SystemExit(f"--render: unknown switch {key!r} (one of {', '.join(DEFAULTS)})")
        flags[key] = ast.literal_eval(value) if value else True
    return flags


def device_label(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip() + f" ({os.cpu_count()} cores)"
    return platform.processor() or "cpu"


def median_ms(xs) -> float:
    return statistics.median(xs) * 1e3


def measure_lane(inproc, worker: CandidateWorker, suite, lane, rounds: int, warmup: int, timeout_s: float) -> dict:
    """Warm-up on both sides, then `rounds` ABBA rounds of the same request."""
    req = lane_request(suite, lane)
    inproc_s, judge_s, own_s, stamps = [], [], [], []

    def run_inproc(keep: bool):
        worker.pause()  # nothing of the worker runs while this process is timed
        seconds, gen = inproc.timed(req)
        if keep:
            inproc_s.append(seconds)
        return gen

    def run_worker(keep: bool):
        with only_running(worker, [worker]):  # resumed before the clock starts, as runtime.lanes does
            out = worker.generate(req, timeout_s)
        if keep:
            judge_s.append(out.seconds)
            own_s.append(out.worker_s)
            stamps.append(out.stamps)
        return out

    gen = out = None
    for _ in range(warmup):
        gen = run_inproc(False)
    for _ in range(warmup):
        out = run_worker(False)
    identical = None
    if gen is not None and out is not None:
        lat = gen.latents.detach().float().cpu().numpy() if hasattr(gen.latents, "detach") else np.asarray(gen.latents)
        identical = bool(np.array_equal(lat, out.latents) and np.array_equal(np.asarray(gen.images), out.images))
    worker.steady(True)  # GC off in the worker (and, below, in the judge): a steady lane
    try:
        with no_gc():
            for r in range(rounds):
                if r % 2 == 0:
                    run_inproc(True)
                    run_worker(True)
                else:
                    run_worker(True)
                    run_inproc(True)
    finally:
        worker.resume()
        worker.steady(False)
    rt = [j - o for j, o in zip(judge_s, own_s)]
    paired = stats.paired_noise_floor(judge_s, inproc_s)  # ratio worker / in-process, per round
    target = TARGETS.get(lane.name)
    rt_frac = statistics.median(rt) / statistics.median(inproc_s)
    return {
        "lane": lane.name, "batch": lane.batch, "rounds": rounds, "warmup": warmup, "outputs_identical": identical,
        "inprocess_median_ms": median_ms(inproc_s), "worker_median_ms": median_ms(judge_s),
        "worker_own_median_ms": median_ms(own_s),
        "inprocess_robust_cv": stats.robust_cv(inproc_s), "worker_robust_cv": stats.robust_cv(judge_s),
        "paired_ratio": paired.ratio, "paired_ci95": [paired.ci_low, paired.ci_high],
        "ratio_of_medians": statistics.median(judge_s) / statistics.median(inproc_s),
        "round_trip_median_ms": median_ms(rt), "round_trip_p90_ms": float(np.percentile(rt, 90)) * 1e3,
        "round_trip_fraction": rt_frac,
        "worker_own_vs_inprocess": statistics.median(own_s) / statistics.median(inproc_s),
        "target": target,
        "target_met_paired": None if target is None else paired.ci_high <= 1 + target,
        "target_met_point": None if target is None else paired.ratio <= 1 + target,
        "target_met_round_trip": None if target is None else rt_frac <= target,
        "breakdown_ms": breakdown(stamps),
        "samples": {"inprocess_s": inproc_s, "worker_judge_s": judge_s, "worker_own_s": own_s},
    }


STEPS = (("sent", "received"), ("received", "generated"), ("generated", "converted"), ("converted", "written"),
         ("written", "header"), ("header", "copied"))


def breakdown(stamps: list) -> dict:
    """Median ms of each step of a round trip (one monotonic clock for both processes on Linux)."""
    out = {}
    for a, b in STEPS:
        xs = [s[b] - s[a] for s in stamps if a in s and b in s]
        if xs:
            out[f"{a}->{b}"] = median_ms(xs)
    return out


def pause_resume_cost(worker: CandidateWorker, reps: int) -> dict:
    """One pause/resume pair on the judge's clock, and what a small op pays right after a resume."""
    pair = []
    for _ in range(reps):
        t0 = judge_clock()
        worker.pause()
        worker.resume()
        pair.append(judge_clock() - t0)
    warm, after = [], []
    for _ in range(reps):
        t0 = judge_clock()
        worker.memory()
        warm.append(judge_clock() - t0)
        worker.pause()
        time.sleep(0.002)  # let the stop land, as between two sides of a round
        worker.resume()
        t0 = judge_clock()
        worker.memory()
        after.append(judge_clock() - t0)
    return {"reps": reps, "pair_median_ms": median_ms(pair), "pair_p90_ms": float(np.percentile(pair, 90)) * 1e3,
            "small_op_warm_median_ms": median_ms(warm), "small_op_after_resume_median_ms": median_ms(after),
            "after_resume_extra_ms": median_ms(after) - median_ms(warm)}


def transport_cost(worker: CandidateWorker, reps: int, timeout_s: float, suite) -> dict:
    req = lane_request(suite, suite.lanes[0])
    for _ in range(5):
        out = worker.generate(req, timeout_s)
    judge, own = [], []
    with no_gc():
        for _ in range(reps):
            out = worker.generate(req, timeout_s)
            judge.append(out.seconds)
            own.append(out.worker_s)
    nbytes = out.latents.nbytes + out.images.nbytes
    rt = [j - o for j, o in zip(judge, own)]
    return {"reps": reps, "latents": f"{out.latents.dtype}{list(out.latents.shape)}",
            "images": f"{out.images.dtype}{list(out.images.shape)}", "bytes": nbytes,
            "round_trip_median_ms": median_ms(judge), "round_trip_p90_ms": float(np.percentile(judge, 90)) * 1e3,
            "worker_own_median_ms": median_ms(own), "transport_median_ms": median_ms(rt),
            "throughput_mb_s": nbytes / 1e6 / statistics.median(rt)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default="tiny", help="suite under suites/ (tiny on CPU; dit-xl-2-256 on the GPU)")
    ap.add_argument("--candidate", default=str(ROOT / "mutable"),
                    help="candidate package dir (default: mutable/, stock)")
    ap.add_argument("--render", metavar="SWITCHES",
                    help="instead of --candidate: the ladder's template with these switches, 'champion' (the "
                         "ladder's exact champion: lean, fused QKV, batched conditioning, CUDA graphs) or "
                         "KEY=VALUE,... on top of ladder.DEFAULTS (e.g. CUDA_GRAPHS=True)")
    ap.add_argument("--lanes", default=None, help="comma-separated lane names (default: every lane of the suite)")
    ap.add_argument("--rounds", type=int, default=None, help="ABBA rounds per lane (default: the lane's repeats)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up calls per side (default: the lane's, at least 1)")
    ap.add_argument("--pause-reps", type=int, default=50)
    ap.add_argument("--transport-reps", type=int, default=50)
    ap.add_argument("--transport-shape", default="8,256", help="batch,resolution of the transport probe's reply")
    ap.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when available)")
    ap.add_argument("--timeout", type=float, default=600.0, help="per worker call, seconds")
    ap.add_argument("--out", default="worker_overhead.json")
    args = ap.parse_args()

    import torch

    from pytest_ditar.runtime.models import resolve_model_dir

    from inprocess import InProcessCandidate

    t_start = time.perf_counter()
    suite = load_suite(ROOT / "suites" / args.suite)
    device = pick_device(args.device)
    threads = int(os.environ.get("DITAR_CPU_THREADS", "1"))
    if device == "cpu":
        torch.set_num_threads(threads)  # the worker's setting (CandidateWorker cpu_threads)
    spec = make_spec(suite, resolve_model_dir(suite), device)
    if args.render:
        from ladder import render

        flags = rendered_flags(args.render)
        cand_dir = write_candidate(render(flags), "ditar-wo-cand-")
        label = f"ladder template, {args.render}"
    else:
        cand_dir, flags = Path(args.candidate).resolve(), None
        label = str(cand_dir.relative_to(ROOT)) if cand_dir.is_relative_to(ROOT) else str(cand_dir)
    n, res = (int(x) for x in args.transport_shape.split(","))
    probe_dir = write_candidate(TRANSPORT_PIPELINE.format(n=n, res=res, lat=res // 8), "ditar-wo-probe-")
    logs = Path(tempfile.mkdtemp(prefix="ditar-wo-logs-"))
    worker = CandidateWorker("candidate", cand_dir, spec, log_path=logs / "candidate.log", cpu_threads=threads)
    probe = CandidateWorker("transport", probe_dir, spec, log_path=logs / "transport.log", cpu_threads=threads)
    result: dict = {"suite": suite.name, "device": device, "candidate": label, "flags": flags,
                    "torch": torch.__version__, "python": platform.python_version(), "targets": TARGETS, "lanes": {}}
    out_path = Path(args.out)
    save = lambda: out_path.write_text(json.dumps(result, indent=1, default=str))  # noqa: E731
    try:
        worker.start().request_build()  # the worker's interpreter starts while this process builds
        probe.start().request_build()
        inproc = InProcessCandidate(cand_dir, spec)
        result["device_name"] = device_label(device)
        worker.built(args.timeout)
        probe.built(args.timeout)
        probe.pause()  # idle until its turn, like every worker not being timed
        result["build_s"] = {"inprocess": inproc.build_s, "worker": worker.build_s,
                             "worker_pid": worker.info.get("pid")}
        print(f"worker overhead: suite {suite.name}, candidate {label}, on {result['device_name']} ({device}), "
              f"torch {torch.__version__}; builds: in-process {inproc.build_s:.1f} s, worker {worker.build_s:.1f} s",
              flush=True)
        wanted = args.lanes.split(",") if args.lanes else [ln.name for ln in suite.lanes]
        for lane in suite.lanes:
            if lane.name not in wanted:
                continue
            rounds = args.rounds or lane.repeats
            warmup = args.warmup if args.warmup is not None else max(1, lane.warmup)
            t0 = time.perf_counter()
            r = measure_lane(inproc, worker, suite, lane, rounds, warmup, args.timeout)
            r["wall_s"] = time.perf_counter() - t0
            result["lanes"][lane.name] = r
            save()
            print(f"  {lane.name}: in-process {r['inprocess_median_ms']:.3f} ms, "
                  f"worker {r['worker_median_ms']:.3f} ms, "
                  f"paired {r['paired_ratio']:.4f}x, round trip {r['round_trip_median_ms']:.3f} ms "
                  f"[{r['wall_s']:.1f} s]", flush=True)
        result["pause_resume"] = pause_resume_cost(worker, args.pause_reps)
        worker.pause()
        result["transport"] = transport_cost(probe, args.transport_reps, args.timeout, suite)
        result["wall_s"] = time.perf_counter() - t_start
        save()
    except BaseException:
        print(f"worker logs kept in {logs}", file=sys.stderr)
        raise
    finally:
        worker.close()
        probe.close()
    for d in (logs, probe_dir, cand_dir if args.render else None):
        if d is not None:
            shutil.rmtree(d, ignore_errors=True)
    print_table(result)
    print_breakdown(result)
    print(f"json: {out_path}")
    return 0


def print_breakdown(result: dict) -> None:
    for r in result["lanes"].values():
        steps = ", ".join(f"{k} {v:.3f}" for k, v in r.get("breakdown_ms", {}).items())
        print(f"  {r['lane']} round trip by step (median ms): {steps}")


def print_table(result: dict) -> None:
    print(f"\nWorker round trip vs in-process generate + device sync: {result['suite']}, {result['candidate']}, "
          f"on {result['device_name']} ({result['device']}), torch {result['torch']}")
    print(f"{'lane':<14}{'rounds':>7}{'in-proc ms':>12}{'worker ms':>11}{'worker/in-proc paired, ci95':>33}"
          f"{'ratio of med':>13}{'round trip ms':>14}{'% of call':>10}{'own/in-proc':>12}{'target':>8}"
          f"{'met (CI / point / rt)':>23}{'same out':>9}")
    for name, r in result["lanes"].items():
        met = "-" if r["target"] is None else " / ".join(
            "yes" if r[k] else "no" for k in ("target_met_paired", "target_met_point", "target_met_round_trip"))
        target = "-" if r["target"] is None else f"{r['target'] * 100:.1f}%"
        ci = f"{r['paired_ratio']:.4f}x [{r['paired_ci95'][0]:.4f}, {r['paired_ci95'][1]:.4f}]"
        print(f"{name:<14}{r['rounds']:>7}{r['inprocess_median_ms']:>12.3f}{r['worker_median_ms']:>11.3f}{ci:>33}"
              f"{r['ratio_of_medians']:>12.4f}x{r['round_trip_median_ms']:>14.3f}"
              f"{r['round_trip_fraction'] * 100:>9.2f}%"
              f"{r['worker_own_vs_inprocess']:>11.4f}x{target:>8}{met:>23}{str(r['outputs_identical']):>9}")
    p = result.get("pause_resume")
    if p:
        print(f"pause+resume pair (judge's SIGSTOP+SIGCONT): median {p['pair_median_ms']:.3f} ms, "
              f"p90 {p['pair_p90_ms']:.3f} ms; "
              f"a small op right after a resume {p['small_op_after_resume_median_ms']:.3f} ms vs warm "
              f"{p['small_op_warm_median_ms']:.3f} ms ({p['after_resume_extra_ms']:+.3f} ms)")
    t = result.get("transport")
    if t:
        print(f"transport alone ({t['images']} + {t['latents']} = {t['bytes'] / 1e6:.2f} MB): round trip median "
              f"{t['round_trip_median_ms']:.3f} ms (p90 {t['round_trip_p90_ms']:.3f}), of which the worker's own "
              f"{t['worker_own_median_ms']:.3f} ms; {t['throughput_mb_s']:.0f} MB/s")
    print("targets (the issue, dit-xl-2-256 on an H200): latency_b1 <= 1.0%, throughput_b8 <= 0.5%; "
          "'met' per lane: paired CI upper bound / point estimate / round trip's own cost")
    if result["device"] == "cpu" or "H200" not in result.get("device_name", ""):
        print(f"(measured on {result['device_name']}, not an H200: the targets do not apply to these figures)")


if __name__ == "__main__":
    sys.exit(main())
