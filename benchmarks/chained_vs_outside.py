"""The chained figure after several KEEPs against an outside timing of the two commits (issue 49).

Issue 49's Done-when: "after three or more KEEPs on the tiny suite, the champion's chained figure
against the baseline agrees within 15% with an outside timing of the two commits (alternating
calls in one process)". This makes a scratch tiny-suite research project (benchmarks/ladder.py's
workspace), commits a baseline whose pipeline runs two redundant full passes whose results it
throws away (tests/candidates.py's REDUNDANT, twice), takes the baseline, then judges three honest
exact wins in a row through `dit-ar experiment`, each on top of the last KEEP:

    drop_one   one redundant pass removed        (3 passes -> 2: about 1.5x)
    drop_two   the other removed: the stock code (2 -> 1: about 2x)
    lean       ladder.py's "lean" rung            (the lean sampling loop: about 2-3x on CPU)

A run the gate did not judge (its objective lane UNSTABLE) runs once more, a comment apart (the
gate's re-run rule, tests/conftest.py not_judged). It then reads the chained figure from
`dit-ar status --json` and times the baseline commit and the champion commit OUTSIDE the tool:
each commit's mutable/ written from `git show` into a folder of its own, both imported in this
one plain process under different module names (runtime.harness.build_candidate names a module
by its folder), built with the suite's PipelineSpec (runtime.harness.make_spec) on CPU, one torch
thread (what the lanes pin a CPU worker to: runtime.worker_process.worker_threads), WARMUP calls each,
then CALLS alternating calls each (the order inside a pair alternates too) on the objective
lane's request. It prints a table and writes chained_vs_outside.json:

    python benchmarks/chained_vs_outside.py --out benchmarks/results/chained_vs_outside

The host's load average is recorded before and after (a busy 2-core box moves the figures).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ladder  # noqa: E402 - benchmarks/ladder.py, the workspace helpers

TAG = "ladder"  # ladder.research's tag
GEN_CALL = "        out = self.pipe(class_labels=list(request.labels)"
REDUNDANT_PASS = ("        self.pipe(class_labels=list(request.labels), guidance_scale=self.spec.guidance,\n"
                  "                  generator=[torch.Generator('cpu').manual_seed(s) for s in request.seeds],\n"
                  "                  num_inference_steps=request.steps, output_type='np')  # thrown away\n")


def stock_with(passes: int, stock: str) -> str:
    """The stock pipeline with `passes` redundant full passes before the real one (outputs unchanged)."""
    assert GEN_CALL in stock
    return stock.replace(GEN_CALL, REDUNDANT_PASS * passes + GEN_CALL)


def plan(stock: str) -> list[tuple[str, str, str]]:
    return [("drop_one", "Drop one of the two redundant full passes per call", stock_with(1, stock)),
            ("drop_two", "Drop the other redundant full pass (the stock pipeline)", stock),
            ("lean", ladder.BY_NAME["lean"][2], ladder.render(ladder.DEFAULTS))]


def verdict_of(res: Any) -> str:
    out = res.stdout.strip()
    return out.splitlines()[-1] if out else res.stderr.strip()[-300:]


def not_judged(line: str) -> bool:
    """tests/conftest.py's rule: the objective lane was UNSTABLE, so the gate judged nothing."""
    return line.startswith("DITAR VERDICT: DISCARD") and "unstable" in line


