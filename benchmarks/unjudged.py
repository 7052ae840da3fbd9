"""How many honest gated runs the judge leaves unjudged (issue 38): an agent's session of honest
commits through `dit-ar experiment`, each counted by what the gate made of it.

    python benchmarks/unjudged.py --runs 20 --out /tmp/unjudged          # CPU, tiny suite
    python benchmarks/unjudged.py --suite dit-xl-2-256 --runs 8          # on a GPU

The session: the baseline, then the lean loop (a real win), the exact rungs a CPU can take, and
the champion's own code again, a comment apart, for the rest (an honest A/A after every KEEP: the
run where a champion timed in a role other than the one it was kept in used to drift). A run is
"unjudged" when its only objection is an UNSTABLE objective lane (the re-run rule lets it run once
more); its cause is split into the champion's drift and the rest (noise, interference). Prints one
row per run and a summary, and writes unjudged.json.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ladder  # noqa: E402 - the ladder's workspace, switches and runner

HONEST = ["lean", "fused_qkv", "batched_cond"]


def classify(summary: dict, verdict: str) -> str:
    """judged | unjudged-drift | unjudged-other | refused | crash."""
    if not verdict.startswith("DITAR VERDICT"):
        return "refused"
    status = verdict.split()[2]
    if status == "CRASH":
        return "crash"
    lane = (summary.get("lanes") or {}).get(summary.get("objective_lane") or "latency_b1", {})
    oc = lane.get("outcome") or {}
    reasons = summary.get("reasons") or []
    if status == "DISCARD" and oc.get("verdict") == "UNSTABLE" and len(reasons) == 1:
        return "unjudged-drift" if oc.get("cause") == "drift" or "champion drift" in oc.get("reason", "") \
            else "unjudged-other"
    return "judged"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default="tiny")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--workdir", default="/tmp/ditar-unjudged")
    ap.add_argument("--out", default="unjudged")
    args = ap.parse_args()
    ws, out = Path(args.workdir), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ladder.research(ws, args.suite)
    print(ladder.ditar(ws, "baseline").stdout.strip().splitlines()[-1], flush=True)
    flags = dict(ladder.DEFAULTS, LEAN=False)
    rows = []
    for n in range(args.runs):
        name = HONEST[n] if n < len(HONEST) else "same_again"
        _, cls, subject, updates, _expected = ladder.BY_NAME[name]
        trial = {**flags, **updates}
        if name == "same_again":
            trial["_comment"] = f"the champion's code again (run {n + 1})"
        (ws / "mutable/pipeline.py").write_text(ladder.render(trial))
        ladder.git(ws, "commit", "-qam", f"{subject}\n\nDitar-Class: {cls}")
        t0 = time.perf_counter()
        res = ladder.ditar(ws, "experiment", "--classification", cls, "--description", subject, check=False)
        wall = time.perf_counter() - t0
        verdict = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else res.stderr.strip()[-300:]
        runs = sorted((ws / ".autoresearch/ladder/runs").glob("*/summary.json"), key=lambda p: p.stat().st_mtime)
        summary = json.loads(runs[-1].read_text()) if runs else {}
        kind = classify(summary, verdict)
        if verdict.startswith("DITAR VERDICT: KEEP"):
            flags = {k: v for k, v in trial.items() if not k.startswith("_")}
        speed = m.group(1) if (m := re.search(r"speedup=(\S+)", verdict)) else "-"
        rows.append({"run": n + 1, "rung": name, "verdict": verdict.split()[2] if verdict.startswith("DITAR V")
                     else "REFUSED", "speedup": speed, "kind": kind, "wall_s": round(wall, 1),
                     "reason": summary.get("reason", "")[:160]})
        print(f"{n + 1:>3} {name:<13} {rows[-1]['verdict']:<8} {speed:>8} {kind:<15} {wall:6.1f}s  "
              f"{rows[-1]['reason'][:100]}", flush=True)
        (out / "unjudged.json").write_text(json.dumps({"suite": args.suite, "rows": rows}, indent=1))
    counts = {k: sum(r["kind"] == k for r in rows) for k in ("judged", "unjudged-drift", "unjudged-other",
                                                            "refused", "crash")}
    print(f"\n{len(rows)} honest gated runs on {args.suite}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    (out / "unjudged.json").write_text(json.dumps({"suite": args.suite, "rows": rows, "counts": counts}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
