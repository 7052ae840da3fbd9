"""Performance-lane trust benchmark (issue 4): noise floor, A/A verdicts, a real exact speedup.

One process, one suite. Prints a table and writes JSON. Run on the device you want figures for:

    python benchmarks/perf_lanes.py --suite dit-xl-2-256 --aa-runs 10 --out perf_lanes.json

Every figure is labelled with the device it came from (the fingerprint is in the JSON).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_ditar.config import load_config  # noqa: E402
from pytest_ditar.hardware import collect  # noqa: E402
from pytest_ditar.perf import judge_lane, measure_lane  # noqa: E402
from pytest_ditar.quality import check_contract, compute_metrics  # noqa: E402
from pytest_ditar.session import DitarSession  # noqa: E402
from pytest_ditar.stats import calibrated_min_effect, noise_floor, NoiseFloor  # noqa: E402
from pytest_ditar.suite import load_suite  # noqa: E402


def candidate_dir(source: Path) -> Path:
    d = Path(tempfile.mkdtemp(prefix="ditar-cand-"))
    (d / "__init__.py").write_text("")
    shutil.copy(source, d / "pipeline.py")
    return d


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=str(ROOT / "config/autoresearch.json"))
    ap.add_argument("--suite", default="tiny")
    ap.add_argument("--candidate", default=str(ROOT / "pytest_ditar/demo_candidates/faster_exact.py"))
    ap.add_argument("--aa-runs", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=None, help="rounds per lane (default: the suite's repeats)")
    ap.add_argument("--out", default="perf_lanes.json")
    args = ap.parse_args()

    cfg = dataclasses.replace(load_config(args.config), suite=args.suite)
    sess = DitarSession(cfg=cfg, suite=load_suite(cfg.suite_dir), tag="bench", device="auto")
    device = sess.resolved_device()
    fp = collect(device)
    print(f"device: {fp.device_name} ({device}); suite {sess.suite.name}", flush=True)
    t0 = time.perf_counter()
    stock = sess.get_candidate()
    cand = sess.build_from(candidate_dir(Path(args.candidate)))
    build_s = time.perf_counter() - t0
    result: dict = {"device": fp.to_dict(), "suite": sess.suite.name, "build_s": build_s, "lanes": {}}
    rows = []
    for lane in sess.suite.lanes:
        rounds = args.rounds or lane.repeats
        t_lane = time.perf_counter()
        cal = measure_lane(stock, sess.suite, lane, device, champion=stock, repeats=rounds)
        noise = noise_floor(cal.samples, cal.champion_samples, n_boot=cfg.perf.n_boot)
        min_eff = calibrated_min_effect(noise, cfg.perf.min_speedup, cfg.perf.noise_k)
        aa = []
        if lane.name == cfg.objective_lane:
            for _ in range(args.aa_runs):
                m = measure_lane(stock, sess.suite, lane, device, champion=stock, repeats=rounds)
                r = judge_lane(m, m.champion_samples, objective=True, source="interleaved",
                               noise=dataclasses.asdict(noise), perf_cfg=cfg.perf)
                aa.append({"verdict": r.outcome.verdict, "speedup": r.outcome.speedup,
                           "ci": [r.outcome.ci_low, r.outcome.ci_high]})
        m = measure_lane(cand, sess.suite, lane, device, champion=stock, repeats=rounds)
        r = judge_lane(m, m.champion_samples, objective=True, source="interleaved",
                       noise=dataclasses.asdict(noise), perf_cfg=cfg.perf)
        timed = sum(m.samples) + sum(m.champion_samples) + sum(m.warmup_s) + sum(m.champion_warmup_s)
        lane_wall = time.perf_counter() - t_lane
        entry = {
            "rounds": rounds, "stock_median_s": statistics.median(cal.samples), "noise": dataclasses.asdict(noise),
            "noise_ci_half_width_pct": noise.ci_half_width * 100, "min_effect": min_eff, "aa": aa,
            "aa_keeps": sum(1 for a in aa if a["verdict"] == "FASTER"),
            "candidate": {"verdict": r.outcome.verdict, "speedup": r.outcome.speedup,
                          "ci": [r.outcome.ci_low, r.outcome.ci_high], "median_s": statistics.median(m.samples),
                          "peak_reserved_gib": m.peak_reserved_gib},
            "harness_overhead": m.wall_s / timed if timed else None,
            "lane_wall_s": lane_wall,
        }
        result["lanes"][lane.name] = entry
        rows.append((lane.name, entry))
        print(f"  {lane.name}: done in {lane_wall:.1f}s", flush=True)
    # The candidate must also be exact: compare a few corpus items against the stock pipeline.
    from pytest_ditar.harness import run_batch

    items = list(sess.suite.corpus[: sess.suite.pipeline.batch])
    a = run_batch(stock, items, sess.suite, None)
    b = run_batch(cand, items, sess.suite, None)
    exact = [check_contract(x.item_id, "exact", compute_metrics(y.latents, y.image, x.latents, x.image),
                            cfg.thresholds_for("exact")) for x, y in zip(a, b)]
    result["candidate_exact"] = {"passed": sum(e.passed for e in exact), "total": len(exact),
                                 "worst_psnr": min(e.metrics.psnr for e in exact),
                                 "worst_rel_l2": max(e.metrics.latent_rel_l2 for e in exact)}
    Path(args.out).write_text(json.dumps(result, indent=1, default=str))
    print(f"\nperf lanes on {fp.device_name} ({sess.suite.name}); candidate {Path(args.candidate).name}")
    print(f"{'lane':<15}{'stock ms':>10}{'noise ci±%':>11}{'min eff%':>9}{'A/A KEEP':>9}{'cand ms':>9}"
          f"{'speedup':>9}{'ci95':>17}{'verdict':>11}{'overhead':>9}")
    for name, e in rows:
        c = e["candidate"]
        aa = f"{e['aa_keeps']}/{len(e['aa'])}" if e["aa"] else "-"
        print(f"{name:<15}{e['stock_median_s'] * 1e3:>10.2f}{e['noise_ci_half_width_pct']:>11.2f}{e['min_effect'] * 100:>9.2f}"
              f"{aa:>9}{c['median_s'] * 1e3:>9.2f}{c['speedup']:>8.3f}x  [{c['ci'][0]:.3f},{c['ci'][1]:.3f}]"
              f"{c['verdict']:>11}{e['harness_overhead']:>8.3f}x")
    ce = result["candidate_exact"]
    print(f"candidate vs stock outputs (exact contract): {ce['passed']}/{ce['total']} pass, worst PSNR "
          f"{ce['worst_psnr']:.2f} dB, worst latent rel-L2 {ce['worst_rel_l2']:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