def last_summary(ws: Path) -> dict:
    runs = sorted((ws / f".autoresearch/{TAG}/runs").glob("*/summary.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(runs[-1].read_text()) if runs else {}


def experiment(ws: Path, name: str, subject: str, source: str, objective: str) -> dict:
    """Commit `source` as one exact hypothesis and judge it; once more when not judged."""
    rows = []
    for attempt in (1, 2):
        text = source + ("\n# once more: the gate did not judge the first run\n" if attempt == 2 else "")
        (ws / "mutable/pipeline.py").write_text(text)
        ladder.git(ws, "commit", "-qam", f"{subject}{', once more' if attempt == 2 else ''}\n\nDitar-Class: exact")
        t0 = time.perf_counter()
        res = ladder.ditar(ws, "experiment", "--classification", "exact", "--description", subject, check=False)
        line = verdict_of(res)
        summary = last_summary(ws)
        lane = summary.get("lanes", {}).get(objective, {})
        oc = lane.get("outcome", {})
        rows.append({"rung": name, "attempt": attempt, "commit": ladder.git(ws, "rev-parse", "HEAD"),
                     "verdict": line, "wall_s": time.perf_counter() - t0, "speedup": oc.get("speedup"),
                     "ci95": [oc.get("ci_low"), oc.get("ci_high")], "net": lane.get("comparison", {}).get("net"),
                     "anchor": lane.get("comparison", {}).get("anchor")})
        print(f"[chained] {name} (attempt {attempt}): {line} [{rows[-1]['wall_s']:.0f} s]", flush=True)
        if not not_judged(line):
            break
    return {"name": name, "attempts": rows, "kept": rows[-1]["verdict"].startswith("DITAR VERDICT: KEEP")}


def write_commit(ws: Path, commit: str, dest: Path) -> Path:
    """`commit`'s mutable/ as files under dest/mutable (from git's objects, not the working tree)."""
    out = dest / "mutable"
    out.mkdir(parents=True, exist_ok=True)
    for rel in ladder.git(ws, "ls-tree", "-r", "--name-only", commit, "mutable/").splitlines():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(ladder.git(ws, "show", f"{commit}:{rel}") + "\n")
    return out


def outside(ws: Path, base_commit: str, champ_commit: str, lane_name: str, calls: int, warmup: int,
            scratch: Path) -> dict:
    """Both commits built in this process, timed alternately: generate(request) + nothing else.
    Folders are named by commit, so a commit timed twice (per step, then end to end) is rebuilt
    under its own module name."""
    import torch

    from pytest_ditar.config.project import load_config
    from pytest_ditar.config.suite import load_suite
    from pytest_ditar.runtime.calls import lane_request
    from pytest_ditar.runtime.harness import build_candidate, make_spec
    from pytest_ditar.runtime.models import resolve_model_dir

    torch.set_num_threads(1)  # a CPU lane's worker: runtime.worker_process.worker_threads -> 1
    cfg = load_config(ws / "config/autoresearch.json")
    suite = load_suite(cfg.suite_dir)
    spec = make_spec(suite, resolve_model_dir(suite), "cpu")
    req = lane_request(suite, suite.lane(lane_name))
    sides = {}
    for role, commit in (("baseline", base_commit), ("champion", champ_commit)):
        sides[role] = build_candidate(write_commit(ws, commit, scratch / commit[:12]), spec)
    import numpy as np

    outs = {r: c.generate(req) for r, c in sides.items()}
    same = bool(np.array_equal(outs["baseline"].images, outs["champion"].images))
    for _ in range(warmup):
        for c in sides.values():
            c.generate(req)
    times: dict[str, list[float]] = {"baseline": [], "champion": []}
    for i in range(calls):
        order = ("baseline", "champion") if i % 2 == 0 else ("champion", "baseline")
        for role in order:
            t0 = time.perf_counter()
            sides[role].generate(req)
            times[role].append(time.perf_counter() - t0)
    b, c = times["baseline"], times["champion"]
    return {"threads": torch.get_num_threads(), "calls_each": calls, "warmup_each": warmup, "lane": lane_name,
            "request": {"labels": list(req.labels), "seeds": list(req.seeds), "steps": req.steps},
            "images_identical": same,
            "baseline_median_s": statistics.median(b), "champion_median_s": statistics.median(c),
            "ratio_of_medians": statistics.median(b) / statistics.median(c),
            "median_pair_ratio": statistics.median(x / y for x, y in zip(b, c)),
            "ratio_of_totals": sum(b) / sum(c), "baseline_s": b, "champion_s": c}


def agree(a: float | None, b: float | None, within: float = 0.15) -> tuple[float | None, bool | None]:
    """(chained / outside - 1, |that| <= within)."""
    if not a or not b:
        return None, None
    d = a / b - 1.0
    return d, abs(d) <= within


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", default="/tmp/ditar-chained")
    ap.add_argument("--out", default="benchmarks/results/chained_vs_outside")
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    ws, out = Path(args.workdir), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    result: dict[str, Any] = {"host": {"cpus": os.cpu_count(), "load_before": os.getloadavg()},
                              "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    ladder.setup(ws, "tiny")
    stock = (ws / "mutable/pipeline.py").read_text()
    (ws / "mutable/pipeline.py").write_text(stock_with(2, stock))
    ladder.git(ws, "commit", "-qam", "Baseline: the stock pipeline with two redundant full passes per call")
    ladder.ditar(ws, "init", "--tag", TAG)
    objective = json.loads((ws / "config/autoresearch.json").read_text())["objective_lane"]
    t0 = time.perf_counter()
    ladder.ditar(ws, "baseline")
    result["baseline_s"] = time.perf_counter() - t0
    base_commit = ladder.git(ws, "rev-parse", "HEAD")
    print(f"[chained] baseline {base_commit[:10]} [{result['baseline_s']:.0f} s]", flush=True)
    result["experiments"] = [experiment(ws, n, s, src, objective) for n, s, src in plan(stock)]
    status = json.loads(ladder.ditar(ws, "status", "--json").stdout)
    cum = (status.get("champion") or {}).get("cumulative") or {}
    champ_commit = (status.get("champion") or {}).get("commit") or ladder.git(ws, "rev-parse", "HEAD")
    result["status_champion"] = {k: v for k, v in (status.get("champion") or {}).items() if k != "cumulative"}
    result["chained"] = cum
    result["baseline_commit"], result["champion_commit"] = base_commit, champ_commit
    result["load_before_outside"] = os.getloadavg()
    result["outside"] = outside(ws, base_commit, champ_commit, objective, args.calls, args.warmup,
                                ws.parent / f"{ws.name}-outside")
    # Each KEEP's pair (the champion it beat, the commit kept) timed the same way, beside the gross
    # figure that KEEP was credited: where along the chain the two instruments part.
    kept = [base_commit] + [e["attempts"][-1]["commit"] for e in result["experiments"] if e["kept"]]
    result["outside_per_keep"] = []
    for (before, after), e in zip(zip(kept, kept[1:]), [e for e in result["experiments"] if e["kept"]]):
        o = outside(ws, before, after, objective, args.calls, args.warmup, ws.parent / f"{ws.name}-outside")
        result["outside_per_keep"].append({"name": e["name"], "gross": e["attempts"][-1]["speedup"],
                                           "net": (e["attempts"][-1]["net"] or {}).get("net"),
                                           **{k: v for k, v in o.items() if not k.endswith("_s") or "median" in k}})
    last = result["experiments"][-1]["attempts"][-1].get("anchor") or {}
    # The final KEEP's run timed the baseline's code (the anchor) in its own rounds: the tool's direct
    # figure of the baseline against the champion it kept, from one run's workers
    result["in_run_anchor_ratio"] = 1 / last["candidate_ratio"] if last.get("candidate_ratio") else None
    result["host"]["load_after"] = os.getloadavg()
    kept_net = [a["net"] for e in result["experiments"] for a in e["attempts"][-1:] if e["kept"] and a["net"]]
    gross = 1.0
    net = 1.0
    for n in kept_net:
        gross, net = gross * n["gross"], net * n["net"]
    result["per_keep_chained"] = {"gross": gross if kept_net else None, "net": net if kept_net else None,
                                  "keeps_with_net": len(kept_net)}
    o = result["outside"]
    ch = cum.get("speedup")
    result["agreement"] = {
        name: dict(zip(("chained_over_outside_minus_1", "within_15pct"), agree(ch, o[key])))
        for name, key in (("median_pair_ratio", "median_pair_ratio"), ("ratio_of_totals", "ratio_of_totals"),
                          ("ratio_of_medians", "ratio_of_medians"))}
    result["agreement"]["net_chain_vs_median_pair_ratio"] = dict(
        zip(("chained_over_outside_minus_1", "within_15pct"), agree(result["per_keep_chained"]["net"],
                                                                     o["median_pair_ratio"])))
    result["wall_s"] = time.perf_counter() - t_start
    (out / "chained_vs_outside.json").write_text(json.dumps(result, indent=1, default=str))
    print_table(result)
    return 0


def print_table(r: dict) -> None:
    f = lambda x, fmt="{:.3f}": fmt.format(x) if isinstance(x, (int, float)) else "-"  # noqa: E731
    print(f"\nload average (1/5/15 min): before {r['host']['load_before']}, before the outside timing "
          f"{r['load_before_outside']}, after {r['host']['load_after']} on {r['host']['cpus']} CPUs")
    print(f"{'experiment':<10}{'try':>4}  {'gross':>7}{'ci95':>17}{'net':>8}  verdict")
    for e in r["experiments"]:
        for a in e["attempts"]:
            ci = a["ci95"]
            ci_s = f"[{f(ci[0])},{f(ci[1])}]" if ci and ci[0] else "-"
            net = (a.get("net") or {}).get("net")
            print(f"{e['name']:<10}{a['attempt']:>4}  {f(a['speedup']):>7}{ci_s:>17}{f(net):>8}  {a['verdict'][:100]}")
    c, o, p = r["chained"], r["outside"], r["per_keep_chained"]
    ci = c.get("ci95") or [None, None]
    print(f"\nchained (dit-ar status --json): {f(c.get('speedup'))}x ci95 [{f(ci[0])}, {f(ci[1])}] over "
          f"{c.get('keeps')} KEEP(s); per-KEEP gross product {f(p['gross'])}x, net of the harness {f(p['net'])}x")
    print(f"in-run anchor (the last KEEP's run: baseline code timed in its rounds): "
          f"{f(r.get('in_run_anchor_ratio'))}x the champion")
    print(f"outside ({o['threads']} thread, {o['calls_each']} alternating calls each, {o['lane']}): baseline "
          f"{o['baseline_median_s'] * 1e3:.2f} ms, champion {o['champion_median_s'] * 1e3:.2f} ms; median pair ratio "
          f"{f(o['median_pair_ratio'])}x, ratio of totals {f(o['ratio_of_totals'])}x, ratio of medians "
          f"{f(o['ratio_of_medians'])}x; images identical: {o['images_identical']}")
    print("\nper KEEP, outside (the same alternating timing of the pair) beside the gross and net figures:")
    print(f"{'KEEP':<10}{'gross':>8}{'net':>8}{'outside':>9}{'gross/outside-1':>17}")
    for k in r.get("outside_per_keep", []):
        d = agree(k["gross"], k["median_pair_ratio"])[0]
        print(f"{k['name']:<10}{f(k['gross']):>8}{f(k['net']):>8}{f(k['median_pair_ratio']):>9}"
              f"{f(d, '{:+.1%}'):>17}")
    for name, a in r["agreement"].items():
        print(f"  {name:<32} chained/outside - 1 = {f(a['chained_over_outside_minus_1'], '{:+.1%}')}  "
              f"within 15%: {a['within_15pct']}")


if __name__ == "__main__":
    sys.exit(main())
