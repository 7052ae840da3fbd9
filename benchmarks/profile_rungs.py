"""`dit-ar profile` on the stock pipeline and on the lean rung, side by side (issue 28).

A scratch research project (the ladder's), its baseline, then the lean rung committed on top: each
commit profiled through the console script (`dit-ar profile --commit C --out DIR`), and a table of
both phase shares printed. The lean rung drives the transformer through F.* on its own weights, so
what it removes should show as host time between kernels (the host-gap and "block glue" rows, and
device busy against wall on a GPU).

    python benchmarks/profile_rungs.py --suite tiny --out /tmp/pr                 # CPU dry run (~1 min)
    python benchmarks/profile_rungs.py --suite dit-xl-2-256 --out $OUT/profile     # GPU, under 10 minutes
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ladder  # noqa: E402 - a sibling script: the same scratch project and dit-ar call


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default="tiny")
    ap.add_argument("--workdir", default="/tmp/ditar-profile-rungs")
    ap.add_argument("--out", default="profile_rungs")
    ap.add_argument("--lane", default=None, help="default: the objective lane")
    args = ap.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    out, ws = Path(args.out), Path(args.workdir)
    ladder.research(ws, args.suite)
    ladder.ditar(ws, "baseline")
    commits = {"stock": ladder.git(ws, "rev-parse", "HEAD").strip()}
    (ws / "mutable/pipeline.py").write_text(ladder.render(dict(ladder.DEFAULTS, LEAN=True)))
    ladder.git(ws, "commit", "-qam", "Lean sampling loop\n\nDitar-Class: exact")
    commits["lean"] = ladder.git(ws, "rev-parse", "HEAD").strip()
    rows: dict[str, dict[str, float]] = {}
    for name, sha in commits.items():
        lane = ["--lane", args.lane] if args.lane else []
        res = ladder.ditar(ws, "profile", "--commit", sha, "--out", str(out / name), *lane, check=False)
        (out / f"{name}.log").write_text(res.stdout + res.stderr)
        print(res.stdout, flush=True)
        if res.returncode != 0:
            print(f"[profile] {name}: exit {res.returncode}\n{res.stderr[-2000:]}", flush=True)
            continue
        summary = json.loads((out / name / "summary.json").read_text())
        rows[name] = {str(p["label"]): float(p["host_ms"]) for p in summary.get("phases", [])}
        rows[name]["call (wall)"] = float(summary.get("call_wall_ms") or 0.0)
        if summary.get("device_ms") is not None:  # CUDA: the kernels' time, against the wall
            rows[name]["device busy"] = float(summary["device_ms"])
    doc = {"suite": args.suite, "commits": commits, "rows": rows}
    (out / "profile_rungs.json").write_text(json.dumps(doc, indent=1))
    labels = list(dict.fromkeys(k for r in rows.values() for k in r))
    print(f"\n{'phase':<50} " + " ".join(f"{n + ' ms':>12}" for n in rows))
    for label in labels:
        print(f"{label:<50} " + " ".join(f"{rows[n].get(label, float('nan')):>12.2f}" for n in rows))
    return 0 if len(rows) == len(commits) else 1


if __name__ == "__main__":
    sys.exit(main())
