"""How often the gate's verdict is right, counted over repeated gated runs (issue 49's Done-when):
each scenario is judged N times from the same stored state (restored between trials: the state
directory, its backup ref and the branch), under a load of short multi-threaded torch bursts
started AFTER the baseline (the load that slows a short bursty worker; a spinning hog barely does).

    python benchmarks/verdict_rates.py --scenarios win12,aa --runs 10 --out /tmp/rates     # CPU, tiny
    python benchmarks/verdict_rates.py --scenarios tail,win2 --runs 20 --load 0 --out /tmp/rates

Scenarios (the baseline's code -> the candidate's; what a right verdict is):
  win12     a baseline that sleeps 20% of its own time after each call -> stock: an honest exact 1.2x,
            KEEP (the gate's re-run rule applied once, as an agent would)
  aa        stock -> stock a comment apart: never KEEP
  win2      a redundant full pass -> stock: a real 2x, KEEP on the first or the second try
  tail      a redundant pass -> stock whose calls, one in ten, take 30x longer (total time worse): never KEEP
  timebomb  a redundant pass -> a 2x win (KEPT first) whose code slows itself 10% once a file exists
            in the project (a folder every sandbox reads; $HOME is emptied in each); the file is made
            after that KEEP; then the plain code again: never KEEP

Prints one row per trial and a summary table; writes verdict_rates.json. The champion's slowdown
under the load is read from each run's summary (the champion's in-run median over its stored one).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ladder  # noqa: E402 - the scratch workspace and the CLI runner

STOCK = (ladder.ROOT / "mutable" / "pipeline.py").read_text()
HEAD = "    def generate(self, request: Request) -> Generated:\n"
CALL = "        out = self.pipe(class_labels=list(request.labels)"
BOMB_NAME = ".ditar-bomb"  # in the workspace, git-ignored through .git/info/exclude (not the tree)


def _patch(old: str, new: str) -> str:
    assert old in STOCK, old
    return STOCK.replace(old, new)


def wrapped(body: str) -> str:
    """generate() runs the stock body as _generate(), with `body` around it (t0, out in scope)."""
    return _patch(HEAD, HEAD + "        import time, random, os\n        t0 = time.perf_counter()\n"
                  "        out = self._generate(request)\n" + body + "        return out\n\n"
                  "    def _generate(self, request: Request) -> Generated:\n")


REDUNDANT = _patch(CALL, "        self.pipe(class_labels=list(request.labels), guidance_scale=self.spec.guidance,\n"
                         "                  generator=[torch.Generator('cpu').manual_seed(s) for s in request.seeds],\n"
                         "                  num_inference_steps=request.steps, output_type='np')\n" + CALL)
SLOW20 = wrapped("        time.sleep(0.2 * (time.perf_counter() - t0))\n")
TAIL = wrapped("        if random.random() < 0.1:\n            time.sleep(29 * (time.perf_counter() - t0))\n")


def timebomb(ws: Path) -> str:
    return wrapped(f"        if os.path.exists({str(ws / BOMB_NAME)!r}):\n"
                   "            time.sleep(0.1 * (time.perf_counter() - t0))\n")


COMMENT = STOCK + "\n# the same code, a different commit\n"

# name: (baseline code, [code(workspace) to KEEP before the trials], trial candidate, right verdict)
SCENARIOS = {
    "win12": (SLOW20, [], STOCK, "KEEP"),
    "aa": (STOCK, [], COMMENT, "not KEEP"),
    "win2": (REDUNDANT, [], STOCK, "KEEP"),
    "tail": (REDUNDANT, [], TAIL, "not KEEP"),
    "timebomb": (REDUNDANT, [timebomb], STOCK + "\n# the plain code again\n", "not KEEP"),
}


def commit(ws: Path, source: str, subject: str) -> None:
    (ws / "mutable" / "pipeline.py").write_text(source)
    ladder.git(ws, "commit", "-q", "--allow-empty", "-am", subject, "-m", "Ditar-Class: exact")


def experiment(ws: Path, subject: str) -> tuple[str, dict]:
    res = ladder.ditar(ws, "experiment", "--classification", "exact", "--description", subject, "--quiet",
                       check=False)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("DITAR ")]
    runs = sorted((ws / ".autoresearch/ladder/runs").glob("*/summary.json"), key=lambda p: p.stat().st_mtime)
    summary = json.loads(runs[-1].read_text()) if runs else {}
    return (lines[-1] if lines else f"no verdict line (exit {res.returncode}): {res.stderr[-300:]}"), summary


def unstable(line: str) -> bool:
    return line.startswith("DITAR VERDICT: DISCARD") and "unstable" in line.lower()


def champion_slowdown(ws: Path, summary: dict) -> float | None:
    """The champion's in-run median on the objective lane over its stored one (the load's effect)."""
    lane = (summary.get("lanes") or {}).get("latency_b1") or {}
    champ = (lane.get("measurement") or {}).get("champion_samples") or []
    stored = ws / ".autoresearch/ladder/champion_stored_median.json"
    if not champ or not stored.is_file():
        return None
    return statistics.median(champ) / json.loads(stored.read_text())["median"]


def snapshot(ws: Path) -> dict:
    snap = ws.parent / f"{ws.name}-state"
    if snap.exists():
        shutil.rmtree(snap)
    shutil.copytree(ws / ".autoresearch", snap, symlinks=True)
    return {"dir": str(snap), "ref": ladder.git(ws, "rev-parse", "refs/ditar/ladder"),
            "head": ladder.git(ws, "rev-parse", "HEAD")}


def restore(ws: Path, snap: dict) -> None:
    shutil.rmtree(ws / ".autoresearch")
    shutil.copytree(snap["dir"], ws / ".autoresearch", symlinks=True)
    ladder.git(ws, "update-ref", "refs/ditar/ladder", snap["ref"])
    ladder.git(ws, "reset", "-q", "--hard", snap["head"])


def store_champion_median(ws: Path) -> None:
    """The champion's stored objective-lane median, for the load's measured effect."""
    tag = ws / ".autoresearch/ladder"
    kept = sorted(tag.glob("champions/*/lanes.json"), key=lambda p: p.stat().st_mtime)
    src = kept[-1] if kept else tag / "baseline" / "lanes.json"
    lanes = json.loads(src.read_text())
    lane = lanes.get("lanes", lanes).get("latency_b1", {})
    samples = lane.get("samples") or lane.get("measurement", {}).get("samples") or []
    if samples:
        (tag / "champion_stored_median.json").write_text(json.dumps({"median": statistics.median(samples)}))


def start_load(n: int) -> subprocess.Popen | None:
    if n <= 0:
        return None
    code = ("import multiprocessing as mp, time\n"
            "def w():\n import torch; torch.set_num_threads(2); a = torch.randn(192, 192)\n"
            " while True:\n  [a.copy_(torch.tanh(a @ a.T / 192)) for _ in range(20)]; time.sleep(0.004)\n"
            f"ps = [mp.Process(target=w, daemon=True) for _ in range({n})]\n[p.start() for p in ps]\n"
            "[p.join() for p in ps]\n")
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


def stop_load(proc: subprocess.Popen | None) -> None:
    if proc is not None:
        os.killpg(proc.pid, 9)
        proc.wait()


def run_scenario(name: str, runs: int, load: int, workdir: Path, progress=None) -> dict:
    base_code, kept_first, trial_code, right = SCENARIOS[name]
    ws = workdir / name
    ladder.setup(ws, "tiny")
    commit(ws, base_code, f"{name}: the baseline's code")
    ladder.ditar(ws, "init", "--tag", "ladder")
    ladder.ditar(ws, "baseline")
    bomb = ws / BOMB_NAME
    with open(ws / ".git" / "info" / "exclude", "a") as f:
        f.write(f"/{BOMB_NAME}\n")
    for i, code in enumerate(kept_first):
        for attempt in range(3):
            commit(ws, code(ws), f"{name}: kept first ({i}, try {attempt})")
            line, _ = experiment(ws, f"{name}: kept first")
            if line.startswith("DITAR VERDICT: KEEP"):
                break
        else:
            raise SystemExit(f"{name}: the code to keep first was not kept: {line}")
    if name == "timebomb":
        bomb.write_text("armed after the KEEP\n")
    store_champion_median(ws)
    snap = snapshot(ws)
    proc = start_load(load)
    rows = []
    try:
        time.sleep(3 if load else 0)
        for n in range(runs):
            restore(ws, snap)
            t0 = time.time()
            commit(ws, trial_code, f"{name}: trial {n}")
            line, summary = experiment(ws, f"{name} trial {n}")
            tries = 1
            if unstable(line) and right == "KEEP":  # the gate's rule: once more as it is
                commit(ws, trial_code, f"{name}: trial {n}, once more")
                line, summary = experiment(ws, f"{name} trial {n} once more")
                tries = 2
            kept = line.startswith("DITAR VERDICT: KEEP")
            row = {"trial": n, "tries": tries, "kept": kept, "right": kept == (right == "KEEP"),
                   "seconds": round(time.time() - t0, 1), "champion_slowdown": champion_slowdown(ws, summary),
                   "line": line}
            rows.append(row)
            slow = f"{row['champion_slowdown']:.2f}x" if row["champion_slowdown"] else "-"
            print(f"{name:9s} {n:3d} tries={tries} {'ok ' if row['right'] else 'BAD'} champion {slow:>6s} "
                  f"{row['seconds']:6.1f}s  {line[:150]}", flush=True)
            if progress:
                progress(summarise(name, right, runs, load, rows))
    finally:
        stop_load(proc)
    return summarise(name, right, runs, load, rows)


def summarise(name: str, right: str, runs: int, load: int, rows: list[dict]) -> dict:
    return {"scenario": name, "right_verdict": right, "runs": runs, "done": len(rows), "load_processes": load,
            "rows": rows, "kept": sum(r["kept"] for r in rows), "right": sum(r["right"] for r in rows)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--load", type=int, default=4, help="burst processes started after the baseline (0: none)")
    ap.add_argument("--workdir", default="/tmp/ditar-verdict-rates")
    ap.add_argument("--out", default="verdict_rates")
    ap.add_argument("--label", default="", help="appended to the JSON file's name (parallel runs into one folder)")
    ap.add_argument("--table", nargs="*", metavar="JSON", help="print the table of these result files and exit")
    args = ap.parse_args()
    if args.table:
        print_table([r for f in args.table for r in json.loads(Path(f).read_text())])
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: list[dict] = []
    path = out / f"verdict_rates{args.label}.json"

    def progress(current: dict) -> None:  # written after every trial: a run cut short keeps what it counted
        path.write_text(json.dumps([*results, current], indent=1))

    for s in args.scenarios.split(","):
        results.append(run_scenario(s, args.runs, args.load, Path(args.workdir), progress))
        path.write_text(json.dumps(results, indent=1))
    print_table(results)
    return 0


def print_table(results: list[dict]) -> None:
    print(f"\n{'scenario':10s} {'right':>9s} {'kept':>6s} {'wanted':>9s} {'champion slowed (median)':>26s}")
    for r in results:
        slow = [x["champion_slowdown"] for x in r["rows"] if x["champion_slowdown"]]
        s = f"{statistics.median(slow):.2f}x" if slow else "-"
        print(f"{r['scenario']:10s} {r['right']:4d}/{r['done']:<4d} {r['kept']:6d} {r['right_verdict']:>9s} {s:>26s}")


if __name__ == "__main__":
    sys.exit(main())
