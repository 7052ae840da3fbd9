"""Performance-lane trust benchmark (issue 4): noise floor, A/A verdicts, a real exact speedup.

One process, one suite. Prints a table and writes JSON. Run on the device you want figures for:

    python benchmarks/perf_lanes.py --suite dit-xl-2-256 --aa-runs 10 --out perf_lanes.json

It compares host settings (GC, CPU pinning) on the objective lane's A/A noise, calibrates every
lane, runs the A/A verdicts, and times two exact candidates (the lean loop, and the lean loop
replayed from CUDA graphs) against the stock pipeline. Raw samples go into the JSON.

Each pipeline runs in a worker process of its own, as in a gated run (DitarSession.worker); a
lane pauses the workers it does not time, and this benchmark pauses the ones outside the lane.
The judge opens no CUDA context (the fingerprint comes from the candidate's worker).

Every figure is labelled with the device it came from (the fingerprint is in the JSON).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_ditar.config.project import load_config  # noqa: E402
from pytest_ditar.config.suite import load_suite  # noqa: E402
from pytest_ditar.core.quality import check_contract, compute_metrics  # noqa: E402
from pytest_ditar.core.stats import NoiseFloor, calibrated_min_effect, noise_floor, paired_noise_floor  # noqa: E402
from pytest_ditar.loop.perf.lanes import judge  # noqa: E402
from pytest_ditar.loop.run.session import DitarSession  # noqa: E402
from pytest_ditar.runtime.lanes import measure_lane  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from ladder import DEFAULTS, render  # noqa: E402  (the rung template and its switches)


def candidate_dir(source: str) -> Path:
    d = Path(tempfile.mkdtemp(prefix="ditar-cand-"))
    (d / "__init__.py").write_text("")
    (d / "pipeline.py").write_text(source)
    return d


def floors(m, n_boot: int) -> dict:
    """Unpaired and paired A/A noise of one interleaved measurement (samples kept raw)."""
    return {"unpaired": dataclasses.asdict(noise_floor(m.samples, m.champion_samples, n_boot=n_boot)),
            "paired": dataclasses.asdict(paired_noise_floor(m.samples, m.champion_samples, n_boot=n_boot)),
            "samples": m.samples, "champion_samples": m.champion_samples,
            "timed_s": m.timed_s,
            "wall_s": m.wall_s, "round_trip_ms": round_trip_ms(m)}


def round_trip_ms(m) -> float | None:
    """Median of the judge's time minus the worker's own, per timed call: the round trip's cost."""
    return statistics.median(m.overhead_s) * 1e3 if m.overhead_s else None


def verdict(m, noise, cfg) -> dict:
    r = judge(m, m.champion_samples, objective=True, source="interleaved", noise=noise, perf_cfg=cfg.perf)
    return {"verdict": r.outcome.verdict, "reason": r.outcome.reason, "speedup": r.outcome.speedup,
            "ci": [r.outcome.ci_low, r.outcome.ci_high],
            "median_s": statistics.median(m.samples), "champion_median_s": statistics.median(m.champion_samples),
            "samples": m.samples, "champion_samples": m.champion_samples, "peak_reserved_gib": m.peak_reserved_gib,
            "min_effect": r.min_effect, "in_lane_overhead": m.wall_s / m.timed_s, "round_trip_ms": round_trip_ms(m)}


# Host-side settings compared on the objective lane: the harness default is whatever the
# config says; the other arms show what each setting buys on this machine.
ARMS = {"plain": dict(steady=False, pin_cpu=False), "gc_off": dict(steady=True, pin_cpu=False),
        "gc_off_pin": dict(steady=True, pin_cpu=True)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=str(ROOT / "config/autoresearch.json"))
    ap.add_argument("--suite", default="tiny")
    ap.add_argument("--aa-runs", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=None, help="rounds per lane (default: the suite's repeats)")
    ap.add_argument("--arms", default="plain,gc_off",
                    help=f"host settings probed on the objective lane ({', '.join(ARMS)})")
    ap.add_argument("--out", default="perf_lanes.json")
    args = ap.parse_args()

    cfg = dataclasses.replace(load_config(args.config), suite=args.suite)
    sess = DitarSession(cfg=cfg, suite=load_suite(cfg.suite_dir), tag="bench", device="auto",
                        state_dir=cfg.state_path / "bench")
    try:
        return run(sess, cfg, args)
    finally:
        sess.close()  # every worker process of the session


