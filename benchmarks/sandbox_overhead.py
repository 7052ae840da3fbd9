"""What the workers' sandbox (runtime.sandbox, issue 24) costs: start-up and round trip, with and
without it, on the same host in one run.

- start-up: for each way a worker is made (forked from the zygote, or spawned as a fresh
  interpreter) with and without the sandbox, N workers one after another (the zygote already
  warm), the judge's time from start() to hello's reply and to the end of build();
- round trip: the suite's latency_b1 request (or --transport: fixed arrays, no model), one worker
  with and one without the sandbox, built side by side and timed interleaved ABBA on the judge's
  clock for R rounds after warm-up, each paused while the other runs (as a lane does); medians,
  the paired ratio sandboxed/unsandboxed and its bootstrap 95% CI.

    python benchmarks/sandbox_overhead.py --suite tiny --out /tmp/sandbox.json        # CPU
    python benchmarks/sandbox_overhead.py --suite dit-xl-2-256 --rounds 200 --out s.json  # GPU
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

TRANSPORT = '''
import numpy as np
from pytest_ditar.interface import Generated


class Fixed:
    def __init__(self):
        self.latents = np.zeros((1, 4, 32, 32), np.float32)
        self.images = np.zeros((1, 256, 256, 3), np.uint8)

    def generate(self, request):
        return Generated(self.latents, self.images)


def build(spec):
    return Fixed()
'''


def startup(spec, cand: Path, logs: Path, n: int, zygote: bool, sandboxed: bool) -> dict:
    from pytest_ditar.runtime import zygote as zyg
    from pytest_ditar.runtime.clock import judge_clock
    from pytest_ditar.runtime.worker import CandidateWorker

    if not zygote:  # no zygote from here on: every worker a fresh interpreter
        zyg.close()
        zyg._ZYGOTE[:] = [None]
    hello, built = [], []
    for i in range(n):
        w = CandidateWorker(f"s{i}", cand, spec, log_path=logs / f"{zygote}-{sandboxed}-{i}.log", sandboxed=sandboxed)
        t0 = judge_clock()
        w.start()
        w.hello()
        hello.append(judge_clock() - t0)
        w.built(600)
        built.append(judge_clock() - t0)
        w.close()
    return {"hello_s": hello, "built_s": built, "hello_median_s": statistics.median(hello),
            "built_median_s": statistics.median(built)}


def round_trip(spec, cand: Path, logs: Path, request, rounds: int, warmup: int) -> dict:
    from pytest_ditar.core import stats
    from pytest_ditar.runtime.worker import CandidateWorker
    from pytest_ditar.runtime.worker_process import only_running

    boxed = CandidateWorker("boxed", cand, spec, log_path=logs / "rt-boxed.log", sandboxed=True).start()
    plain = CandidateWorker("plain", cand, spec, log_path=logs / "rt-plain.log", sandboxed=False).start()
    try:
        boxed.request_build()
        plain.request_build()
        boxed.built(1800)
        plain.built(1800)
        for w in (boxed, plain):
            w.steady(True)
        times = {"boxed": [], "plain": []}
        order = ["boxed", "plain", "plain", "boxed"]
        for r in range(warmup + rounds):
            for name in (order if r % 2 == 0 else order[::-1])[:2]:
                w = boxed if name == "boxed" else plain
                with only_running(w, [boxed, plain]):
                    out = w.generate(request, timeout_s=600)
                if r >= warmup:
                    times[name].append(out.seconds)
        for w in (boxed, plain):
            w.steady(False)
    finally:
        boxed.close()
        plain.close()
    b, p = np.array(times["boxed"]), np.array(times["plain"])
    ratios = b / p
    rng = np.random.default_rng(0)
    boot = [float(np.median(rng.choice(ratios, len(ratios)))) for _ in range(2000)]
    return {"rounds": rounds, "boxed_median_s": float(np.median(b)), "plain_median_s": float(np.median(p)),
            "ratio_median": float(np.median(ratios)), "ratio_ci95": [float(np.percentile(boot, 2.5)),
                                                                     float(np.percentile(boot, 97.5))],
            "robust_cv": {"boxed": float(stats.robust_cv(b)), "plain": float(stats.robust_cv(p))}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default="tiny")
    ap.add_argument("--device", default=None)
    ap.add_argument("--workers", type=int, default=4, help="workers started one after another per way")
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--transport", action="store_true", help="time fixed arrays (no model) instead of the lane")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    from pytest_ditar.config.suite import load_suite
    from pytest_ditar.interface import Request
    from pytest_ditar.runtime import sandbox_check
    from pytest_ditar.runtime.calls import lane_request
    from pytest_ditar.runtime.harness import make_spec, pick_device
    from pytest_ditar.runtime.models import resolve_model_dir

    if sandbox_check.check():
        print(sandbox_check.check())
        return 1
    suite = load_suite(ROOT / "suites" / args.suite)
    device = pick_device(args.device)
    spec = make_spec(suite, resolve_model_dir(suite), device)
    tmp = Path(tempfile.mkdtemp(prefix="ditar-sandbox-bench-"))
    cand = tmp / "cand"
    cand.mkdir()
    if args.transport:
        (cand / "pipeline.py").write_text(TRANSPORT)
        request = Request((1,), (1,), 1)
    else:
        (cand / "pipeline.py").write_text((ROOT / "mutable" / "pipeline.py").read_text())
        request = lane_request(suite, suite.lane("latency_b1"))
    a = sandbox_check.availability()
    result = {"suite": args.suite, "device": device, "bwrap": a.version, "overlay": a.overlay, "startup": {}}
    # the zygote's own start (its imports) is paid once, before the first worker: not a worker's cost
    startup(spec, cand, tmp, 1, zygote=True, sandboxed=False)
    result["round_trip"] = round_trip(spec, cand, tmp, request, args.rounds, args.warmup)  # zygote-forked workers
    print("round trip", json.dumps(result["round_trip"]))
    for zyg in (True, False):  # the zygote's forks first: `spawn` retires the zygote for good
        for boxed in (False, True):
            key = f"{'zygote' if zyg else 'spawn'}{'+sandbox' if boxed else ''}"
            result["startup"][key] = startup(spec, cand, tmp, args.workers, zyg, boxed)
            print(key, json.dumps({k: round(v, 4) for k, v in result["startup"][key].items()
                                   if k.endswith("median_s")}))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
