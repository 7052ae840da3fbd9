"""Where a gated run's time goes beyond its timed inference (issue 25), through the real loop.

A scratch research project (the one `dit-ar demo` makes) on the chosen suite: baseline, then
gated runs as an agent makes them, each a commit and `dit-ar experiment`:

  1. lean         the lean sampling loop: KEPT on the stock champion
  2. slower       a second transformer pass per step: the first run after that KEEP (the new
                  champion's worktree and build are new)
  3. mislabelled  a guidance change called exact: a later run on the same champion
  4. one_item     one corpus item broken: another later run

For each run: the command's wall (measured here, process start to exit), the run's own clock
(summary.json `timings`: start-up, the build, quality and firewall phases, the lanes' timed
seconds and the rest of the perf phase) and `wall - timed`, the fixed cost the issue bounds
(CPU tiny suite: timed + 8 s; a GPU suite: timed + 15 s). Also `import pytest_ditar.plugin.hooks`
(`python -X importtime`, cumulative, median of 5) and a project's own `pytest tests` collection
with and without the plugin.

    python benchmarks/fixed_cost.py --suite tiny --out /tmp/fc            # CPU
    python benchmarks/fixed_cost.py --suite dit-xl-2-256 --runs graphs,slower,mislabelled,one_item \
        --out fc_h200                                                        # GPU: a graph-replayed champion
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from pytest_ditar.store.records import read_lanes

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ladder  # noqa: E402 - a sibling script: the same scratch project, rungs and dit-ar call

RUNS = ("lean", "slower", "mislabelled", "one_item")
# On a GPU the bound is for a graph-replayed champion: this first run makes one in one KEEP
# (`--runs graphs,slower,mislabelled,one_item`).
EXTRA = {"graphs": ("graphs", "exact", "Lean loop, fused QKV projections and the transformer replayed as CUDA graphs",
                    {"LEAN": True, "FUSED_QKV": True, "CUDA_GRAPHS": True}, "KEEP")}
BOUND_S = {"cpu": 8.0, "gpu": 15.0}


def import_ms(module: str, repeat: int = 5) -> float:
    """Median cumulative import time of `module` in a fresh interpreter, in ms."""
    out = []
    for _ in range(repeat):
        err = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"],
                             capture_output=True, text=True, check=True).stderr
        line = next(ln for ln in err.splitlines() if ln.rstrip().endswith(f"| {module}"))
        out.append(int(line.split("|")[1]) / 1e3)
    return statistics.median(out)


def own_tests_s(ws: Path) -> dict[str, float]:
    """A project's own `pytest tests` beside a ditar config: collection wall with the plugin and without."""
    (ws / "tests").mkdir(exist_ok=True)
    (ws / "tests/test_own.py").write_text("def test_own():\n    assert True\n")
    out = {}
    for name, extra in (("with plugin", []), ("-p no:ditar", ["-p", "no:ditar"])):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest", *extra,
                        "tests"],
                       cwd=ws, capture_output=True, text=True, check=True)
        out[name] = time.perf_counter() - t0
    return out


