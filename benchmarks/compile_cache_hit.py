"""Why a compiled champion loaded from the compile cache runs latency_b1 slower (issue 29).

The ladder's compiled block (faster_exact.py: the exact stack + REGIONAL_COMPILE) in fresh
processes, one after another, each timing b1 and b8 in-process after its warm-up:
  cold      a new, empty cache folder
  hit       the same folder again (what a champion rebuilt from its worktree sees)
  hit-ro    a read-only copy of it (what the candidate's overlay shows)
  hit-pgo0  the folder, dynamo's profile-guided dynamic shapes off (TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO=0)
  pair-a/b  two processes on the folder warming up at once (a champion and its twin), then timed one
            after the other
Each prints its medians and dynamo's counters (graphs compiled, frames, recompiles).

    python benchmarks/compile_cache_hit.py --suite tiny --out /tmp/cch           # CPU dry run
    python benchmarks/compile_cache_hit.py --suite dit-xl-2-256 --out $OUT/cch   # GPU, ~5 minutes
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ladder  # noqa: E402 - a sibling script: the rung template and the scratch project

FLAGS = dict(ladder.DEFAULTS, FUSED_QKV=True, BATCHED_COND=True, CUDA_GRAPHS=True, REGIONAL_COMPILE="default")


def child(args: argparse.Namespace) -> int:
    import torch

    from pytest_ditar.loop.run.session import open_session
    from pytest_ditar.runtime.calls import lane_request
    from pytest_ditar.runtime.harness import make_spec

    from inprocess import InProcessCandidate

    sess = open_session(Path(args.workdir) / "config/autoresearch.json")
    device = sess.resolved_device()
    spec = make_spec(sess.suite, sess.model_dir(), device)
    t0 = time.perf_counter()
    cand = InProcessCandidate(Path(args.candidate), spec)
    lanes = {lane.name: lane for lane in sess.suite.lanes}
    out: dict = {"case": args.case, "build_s": cand.build_s}
    reqs = {name: lane_request(sess.suite, lanes[name]) for name in ("latency_b1", "throughput_b8")}
    for name, req in reqs.items():
        w0 = time.perf_counter()
        for _ in range(2):
            cand.timed(req)
        out[f"{name}_warmup_s"] = time.perf_counter() - w0
    if args.sync:  # warmed up beside its pair; timed alone, when the parent says so
        Path(args.sync, f"warm-{args.case}").touch()
        while not Path(args.sync, f"go-{args.case}").exists():
            time.sleep(0.05)
    for name, reps in (("latency_b1", 12), ("throughput_b8", 4)):
        out[f"{name}_ms"] = statistics.median(cand.timed(reqs[name])[0] for _ in range(reps)) * 1e3
    out["graphs"] = len(getattr(cand.candidate, "_graphs", {}))
    out["total_s"] = time.perf_counter() - t0
    c = torch._dynamo.utils.counters
    out["dynamo"] = {k: dict(v) for k, v in c.items() if k in ("stats", "recompiles", "inductor", "frames")}
    inductor = c.get("inductor", {})
    out["fxgraph_cache"] = {k: inductor.get(k, 0) for k in ("fxgraph_cache_hit", "fxgraph_cache_miss")}
    print("RESULT " + json.dumps(out, default=str), flush=True)
    return 0


def pair(ws: Path, cand: Path, cache: Path, out: Path, cases: str) -> list[dict]:
    """Two processes on the same warm cache, warming up at the same time, then timed one at a time."""
    if "pair" not in cases:
        return []
    import tempfile

    sync = Path(tempfile.mkdtemp(prefix="cch-sync-"))
    env = dict(os.environ, TORCHINDUCTOR_FX_GRAPH_CACHE="1", TORCHINDUCTOR_AUTOGRAD_CACHE="1",
               TORCHINDUCTOR_CACHE_DIR=str(cache), TRITON_CACHE_DIR=str(cache / "triton"))
    procs = {c: subprocess.Popen([sys.executable, __file__, "--child", "--case", c, "--workdir", str(ws),
                                  "--candidate", str(cand), "--sync", str(sync)], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for c in ("pair-a", "pair-b")}
    while not all((sync / f"warm-{c}").exists() for c in procs) and all(p.poll() is None for p in procs.values()):
        time.sleep(0.1)
    rows = []
    for c, p in procs.items():
        (sync / f"go-{c}").touch()
        text = p.communicate()[0]
        (out / f"{c}.log").write_text(text)
        line = next((ln for ln in text.splitlines() if ln.startswith("RESULT ")), None)
        row = json.loads(line[7:]) if line else {"case": c, "error": text[-1500:]}
        row["wall_s"] = 0.0
        rows.append(row)
        print(json.dumps(row, default=str)[:1500], flush=True)
    shutil.rmtree(sync, ignore_errors=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default="tiny")
    ap.add_argument("--workdir", default="/tmp/ditar-cch")
    ap.add_argument("--out", default="cch")
    ap.add_argument("--cases", default="cold,hit,hit-ro,hit-pgo0,pair")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--case")
    ap.add_argument("--candidate")
    ap.add_argument("--sync", help="a folder: touch warm-CASE after the warm-up, wait for go-CASE")
    args = ap.parse_args()
    if args.child:
        return child(args)
    ws, out = Path(args.workdir), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ladder.setup(ws, args.suite)
    cand = ws.parent / f"{ws.name}-candidate"
    shutil.rmtree(cand, ignore_errors=True)
    cand.mkdir()
    (cand / "pipeline.py").write_text(ladder.render(FLAGS))
    cache = ws.parent / f"{ws.name}-cache"
    ro = ws.parent / f"{ws.name}-cache-ro"
    shutil.rmtree(cache, ignore_errors=True)
    rows = []
    for case in [c for c in ("cold", "hit", "hit-ro", "hit-pgo0") if c in args.cases or c == "cold"]:
        folder = cache
        env = dict(os.environ, TORCHINDUCTOR_FX_GRAPH_CACHE="1", TORCHINDUCTOR_AUTOGRAD_CACHE="1")
        if case == "hit-ro":
            if ro.exists():
                for p in ro.rglob("*"):
                    p.chmod(0o755 if p.is_dir() else 0o644)
                shutil.rmtree(ro)
            shutil.copytree(cache, ro)
            for p in ro.rglob("*"):  # read-only, as far as a non-root process can tell
                p.chmod(stat.S_IMODE(p.stat().st_mode) & ~0o222)
            folder = ro
        if case == "hit-pgo0":
            env["TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO"] = "0"
        env.update(TORCHINDUCTOR_CACHE_DIR=str(folder), TRITON_CACHE_DIR=str(folder / "triton"))
        t0 = time.perf_counter()
        res = subprocess.run([sys.executable, __file__, "--child", "--case", case, "--workdir", str(ws),
                              "--candidate", str(cand)], env=env, capture_output=True, text=True)
        (out / f"{case}.log").write_text(res.stdout + res.stderr)
        line = next((ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")), None)
        row = json.loads(line[7:]) if line else {"case": case, "error": (res.stderr or res.stdout)[-1500:]}
        row["wall_s"] = time.perf_counter() - t0
        row["cache_files"] = sum(1 for p in folder.rglob("*") if p.is_file())
        rows.append(row)
        print(json.dumps(row, default=str)[:1500], flush=True)
    rows += pair(ws, cand, cache, out, args.cases)
    (out / "compile_cache_hit.json").write_text(json.dumps(rows, indent=1, default=str))
    print(f"\n{'case':<10}{'b1 ms':>9}{'b8 ms':>9}{'b1 warm s':>10}{'graphs':>7}{'fx hit/miss':>12}{'wall s':>8}")
    for r in rows:
        fx = r.get("fxgraph_cache") or {}
        nan = float("nan")
        print(f"{r['case']:<10}{r.get('latency_b1_ms', nan):>9.2f}{r.get('throughput_b8_ms', nan):>9.2f}"
              f"{r.get('latency_b1_warmup_s', nan):>10.1f}{r.get('graphs', '-'):>7}"
              f"{str(fx.get('fxgraph_cache_hit', '-')) + '/' + str(fx.get('fxgraph_cache_miss', '-')):>12}"
              f"{r['wall_s']:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