def run(sess: DitarSession, cfg, args) -> int:
    device = sess.resolved_device()
    fp = sess.fingerprint()  # on a GPU, from the candidate's worker: the judge holds no CUDA context
    default_arm = "gc_off_pin" if cfg.perf.pin_cpu else "gc_off"
    print(f"device: {fp.device_name} ({device}); suite {sess.suite.name}; harness default arm {default_arm}",
          flush=True)
    t0 = time.perf_counter()
    stock = sess.worker(cfg.candidate_path, "stock")
    lean = sess.worker(candidate_dir(render(dict(DEFAULTS))), "lean")
    graphs = sess.worker(candidate_dir(render(dict(DEFAULTS, CUDA_GRAPHS=True))), "graphs")
    everyone = [stock, lean, graphs]
    for w in everyone:
        w.request_build()  # the three build side by side
    for w in everyone:
        w.built(cfg.item_timeout_s)
    result: dict = {"device": fp.to_dict(), "suite": sess.suite.name, "build_s": time.perf_counter() - t0,
                    "worker_build_s": {"stock": stock.build_s, "lean": lean.build_s, "graphs": graphs.build_s},
                    "default_arm": default_arm, "probe": {}, "lanes": {}}
    out = Path(args.out)

    def measure(cand, lane, champion, **kw):
        """measure_lane with every worker outside the lane paused (they resume on their next call)."""
        for w in everyone:
            if w is not cand and w is not champion:
                w.pause()
        return measure_lane(cand, sess.suite, lane, champion=champion, **kw)

    def save(stage: str) -> None:
        out.write_text(json.dumps(result, indent=1, default=str))
        print(f"  [{time.perf_counter() - t0:6.1f}s] {stage}", flush=True)

    objective = next(ln for ln in sess.suite.lanes if ln.name == cfg.objective_lane)
    rounds = lambda lane: args.rounds or lane.repeats  # noqa: E731
    for arm in args.arms.split(","):
        m = measure(stock, objective, stock, repeats=rounds(objective), **ARMS[arm])
        result["probe"][arm] = floors(m, cfg.perf.n_boot)
        save(f"probe {arm}: A/A half-width unpaired {result['probe'][arm]['unpaired']['ci_half_width'] * 100:.2f}% "
             f"paired {result['probe'][arm]['paired']['ci_half_width'] * 100:.2f}%")
    # The objective lane last and its A/A runs at the very end: a run cut by the device's time
    # limit still has every lane's noise floor and both candidates' verdicts.
    for lane in sorted(sess.suite.lanes, key=lambda ln: ln.name == cfg.objective_lane):
        kw = dict(repeats=rounds(lane), pin_cpu=cfg.perf.pin_cpu)
        entry: dict = {"rounds": rounds(lane), "aa": []}
        cal = measure(stock, lane, stock, **kw)
        entry["calibration"] = floors(cal, cfg.perf.n_boot)
        # stored the way a baseline stores it: the paired floor judges interleaved (paired) lanes
        noise = {**entry["calibration"]["unpaired"], "paired": entry["calibration"]["paired"]}
        entry["stock_median_s"] = statistics.median(cal.samples)
        entry["min_effect"] = calibrated_min_effect(NoiseFloor(**noise["paired"]), cfg.perf.min_speedup,
                                                    cfg.perf.noise_k)
        result["lanes"][lane.name] = entry
        save(f"{lane.name}: calibrated, half-width {noise['ci_half_width'] * 100:.2f}% "
             f"(paired {noise['paired']['ci_half_width'] * 100:.2f}%)")
        for name, cand in (("lean", lean), ("graphs", graphs)):
            m = measure(cand, lane, stock, **kw)
            entry[name] = verdict(m, noise, cfg)
            save(f"{lane.name}: {name} {entry[name]['speedup'] or float('nan'):.3f}x {entry[name]['verdict']}")
        # The same lane once launch jitter is gone: A/A of the graph-replayed pipeline.
        m = measure(graphs, lane, graphs, **kw)
        entry["graphs_aa"] = floors(m, cfg.perf.n_boot)
        save(f"{lane.name}: graphs A/A half-width {entry['graphs_aa']['unpaired']['ci_half_width'] * 100:.2f}%")
        entry["aa_keeps"] = 0
        if lane.name == cfg.objective_lane:
            for i in range(args.aa_runs):
                m = measure(stock, lane, stock, **kw)
                entry["aa"].append(verdict(m, noise, cfg))
                entry["aa_keeps"] = sum(1 for a in entry["aa"] if a["verdict"] == "FASTER")
                save(f"{lane.name}: A/A {i + 1}/{args.aa_runs} {entry['aa'][-1]['verdict']}")
    # Both candidates must be exact: compare one batch of corpus items against the stock pipeline.
    from pytest_ditar.runtime.harness import run_batch

    items = list(sess.suite.corpus[: sess.suite.pipeline.batch])
    a = run_batch(stock, items, sess.suite, None)
    result["exact"] = {}
    for name, cand in (("lean", lean), ("graphs", graphs)):
        b = run_batch(cand, items, sess.suite, None)
        res = [check_contract(x.item_id, "exact", compute_metrics(y.latents, y.image, x.latents, x.image),
                              cfg.thresholds_for("exact")) for x, y in zip(a, b)]
        result["exact"][name] = {"passed": sum(e.passed for e in res), "total": len(res),
                                 "worst_psnr": min(e.metrics.psnr for e in res),
                                 "worst_rel_l2": max(e.metrics.latent_rel_l2 for e in res)}
    save("exactness checked")
    print_table(result, fp.device_name)
    return 0


