"""What the anchor, the tail rule's confirming calls and the empty calls cost a gated run (issue 49):
two checkouts (before and after a change) judged alternately on the tiny suite, each in a ladder
workspace of its own: the baseline, the lean loop (a real win: KEPT), then the champion again a
comment apart (A/A) N times. Prints each run's wall, its objective lane's rounds and the seconds
booked to the anchor, the confirmation and the empty calls.

    git archive <old> | tar -x -C /tmp/before-src     # and a venv whose .pth puts it first
    FIXED_ROUNDS=29 python benchmarks/anchor_cost.py --runs 4 \\
        --before /tmp/before-src /tmp/before-venv/bin/python --after /tmp/after-src /tmp/after-venv/bin/python

FIXED_ROUNDS caps every lane's rounds, so the walls compare the fixed costs rather than how far
each lane grew on a noisy host. Each side needs a frozen copy: a gated run refuses a judge whose
files changed since its baseline.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ladder  # noqa: E402 - the ladder's workspace, switches and runner


def _ditar(py: str, ws: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DITAR_ZYGOTE_IDLE_S": "0"}  # no warm zygote shared between the two sides
    return subprocess.run([py, "-m", "pytest_ditar.cli", "--config", "config/autoresearch.json", *args], cwd=ws,
                          capture_output=True, text=True, env=env)


def _workspace(ws: Path) -> None:
    ladder.setup(ws, "tiny")
    if os.environ.get("FIXED_ROUNDS"):
        cfg = json.loads((ws / "config/autoresearch.json").read_text())
        cfg["perf"]["max_rounds"] = int(os.environ["FIXED_ROUNDS"])
        (ws / "config/autoresearch.json").write_text(json.dumps(cfg, indent=1))
        ladder.git(ws, "commit", "-qam", "fixed rounds")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--before", nargs=2, metavar=("SRC", "PYTHON"), required=True)
    ap.add_argument("--after", nargs=2, metavar=("SRC", "PYTHON"), required=True)
    ap.add_argument("--workdir", default="/tmp/ditar-anchor-cost")
    args = ap.parse_args()
    sides = {"before": args.before[1], "after": args.after[1]}
    wss = {side: Path(args.workdir) / side for side in sides}
    for side, py in sides.items():
        _workspace(wss[side])
        _ditar(py, wss[side], "init", "--tag", "ladder")
        print(side, "baseline", _ditar(py, wss[side], "baseline").returncode, flush=True)
    flags = {s: dict(ladder.DEFAULTS, LEAN=False) for s in sides}
    for i, name in enumerate(["lean"] + ["same_again"] * args.runs):
        for side in (list(sides) if i % 2 == 0 else list(sides)[::-1]):  # alternate who goes first
            ws, py = wss[side], sides[side]
            _, cls, subject, updates, _ = ladder.BY_NAME[name]
            trial = {**flags[side], **updates, **({"_comment": f"again {i}"} if name == "same_again" else {})}
            (ws / "mutable/pipeline.py").write_text(ladder.render(trial))
            ladder.git(ws, "commit", "-qam", f"{subject} {i}\n\nDitar-Class: {cls}")
            t0 = time.perf_counter()
            res = _ditar(py, ws, "experiment", "--classification", cls, "--description", subject)
            wall = time.perf_counter() - t0
            line = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else res.stderr[-300:]
            if line.startswith("DITAR VERDICT: KEEP"):
                flags[side] = {k: v for k, v in trial.items() if not k.startswith("_")}
            runs = sorted((ws / ".autoresearch/ladder/runs").glob("*/summary.json"), key=lambda p: p.stat().st_mtime)
            summary = json.loads(runs[-1].read_text()) if runs else {}
            t = summary.get("timings", {})
            m = summary.get("lanes", {}).get("latency_b1", {}).get("measurement", {})
            extra = {k: round(t.get(k) or 0, 2) for k in ("perf.anchor", "perf.confirm", "perf.empty_calls")}
            print(f"{side:6} {i} {name:10} wall {wall:6.1f}s rounds {len(m.get('samples', [])):4d} {extra} "
                  f"load {os.getloadavg()[0]:.1f} | {line[:120]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
