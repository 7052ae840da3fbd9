"""The graph_loop rung outside the loop (a GPU self-check before a device call spends a gated run on
it): the ladder's template with the exact stack on, the transformer replayed from a CUDA graph per
step (GRAPH_LOOP off) against the whole denoising loop as one graph (on): the same latents (max |diff|)
and each one's median call over alternating calls in one process.

    python benchmarks/graph_loop_check.py --suite dit-xl-2-256 --calls 10     # GPU; on CPU it says so
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

import ladder  # noqa: E402 - the template's switches


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default="dit-xl-2-256")
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--lanes", default="latency_b1,throughput_b8")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("graph_loop_check: needs CUDA (the rung is a no-op on a CPU)")
        return 0
    from pytest_ditar.config.suite import load_suite
    from pytest_ditar.runtime.calls import lane_request
    from pytest_ditar.runtime.harness import build_candidate, make_spec
    from pytest_ditar.runtime.models import resolve_model_dir

    suite = load_suite(ROOT / "suites" / args.suite)
    spec = make_spec(suite, resolve_model_dir(suite), "cuda")
    stack = dict(ladder.DEFAULTS, FUSED_QKV=True, BATCHED_COND=True, CUDA_GRAPHS=True)
    built = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, loop in (("step_graph", False), ("loop_graph", True)):
            d = Path(tmp) / name
            d.mkdir()
            (d / "pipeline.py").write_text(ladder.render(dict(stack, GRAPH_LOOP=loop)))
            built[name] = build_candidate(d, spec)
    report: dict = {"suite": args.suite, "card": torch.cuda.get_device_name(0), "lanes": {}}
    for lane_name in args.lanes.split(","):
        req = lane_request(suite, suite.lane(lane_name))
        outs = {n: c.generate(req) for n, c in built.items()}  # warm-up: the captures
        diff = (outs["step_graph"].latents.float() - outs["loop_graph"].latents.float()).abs().max().item()
        times: dict[str, list[float]] = {n: [] for n in built}
        for _ in range(args.calls):
            for n, c in built.items():
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                c.generate(req)
                torch.cuda.synchronize()
                times[n].append(time.perf_counter() - t0)
        med = {n: statistics.median(v) * 1e3 for n, v in times.items()}
        report["lanes"][lane_name] = {"max_abs_diff": diff, "median_ms": med,
                                      "speedup": med["step_graph"] / med["loop_graph"]}
        print(f"[graph_loop] {lane_name}: step graph {med['step_graph']:.2f} ms, loop graph {med['loop_graph']:.2f} ms "
              f"({med['step_graph'] / med['loop_graph']:.3f}x), latents max |diff| {diff:.3g}", flush=True)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