def breakdown(t: dict, wall: float) -> dict[str, float]:
    """The run's clock as the table's columns (seconds)."""
    g = {k: float(t.get(k) or 0.0) for k in ("startup", "group.build", "group.quality", "group.firewall",
                                              "group.perf", "perf.timed", "perf.build_champion", "perf.build_twin",
                                              "group.verdict")}
    perf_rest = g["group.perf"] - g["perf.timed"] - g["perf.build_champion"] - g["perf.build_twin"]
    between = float(t.get("between") or 0.0)  # the judge's own time between its phases (named in the time line)
    accounted = g["startup"] + g["group.build"] + g["group.quality"] + g["group.firewall"] + g["group.perf"] \
        + float(t.get("group.guards") or 0.0) + g["group.verdict"] + between
    return {"wall": wall, "timed": g["perf.timed"], "startup": g["startup"], "build": g["group.build"],
            "zygote_imports": float(t.get("zygote_imports") or 0.0), "guards": float(t.get("group.guards") or 0.0),
            "champion_build": g["perf.build_champion"] + g["perf.build_twin"], "quality": g["group.quality"],
            "firewall": g["group.firewall"], "perf_rest": perf_rest, "decide": g["group.verdict"],
            "between": between, "unattributed": wall - accounted,
            "fixed": wall - g["perf.timed"], "zygote_warm": bool(t.get("zygote_warm"))}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default="tiny")
    ap.add_argument("--workdir", default="/tmp/ditar-fixed-cost")
    ap.add_argument("--out", default="fixed_cost")
    ap.add_argument("--runs", default=",".join(RUNS))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ws = Path(args.workdir)
    ladder.research(ws, args.suite)
    t0 = time.perf_counter()
    ladder.ditar(ws, "baseline")
    result: dict = {"suite": args.suite, "baseline_s": time.perf_counter() - t0, "runs": []}
    import torch

    result["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    kind = "gpu" if torch.cuda.is_available() else "cpu"
    flags = dict(ladder.DEFAULTS, LEAN=False)
    rungs = {**{r[0]: r for r in ladder.RUNGS}, **EXTRA}
    manifest = json.loads((ws / ".autoresearch/ladder/baseline/manifest.json").read_text())
    lanes = read_lanes(json.loads((ws / ".autoresearch/ladder/baseline/lanes.json").read_text()))
    # the host's own noise at the baseline (stock A/A), to read the verdicts beside
    result["stock_aa_ci_half_width"] = {k: v.noise["ci_half_width"] for k, v in lanes.items() if v.noise}
    first_seed = next(iter(manifest["seeds"].values()))
    for name in args.runs.split(","):
        _, cls, subject, updates, _ = rungs[name]
        want = {**flags, **{k: (first_seed if v == "first_seed" else v) for k, v in updates.items()}}
        (ws / "mutable/pipeline.py").write_text(ladder.render(want))
        ladder.git(ws, "commit", "-qam", f"{subject}\n\nDitar-Class: {cls}")
        t0 = time.perf_counter()
        res = ladder.ditar(ws, "experiment", "--classification", cls, "--description", subject, check=False)
        wall = time.perf_counter() - t0
        (out / f"{name}.log").write_text(res.stdout[-20000:] + res.stderr[-5000:])
        verdict = next((ln for ln in reversed(res.stdout.splitlines()) if ln.startswith("DITAR ")), res.stderr[-300:])
        summary = json.loads(max((ws / ".autoresearch/ladder/runs").glob("*/summary.json"),
                                 key=lambda p: p.stat().st_mtime).read_text())
        status = verdict.split()[2] if verdict.startswith("DITAR VERDICT") else "REFUSED"
        if status == "KEEP":
            flags = want
        time_line = next((ln for ln in res.stdout.splitlines() if ln.startswith("ditar: time")), "")
        row = {"run": name, "verdict": status, **breakdown(summary.get("timings", {}), wall), "time_line": time_line}
        result["runs"].append(row)
        print(f"[fixed-cost] {name}: {status} wall {wall:.1f}s timed {row['timed']:.1f}s fixed {row['fixed']:.1f}s "
              f"zygote {'warm' if row['zygote_warm'] else 'cold'}", flush=True)
        (out / "fixed_cost.json").write_text(json.dumps(result, indent=1))  # so far: a cut-off call keeps its rows
    result["import_hooks_ms"] = import_ms("pytest_ditar.plugin.hooks")
    result["import_pytest_benchmark_ms"] = import_ms("pytest_benchmark.plugin")
    result["own_tests_s"] = own_tests_s(ws)
    result["bound_s"] = BOUND_S[kind]
    (out / "fixed_cost.json").write_text(json.dumps(result, indent=1))
    print_table(result)
    return 0


def print_table(r: dict) -> None:
    print(f"\nfixed cost of a gated run, suite {r['suite']} on {r['device']} "
          f"(seconds; bound: wall <= timed + {r['bound_s']:.0f})")
    cols = ("wall", "timed", "startup", "guards", "build", "zygote_imports", "champion_build", "quality", "firewall",
            "perf_rest", "decide", "between", "unattributed", "fixed")
    print(f"{'run':<12} {'verdict':<8} {'zygote':<6} " + " ".join(f"{c:>14}" for c in cols) + "  within")
    for row in r["runs"]:
        ok = "yes" if row["fixed"] <= r["bound_s"] else "NO"
        warm = "warm" if row.get("zygote_warm") else "cold"
        print(f"{row['run']:<12} {row['verdict']:<8} {warm:<6} " + " ".join(f"{row.get(c, 0.0):>14.2f}" for c in cols)
              + f"  {ok}")
    print("stock A/A noise at the baseline (CI half-width): "
          + ", ".join(f"{k} {v * 100:.1f}%" for k, v in r.get("stock_aa_ci_half_width", {}).items()))
    print(f"import pytest_ditar.plugin.hooks: {r['import_hooks_ms']:.1f} ms cumulative (pytest_benchmark.plugin "
          f"{r['import_pytest_benchmark_ms']:.1f} ms; bound 50 ms)")
    own = r["own_tests_s"]
    print("a project's own `pytest tests` beside a ditar config: " + ", ".join(f"{k} {v:.2f}s" for k, v in own.items()))
    for row in r["runs"]:
        print(f"  {row['run']}: {re.sub(r'^ditar: ', '', row['time_line'])}")


if __name__ == "__main__":
    sys.exit(main())
