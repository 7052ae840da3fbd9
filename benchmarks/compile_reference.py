"""The loop's champion beside `torch.compile` of the stock pipeline, in one call (issue 29).

A user's alternative to the whole loop is one line: `torch.compile` on the stock transformer
(pytest_ditar/demo/candidates/compiled_stock.py). This times the champion of a ladder workspace
(its mutable/ at HEAD) against that, side by side, with the gate's own lane code
(runtime.lanes.measure_lane): both sides in judge workers, paired rounds in a random order on
fresh requests, the judge's clock. A side's first calls (where torch.compile compiles) are its
warm-up and are reported as its compile time, apart from the timed rounds.

    python benchmarks/compile_reference.py --workdir /tmp/ditar-ladder --out $OUT/compile   # GPU
    python benchmarks/compile_reference.py --workdir /tmp/ditar-ladder --modes reduce-overhead,max-autotune
    python benchmarks/ladder.py --suite tiny --rungs lean --compile-reference reduce-overhead  # CPU dry run

Speedup = compiled median / champion median per paired round (>1: the champion is faster), with
the 95% CI of the paired comparison (core.stats.compare). TFLOP/s uses the baseline's FLOP
count per call (an exact champion does the same work) against the target profile's measured
dense fp16 ceiling. Prints a table and writes compile_reference.json.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
COMPILED = ROOT / "pytest_ditar/demo/candidates/compiled_stock.py"
TAG = "ladder"  # the ladder's tag (benchmarks/ladder.py)
# A mode's wall against reduce-overhead's (the first mode): max-autotune also benchmarks GEMM choices per shape
MODE_COST = {"reduce-overhead": 1.0, "default": 0.9, "max-autotune": 2.5, "max-autotune-no-cudagraphs": 2.5}


def compiled_dir(ws: Path, mode: str) -> Path:
    """A candidate folder holding compiled_stock.py with COMPILE_MODE = mode (outside git's view)."""
    d = ws / ".autoresearch" / f"compiled-{mode}"
    d.mkdir(parents=True, exist_ok=True)
    src, n = re.subn(r'^COMPILE_MODE = .*$', f"COMPILE_MODE = {mode!r}", COMPILED.read_text(), count=1, flags=re.M)
    assert n == 1, "compiled_stock.py lost its COMPILE_MODE line"
    (d / "pipeline.py").write_text(src)
    return d


def ceiling_tflops(sess: Any) -> float | None:
    """The dense fp16 ceiling of the card the run is on (the profile whose name matches it)."""
    try:
        from pytest_ditar.hardware.profiles import PROFILES

        name = sess.fingerprint().device_name.lower()
        return next((p.dense_fp16_tflops for p in PROFILES.values() if p.name_match and p.name_match.lower() in name),
                    None)
    except Exception:  # noqa: BLE001 - a column of the table, not the comparison
        return None


def measured_ceiling_tflops(n: int = 8192, iters: int = 20) -> float | None:
    """The card's dense fp16 GEMM rate as measured here: an n x n x n half-precision matmul (fp32
    accumulate, cuBLAS's default) timed by CUDA events, best of three bursts. None off CUDA."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        a = torch.randn(n, n, device="cuda", dtype=torch.float16)
        b = torch.randn(n, n, device="cuda", dtype=torch.float16)
        for _ in range(3):
            a @ b
        best = 0.0
        for _ in range(3):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                a @ b
            end.record()
            torch.cuda.synchronize()
            best = max(best, 2 * n ** 3 * iters / (start.elapsed_time(end) / 1e3) / 1e12)
        del a, b
        torch.cuda.empty_cache()
        return best
    except Exception:  # noqa: BLE001 - a column of the table, not the comparison
        return None


def run(ws: Path, modes: list[str], out: Path, rounds: int | None = None, lanes: list[str] | None = None,
        deadline: float | None = None) -> dict:
    """Time the workspace's champion against each compile mode, lane by lane; write and return the rows.
    `deadline` (time.monotonic()): a mode after the first is skipped where the first mode's wall, times
    MODE_COST for the longer autotuning compiles, would end past it (listed under "skipped")."""
    from pytest_ditar.core import stats
    from pytest_ditar.loop.run.session import open_session
    from pytest_ditar.runtime.calls import new_stream
    from pytest_ditar.runtime.lanes import measure_lane
    from pytest_ditar.store.records import read_lanes

    sess = open_session(ws / "config/autoresearch.json", tag=TAG)
    base = read_lanes(json.loads((sess.state_dir / "baseline/lanes.json").read_text())) \
        if (sess.state_dir / "baseline/lanes.json").is_file() else {}
    ceiling = ceiling_tflops(sess)
    measured = measured_ceiling_tflops()
    timeout = max(sess.cfg.item_timeout_s or 0.0, 900.0)  # max-autotune's first call compiles for minutes
    report: dict[str, Any] = {"device": sess.resolved_device(), "ceiling_tflops": ceiling,
                              "measured_ceiling_tflops": measured, "rows": []}
    try:
        # HEAD's blobs, as the gate builds every role (loop.integrity.roles): a worker on the checkout's own
        # folder timed the compiled champion's b1 call 1.86x slower than the gate did (H100, session 24)
        champ = sess.worker(sess.code(), "champion-head")
        t0 = time.perf_counter()
        champ.built(sess.cfg.build_timeout_s)
        champ_build = time.perf_counter() - t0
        first_wall = None
        for mode in modes:
            t_mode = time.monotonic()
            if deadline is not None and first_wall is not None \
                    and t_mode + first_wall * MODE_COST.get(mode, 1.0) > deadline:
                print(f"[compile] {mode}: skipped, about {first_wall * MODE_COST.get(mode, 1.0):.0f} s would end past "
                      f"the deadline ({deadline - t_mode:.0f} s left)", flush=True)
                report.setdefault("skipped", []).append(mode)
                continue
            ref = sess.worker(compiled_dir(ws, mode), f"compiled-{mode}")
            t0 = time.perf_counter()
            ref.built(max(sess.cfg.build_timeout_s, timeout))
            ref_build = time.perf_counter() - t0
            for lane in sess.suite.lanes:
                if lanes and lane.name not in lanes:
                    continue
                t0 = time.perf_counter()
                m = measure_lane(champ, sess.suite, lane, champion=ref, timeout_s=timeout, repeats=rounds,
                                 stream=new_stream(sess.suite), pin_cpu=sess.cfg.perf.pin_cpu)
                cmp = stats.compare(m.champion_samples, m.samples, min_effect=0.0, paired=True)
                med = statistics.median(m.samples)
                flops = base[lane.name].flops if lane.name in base else None
                row = {"mode": mode, "lane": lane.name, "rounds": len(m.samples),
                       "champion_median_s": med, "compiled_median_s": statistics.median(m.champion_samples),
                       "speedup": cmp.speedup, "ci95": [cmp.ci_low, cmp.ci_high],
                       "compiled_compile_s": sum(m.champion_warmup_s), "champion_warmup_s": sum(m.warmup_s),
                       "champion_build_s": champ_build, "compiled_build_s": ref_build,
                       "champion_tflops": flops / med / 1e12 if flops else None,
                       "ceiling_share": (flops / med / 1e12 / ceiling) if flops and ceiling else None,
                       "measured_ceiling_share": (flops / med / 1e12 / measured) if flops and measured else None,
                       "wall_s": time.perf_counter() - t0}
                report["rows"].append(row)
                print(f"[compile] {mode} {lane.name}: champion {row['speedup']:.3f}x vs compiled "
                      f"[{cmp.ci_low:.3f}, {cmp.ci_high:.3f}] over {row['rounds']} rounds "
                      f"(compile {row['compiled_compile_s']:.1f} s)", flush=True)
                out.mkdir(parents=True, exist_ok=True)
                (out / "compile_reference.json").write_text(json.dumps(report, indent=1, default=str))
            ref.close()
            first_wall = first_wall if first_wall is not None else time.monotonic() - t_mode
    finally:
        sess.close()
    print_table(report)
    return report


def print_table(report: dict) -> None:
    got = report.get("measured_ceiling_tflops")
    print(f"\ndevice {report['device']}; dense fp16 ceiling "
          f"{report['ceiling_tflops'] or '-'} TFLOP/s (hardware.profiles), "
          f"{f'{got:.0f}' if got else '-'} TFLOP/s measured (8192^3 fp16 matmul)")
    print(f"{'mode':<17}{'lane':<15}{'rounds':>7}{'champion ms':>12}{'compiled ms':>12}{'champ x':>9}"
          f"{'ci95':>17}{'compile s':>10}{'TFLOP/s':>9}{'ceiling':>8}{'measured':>9}")
    for r in report["rows"]:
        ci = f"[{r['ci95'][0]:.3f},{r['ci95'][1]:.3f}]"
        tf = f"{r['champion_tflops']:.1f}" if r["champion_tflops"] else "-"
        share = f"{100 * r['ceiling_share']:.0f}%" if r["ceiling_share"] else "-"
        mshare = f"{100 * r['measured_ceiling_share']:.0f}%" if r.get("measured_ceiling_share") else "-"
        print(f"{r['mode']:<17}{r['lane']:<15}{r['rounds']:>7}{r['champion_median_s'] * 1e3:>12.2f}"
              f"{r['compiled_median_s'] * 1e3:>12.2f}{r['speedup']:>8.3f}x{ci:>17}{r['compiled_compile_s']:>10.1f}"
              f"{tf:>9}{share:>8}{mshare:>9}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", default="/tmp/ditar-ladder", help="a ladder workspace (benchmarks/ladder.py)")
    ap.add_argument("--modes", default="reduce-overhead", help="comma-separated torch.compile modes")
    ap.add_argument("--rounds", type=int, default=None, help="timed rounds per lane (default: the lane's repeats)")
    ap.add_argument("--lanes", default=None, help="comma-separated lane names (default: every lane)")
    ap.add_argument("--out", default="compile_reference")
    args = ap.parse_args(argv)
    ws = Path(args.workdir)
    if not (ws / "config/autoresearch.json").is_file():
        print(f"{ws}: not a ladder workspace (run benchmarks/ladder.py --workdir {ws} first)", file=sys.stderr)
        return 2
    run(ws, args.modes.split(","), Path(args.out), args.rounds, args.lanes.split(",") if args.lanes else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
