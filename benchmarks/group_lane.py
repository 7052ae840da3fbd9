"""Issue 30: the CFG split over two GPUs through the real loop, judged on a two-GPU lane.

    python benchmarks/group_lane.py --suite dit-xl-2-256 --out $OUT/group_lane   # 2 GPUs (NCCL)
    python benchmarks/group_lane.py --suite tiny --out /tmp/group_lane          # CPU dry run (gloo)

A scratch research project (the one `dit-ar demo` makes) gets a `gpus: 2` objective lane,
`split_b1`, beside its one-GPU `latency_b1`; its baseline is the stock pipeline. Then, as an
agent would, two commits each judged by `dit-ar experiment`:

1. A/A: the stock code again (a comment added). Its verdict and speedup are the host's own noise
   on the group lane, reported beside the verdict that follows.
2. `demo/candidates/cfg_split.py`: rank 0 the conditional half, rank 1 the unconditional half.

On the group lane every side is a group of two ranks in the judge's workers (runtime.group): the
champion's stock code on two ranks runs the whole one-GPU pipeline on each, so the speedup is the
split's against one GPU's work. The judge's round trip of a group call (its clock minus the
slowest rank's own account) is compared with a `latency_b1` call. Prints a table, writes
<out>/group_lane.json and each run's log.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from ladder import ditar, git, median_of, round_trip_ms, setup  # noqa: E402

LANE = "split_b1"
TAG = "group"


def configure(ws: Path, suite: str) -> None:
    """The two-GPU objective lane: latency_b1's request and rounds, on two ranks."""
    path = ws / "suites" / suite / "suite.yaml"
    data = yaml.safe_load(path.read_text())
    b1 = next(ln for ln in data["lanes"] if ln["name"] == "latency_b1")
    data["lanes"] = [b1, {**b1, "name": LANE, "gpus": 2}]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    cfg_path = ws / "config/autoresearch.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["objective_lane"] = LANE
    cfg_path.write_text(json.dumps(cfg, indent=1))
    git(ws, "commit", "-qam", "A two-GPU objective lane: latency_b1 on two ranks")


def experiment(ws: Path, out: Path, name: str, source: str, subject: str) -> dict:
    (ws / "mutable/pipeline.py").write_text(source)
    git(ws, "commit", "-qam", f"{subject}\n\nDitar-Class: exact")
    t0 = time.perf_counter()
    res = ditar(ws, "experiment", "--classification", "exact", "--description", subject, check=False)
    wall = time.perf_counter() - t0
    (out / f"{name}.log").write_text(res.stdout[-20000:] + res.stderr[-5000:])
    verdict = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else res.stderr.strip()[-500:]
    runs = sorted((ws / f".autoresearch/{TAG}/runs").glob("*/summary.json"), key=lambda p: p.stat().st_mtime)
    summary = json.loads(runs[-1].read_text()) if runs else {}
    row: dict = {"run": name, "verdict_line": verdict, "wall_s": wall, "lanes": {}}
    for lane, data in summary.get("lanes", {}).items():
        oc = data.get("outcome", {})
        m = data.get("measurement", {})
        row["lanes"][lane] = {"verdict": oc.get("verdict"), "speedup": oc.get("speedup"),
                              "ci": [oc.get("ci_low"), oc.get("ci_high")], "reason": oc.get("reason"),
                              "median_s": median_of(summary, lane),
                              "champion_median_s": statistics.median(m["champion_samples"])
                              if m.get("champion_samples") else None,
                              "rounds": len(m.get("samples", [])), "round_trip_ms": round_trip_ms(data),
                              "peak_vram_gib": oc.get("peak_vram_gib")}
    print(f"[group_lane] {name}: {verdict} [{wall:.0f} s]", flush=True)
    return row


def print_table(rows: list[dict], device: str) -> None:
    print(f"\nGroup lane {LANE} (2 ranks) through `dit-ar experiment`, device: {device}")
    print(f"{'run':<10} {'verdict':<9} {'speedup [95% CI]':<26} {'cand ms':>9} {'champ ms':>9} "
          f"{'round trip ms':>13} {'% of b1 call':>12}")
    for r in rows:
        g = r["lanes"].get(LANE, {})
        b1 = r["lanes"].get("latency_b1", {})
        ci = g.get("ci") or [None, None]
        sp = f"{g['speedup']:.3f}x [{ci[0]:.3f}, {ci[1]:.3f}]" if g.get("speedup") and None not in ci else "n/a"
        rt, call = g.get("round_trip_ms"), (b1.get("median_s") or g.get("median_s"))
        share = f"{rt / (call * 1e3) * 100:.3f}%" if rt is not None and call else "n/a"
        verdict = r["verdict_line"].split()[2] if r["verdict_line"].startswith("DITAR VERDICT") else "REFUSED"
        ms = lambda s: f"{s * 1e3:.2f}" if s else "n/a"  # noqa: E731
        print(f"{r['run']:<10} {verdict:<9} {sp:<26} {ms(g.get('median_s')):>9} {ms(g.get('champion_median_s')):>9} "
              f"{(f'{rt:.3f}' if rt is not None else 'n/a'):>13} {share:>12}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default="dit-xl-2-256")
    ap.add_argument("--workdir", default="/tmp/ditar-group-lane")
    ap.add_argument("--out", default="group_lane")
    args = ap.parse_args()
    import torch

    device = (f"{torch.cuda.device_count()}x {torch.cuda.get_device_name(0)}" if torch.cuda.is_available()
              else "CPU (gloo)")
    if torch.cuda.is_available() and torch.cuda.device_count() < 2:
        raise SystemExit("group_lane: a two-GPU lane needs 2 GPUs; this machine has 1")
    ws, out = Path(args.workdir), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    setup(ws, args.suite)
    configure(ws, args.suite)
    ditar(ws, "init", "--tag", TAG)
    t0 = time.perf_counter()
    res = ditar(ws, "baseline")
    (out / "baseline.log").write_text(res.stdout[-20000:] + res.stderr[-5000:])
    result = {"suite": args.suite, "device": device, "torch": torch.__version__, "baseline_s": time.perf_counter() - t0,
              "rows": []}
    stock = (ws / "mutable/pipeline.py").read_text()
    split = (ROOT / "pytest_ditar/demo/candidates/cfg_split.py").read_text()
    for name, source, subject in (("A/A", stock + "\n# A/A: the stock code again\n", "A/A: the stock code again"),
                                  ("cfg_split", split, "Split classifier-free guidance over two GPUs")):
        result["rows"].append(experiment(ws, out, name.replace("/", ""), source, subject))
        (out / "group_lane.json").write_text(json.dumps(result, indent=1, default=str))
    print_table(result["rows"], device)
    shutil.rmtree(ws, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