def print_table(result: dict, device_name: str) -> None:
    print(f"\nA/A noise of the objective lane by host setting on {device_name} ({result['suite']}), CI half-width:")
    print(f"{'arm':<12}{'median ms':>10}{'robust CV':>10}{'unpaired':>10}{'paired':>9}")
    for arm, f in result["probe"].items():
        print(f"{arm:<12}{statistics.median(f['samples']) * 1e3:>10.2f}"
              f"{max(f['unpaired']['cv_a'], f['unpaired']['cv_b']) * 100:>9.2f}%"
              f"{f['unpaired']['ci_half_width'] * 100:>9.2f}%{f['paired']['ci_half_width'] * 100:>8.2f}%")
    print(f"\nlanes (harness default arm {result['default_arm']}):")
    print(f"{'lane':<15}{'stock ms':>9}{'noise ±%':>9}{'paired ±%':>10}{'min eff%':>9}{'A/A KEEP':>9}"
          f"{'lean':>27}{'graphs':>27}{'graphs A/A ±%':>14}{'in-lane ovh':>12}{'round trip ms':>14}")
    for name, e in result["lanes"].items():
        cal = e["calibration"]
        aa = f"{e['aa_keeps']}/{len(e['aa'])}" if e["aa"] else "-"
        cell = lambda c: (f"{c['speedup']:.2f}x [{c['ci'][0]:.2f},{c['ci'][1]:.2f}] {c['verdict'][:6]}"  # noqa: E731
                          if c["speedup"] is not None else f"- {c['verdict'][:12]}")
        print(f"{name:<15}{e['stock_median_s'] * 1e3:>9.1f}{cal['unpaired']['ci_half_width'] * 100:>9.2f}"
              f"{cal['paired']['ci_half_width'] * 100:>10.2f}{e['min_effect'] * 100:>9.2f}{aa:>9}{cell(e['lean']):>27}"
              f"{cell(e['graphs']):>27}{e['graphs_aa']['unpaired']['ci_half_width'] * 100:>14.2f}"
              f"{e['lean']['in_lane_overhead']:>11.3f}x{cal.get('round_trip_ms') or float('nan'):>14.3f}")
    for name, ex in result.get("exact", {}).items():
        print(f"{name} vs stock (exact contract): {ex['passed']}/{ex['total']} pass, "
              f"worst PSNR {ex['worst_psnr']:.2f} dB, worst latent rel-L2 {ex['worst_rel_l2']:.2e}")


if __name__ == "__main__":
    sys.exit(main())
