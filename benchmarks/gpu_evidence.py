"""Issue 52's GPU evidence in one device call: the climb past torch.compile through the real loop, the
run after a compiled KEEP, the final champion beside torch.compile of the stock pipeline, and the
champion's profile against the baseline. Nothing is downloaded (the suite is random-init).

    OUT=/tmp/out bash benchmarks/gpu_evidence.sh                  # on the GPU (dit-xl-2-256)
    SUITE=tiny BUDGET_S=900 OUT=/tmp/out bash benchmarks/gpu_evidence.sh   # the CPU rehearsal

Steps, each timed, in this order (a rung or a compile mode that would end past --budget-s is skipped
and listed, never cut half-way):
  1. benchmarks/ladder.py: a fresh workspace, `dit-ar baseline`, then one `dit-ar experiment` per rung
     (--rungs), each on top of the champion; every run after the first compiled KEEP is one of the
     issue's "runs after a compiled KEEP". On the GPU the first rung is the exact stack with its block
     compiled, one commit (ladder.py's exact_compiled: the exact_stack and regional_compile rungs as
     one), so that the call holds two runs after it within its 600 s.
  2. `dit-ar profile --lane latency_b1 --against baseline` of the final champion.
  3. benchmarks/compile_reference.py: the champion beside torch.compile(mode=...) of the stock
     pipeline in judge workers, paired rounds, and the card's dense fp16 GEMM rate measured here.
  4. the summary table (printed last, under 12,000 characters) and at most 8 files in --out:
     summary.txt, evidence.json, ladder.json, compile_reference.json, profile.json, raw.tgz (the
     rung logs, the profile's traces, the baseline's records) and what the shell wrapper adds
     (run.log, gpu.txt).
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
GPU_RUNGS = "exact_compiled,vae_compile,sdpa,graph_loop"
# rungs whose KEEP leaves a compiled champion
COMPILED = {"exact_compiled", "regional_compile", "vae_compile", "autotune"}
PROFILE_LANE = "latency_b1"
# Seconds the steps after the ladder need (their estimates on an H100 from session 24's call; on CPU the
# rehearsal's own): the ladder stops starting rungs that would eat into them.
RESERVE_S = {"profile": 50.0, "compile": 140.0}


class Steps:
    """Each step's wall, printed as it ends (the progress of a long call) and kept for the table."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.rows: list[dict[str, Any]] = []

    def run(self, name: str, fn: Any, *args: Any) -> Any:
        t = time.monotonic()
        print(f"[evidence {t - self.t0:6.0f} s] {name} ...", flush=True)
        try:
            return fn(*args)
        finally:
            wall = time.monotonic() - t
            self.rows.append({"step": name, "wall_s": round(wall, 1)})
            print(f"[evidence {time.monotonic() - self.t0:6.0f} s] {name}: {wall:.0f} s", flush=True)

    def left(self, budget_s: float) -> float:
        return budget_s - (time.monotonic() - self.t0)


def ladder(suite: str, ws: Path, raw: Path, rungs: str, budget_s: float, rung_s: float | None) -> int:
    cmd = [sys.executable, str(ROOT / "benchmarks/ladder.py"), "--suite", suite, "--workdir", str(ws),
           "--out", str(raw / "ladder"), "--rungs", rungs, "--budget-s", f"{budget_s:.0f}", "--accept-noise",
           *(["--rung-s", str(rung_s)] if rung_s else [])]
    return subprocess.run(cmd).returncode


def profile(ws: Path, raw: Path, lane: str) -> dict[str, Any] | None:
    out = raw / f"profile-{lane}"
    res = subprocess.run([sys.executable, "-m", "pytest_ditar.cli", "--config", "config/autoresearch.json", "profile",
                          "--lane", lane, "--against", "baseline", "--out", str(out)], cwd=ws,
                         capture_output=True, text=True)
    print(res.stdout[-6000:] + res.stderr[-2000:], flush=True)
    path = out / "summary.json"
    return json.loads(path.read_text()) if res.returncode == 0 and path.is_file() else None


def compile_reference(ws: Path, out: Path, modes: str, deadline: float, lanes: str | None) -> dict[str, Any]:
    """Rows written into `out` as each is timed: a call stopped at its limit keeps those it timed."""
    import compile_reference as cr

    return cr.run(ws, modes.split(","), out, deadline=deadline, lanes=lanes.split(",") if lanes else None)


def aa_noise(ws: Path) -> dict[str, Any]:
    """The baseline's A/A noise per lane (its CI half-width and the paired one where stored)."""
    from pytest_ditar.store.records import read_lanes

    path = ws / ".autoresearch/ladder/baseline/lanes.json"
    if not path.is_file():
        return {}
    out = {}
    for name, rec in read_lanes(json.loads(path.read_text())).items():
        n = rec.noise or {}
        out[name] = {"ci_half_width": n.get("ci_half_width"), "paired": (n.get("paired") or {}).get("ci_half_width"),
                     "median_ms": statistics.median(rec.samples) * 1e3 if rec.samples else None}
    return out


def judged_after_compiled_keep(rows: list[dict[str, Any]]) -> tuple[int, int]:
    """(judged, runs) of the experiments after the first KEEP of a compiled rung: judged is a verdict the
    gate reached on the idea (its summary's `judged`), not one it set aside for the host's or the
    champion's sake, nor a CRASH or a refusal."""
    first = next((i for i, r in enumerate(rows) if r["rung"] in COMPILED and r["verdict"] == "KEEP"), None)
    if first is None:
        return 0, 0
    after = rows[first + 1:]
    return sum(1 for r in after if r["verdict"] in ("KEEP", "DISCARD") and r.get("judged") is not False
               and r.get("judged") != 0), len(after)


def _f(x: Any, fmt: str) -> str:
    return fmt.format(x) if isinstance(x, (int, float)) else "-"


def table(ev: dict[str, Any]) -> str:
    """The summary the call prints last: every figure the issue asks for, with its card."""
    g = ev["gpu"]
    lines = [f"GPU evidence (issue 52): {g.get('card') or 'no GPU'}; torch {g.get('torch')}, diffusers "
             f"{g.get('diffusers')}; suite {ev['suite']}; budget {ev['budget_s']:.0f} s, used {ev['wall_s']:.0f} s"]
    for lane, n in ev["aa_noise"].items():
        half, paired = 100 * (n["ci_half_width"] or 0), 100 * n["paired"] if n["paired"] else None
        lines.append(f"host A/A noise at baseline, {lane}: CI half-width {half:.2f}%"
                     f" (paired {_f(paired, '{:.2f}')}%), baseline median "
                     f"{_f(n['median_ms'], '{:.1f}')} ms")
    lines.append("\nsteps: " + ", ".join(f"{s['step']} {s['wall_s']:.0f} s" for s in ev["steps"]))
    lines.append(f"\n{'rung':<17}{'class':<10}{'verdict':<9}{'b1 x champ':>11}{'ci95':>16}{'b1 ms':>9}{'b8 ms':>9}"
                 f"{'b1 cum':>8}{'b8 cum':>8}{'b8 TFLOP/s':>11}{'wall s':>7}  reason")
    for r in ev["ladder"].get("rows", []):
        b1, b8 = r["lanes"].get("latency_b1", {}), r["lanes"].get("throughput_b8", {})
        ci = f"[{b1['ci'][0]:.3f},{b1['ci'][1]:.3f}]" if b1.get("ci") and b1["ci"][0] else "-"
        lines.append(f"{r['rung']:<17}{r['class']:<10}{r['verdict']:<9}{_f(b1.get('speedup'), '{:.3f}x'):>11}{ci:>16}"
                     f"{_f((b1.get('median_s') or 0) * 1e3 or None, '{:.1f}'):>9}"
                     f"{_f((b8.get('median_s') or 0) * 1e3 or None, '{:.1f}'):>9}"
                     f"{_f(b1.get('cumulative_vs_baseline'), '{:.2f}x'):>8}"
                     f"{_f(b8.get('cumulative_vs_baseline'), '{:.2f}x'):>8}"
                     f"{_f(b8.get('achieved_tflops'), '{:.0f}'):>11}"
                     f"{r['wall_s']:>7.0f}  {(r.get('reason') or '')[:70]}")
    if ev["ladder"].get("skipped"):
        lines.append(f"rungs skipped for the budget: {', '.join(ev['ladder']['skipped'])}")
    j, n = ev["judged_after_compiled_keep"]
    lines.append(f"runs after the first compiled KEEP that were judged: {j} of {n}")
    cr = ev.get("compile") or {}
    if cr.get("rows"):
        ceil = cr.get("measured_ceiling_tflops")
        lines.append(f"\nfinal champion beside torch.compile of the stock pipeline (paired rounds, one call); "
                     f"dense fp16 ceiling measured here: {_f(ceil, '{:.0f}')} TFLOP/s")
        lines.append(f"{'mode':<17}{'lane':<15}{'rounds':>7}{'champion ms':>12}{'compiled ms':>12}{'champ x':>9}"
                     f"{'ci95':>17}{'compile s':>10}{'TFLOP/s':>9}{'of ceiling':>11}")
        for r in cr["rows"]:
            ci = f"[{r['ci95'][0]:.3f},{r['ci95'][1]:.3f}]"
            share = 100 * r["measured_ceiling_share"] if r.get("measured_ceiling_share") else None
            lines.append(f"{r['mode']:<17}{r['lane']:<15}{r['rounds']:>7}{r['champion_median_s'] * 1e3:>12.2f}"
                         f"{r['compiled_median_s'] * 1e3:>12.2f}{r['speedup']:>8.3f}x{ci:>17}"
                         f"{r['compiled_compile_s']:>10.1f}{_f(r['champion_tflops'], '{:.0f}'):>9}"
                         f"{_f(share, '{:.0f}%'):>11}")
        if cr.get("skipped"):
            lines.append(f"modes skipped for the budget: {', '.join(cr['skipped'])}")
    p = ev.get("profile")
    if p:
        lines.append("\n" + "\n".join(profile_lines(p)))
    lines.append("\nthe issue's figures:")
    lines += [f"  {c['what']}: {c['got']} ({'met' if c['met'] else 'NOT met'})" for c in ev["criteria"]]
    return "\n".join(lines)


def profile_lines(p: dict[str, Any]) -> list[str]:
    dev = p.get("device_attribution") or {}
    share = 100 * dev["named_share"] if dev.get("named_share") is not None else None
    out = [f"profile of the champion, {p.get('lane')}: call wall {_f(p.get('call_wall_ms'), '{:.2f}')} ms under the "
           f"profiler ({_f(p.get('unprofiled_wall_ms'), '{:.2f}')} ms unprofiled), device busy "
           f"{_f(dev.get('busy_ms'), '{:.2f}')} ms, in named phases {_f(share, '{:.1f}')}% "
           f"({dev.get('kernels', '-')} kernels, {dev.get('in_graphs', '-')} in CUDA graphs, "
           f"{dev.get('triton', '-')} Triton; unattributed {_f(dev.get('unattributed_ms'), '{:.2f}')} ms)"]
    phases = sorted((dev.get("phases") or {}).items(), key=lambda kv: -kv[1])
    out += [f"  {k:<24} {ms:>9.2f} ms" + ("  (placed by position)" if (dev.get("inferred") or {}).get(k) else "")
            for k, ms in phases[:10] if ms > 0]
    out += [f"  largest unnamed: {r['name'][:70]} x{r['kernels']} {r['ms']:.2f} ms"
            for r in dev.get("top_unnamed", [])[:3]]
    a = p.get("against")
    if a:
        ph = a["phases"]
        out.append(f"against baseline: {ph['ref_wall_ms']:.2f} -> {ph['wall_ms']:.2f} ms ({ph['delta_ms']:+.2f} ms); "
                   f"{a['headline']}")
        dp = a.get("device_phases") or {}
        for r in dp.get("rows", [])[:6]:
            out.append(f"  device {r['key']:<22} {r['ref_ms']:>9.2f} -> {r['ms']:>9.2f} ms  {r['delta_ms']:>+9.2f} ms")
        for c in dp.get("checks", []):
            out.append(f"  device deltas sum {c['summed_ms']:+.2f} ms vs {c['name']} {c['delta_ms']:+.2f} ms "
                       f"(gap {_f(100 * c['gap'] if c.get('gap') is not None else None, '{:.2f}')}%)")
    return out


def criteria(ev: dict[str, Any]) -> list[dict[str, Any]]:
    """Done-when of issue 52, each from the figures above."""
    out = []
    j, n = ev["judged_after_compiled_keep"]
    out.append({"what": "runs after a compiled KEEP judged (2 of 2 asked)", "got": f"{j} of {n}",
                "met": n >= 2 and j >= 2})
    rows = {(r["mode"], r["lane"]): r for r in (ev.get("compile") or {}).get("rows", [])}
    for lane, need in (("latency_b1", 1.5), ("throughput_b8", 1.25)):
        r = rows.get(("reduce-overhead", lane))
        out.append({"what": f"champion vs reduce-overhead, {lane} (>= {need}x)",
                    "got": f"{r['speedup']:.3f}x [{r['ci95'][0]:.3f},{r['ci95'][1]:.3f}]" if r else "not run",
                    "met": bool(r and r["speedup"] >= need)})
    r = rows.get(("reduce-overhead", "throughput_b8"))
    share = r.get("measured_ceiling_share") if r else None
    out.append({"what": "b8 share of the measured dense fp16 ceiling (>= 55%)",
                "got": f"{100 * share:.1f}%" if share else "not measured", "met": bool(share and share >= 0.55)})
    p = ev.get("profile") or {}
    named = (p.get("device_attribution") or {}).get("named_share")
    out.append({"what": "profile: device time in named phases (>= 90%)",
                "got": f"{100 * named:.1f}%" if named is not None else "not measured",
                "met": bool(named and named >= 0.9)})
    checks = {c["name"]: c for c in ((p.get("against") or {}).get("device_phases") or {}).get("checks", [])}
    c = checks.get("unprofiled walls") or checks.get("profiled call walls")
    if c:  # the walls measured without the profiler where both sides have one: the honest difference
        gap = abs(c["summed_ms"] - c["delta_ms"]) / abs(c["delta_ms"]) if c["delta_ms"] else 0.0
        out.append({"what": f"--against baseline: device phase deltas vs the {c['name']}' difference (within 5%)",
                    "got": f"{c['summed_ms']:+.2f} vs {c['delta_ms']:+.2f} ms ({100 * gap:.2f}%)", "met": gap <= 0.05})
    return out


def gpu_info() -> dict[str, Any]:
    info: dict[str, Any] = {}
    try:
        import diffusers
        import torch

        info.update(torch=torch.__version__, diffusers=diffusers.__version__)
        if torch.cuda.is_available():
            info["card"] = torch.cuda.get_device_name(0)
    except Exception as exc:  # noqa: BLE001 - a line of the table
        info["error"] = repr(exc)
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default="dit-xl-2-256")
    ap.add_argument("--rungs", default=GPU_RUNGS)
    ap.add_argument("--modes", default="reduce-overhead,max-autotune")
    ap.add_argument("--budget-s", type=float, default=530.0, help="the whole call's wall; steps that would end past "
                                                                   "it are skipped (default: %(default)s)")
    ap.add_argument("--rung-s", type=float, default=None, help="each rung's expected wall (ladder.py --rung-s)")
    ap.add_argument("--reserve-s", default=None, metavar="PROFILE,COMPILE",
                    help="seconds kept for the profile and the compile reference after the ladder (default: "
                         + ",".join(f"{v:.0f}" for v in RESERVE_S.values()) + ")")
    ap.add_argument("--compile-lanes", default=None, help="the lanes timed beside torch.compile (default: all)")
    ap.add_argument("--workdir", default="/tmp/ditar-evidence")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    raw = Path(args.workdir + "-raw")
    shutil.rmtree(raw, ignore_errors=True)
    raw.mkdir(parents=True)
    ws = Path(args.workdir)
    steps = Steps()
    ev: dict[str, Any] = {"suite": args.suite, "budget_s": args.budget_s, "gpu": gpu_info(), "ladder": {},
                          "aa_noise": {}, "judged_after_compiled_keep": (0, 0), "profile": None, "compile": {}}
    reserve = [float(x) for x in args.reserve_s.split(",")] if args.reserve_s else list(RESERVE_S.values())
    ladder_budget = args.budget_s - sum(reserve)
    steps.run("ladder", ladder, args.suite, ws, raw, args.rungs, ladder_budget, args.rung_s)
    lj = raw / "ladder/ladder.json"
    ev["ladder"] = json.loads(lj.read_text()) if lj.is_file() else {}
    ev["judged_after_compiled_keep"] = judged_after_compiled_keep(ev["ladder"].get("rows", []))
    ev["aa_noise"] = aa_noise(ws)
    save(ev, steps, ws, raw, out)
    if not (ws / ".autoresearch/ladder/baseline/lanes.json").is_file():  # the ladder failed: its log says why
        print("\n" + save(ev, steps, ws, raw, out), flush=True)
        return 1
    ev["profile"] = steps.run("profile", profile, ws, raw, PROFILE_LANE)
    save(ev, steps, ws, raw, out)
    deadline = time.monotonic() + steps.left(args.budget_s)
    ev["compile"] = steps.run("compile reference", compile_reference, ws, out, args.modes, deadline,
                              args.compile_lanes)
    print("\n" + save(ev, steps, ws, raw, out), flush=True)
    return 0


def save(ev: dict[str, Any], steps: Steps, ws: Path, raw: Path, out: Path) -> str:
    """The table and the files as they stand (after every step, so a call stopped at its limit still
    brings back what it measured); returns the table."""
    ev["steps"], ev["wall_s"] = steps.rows, time.monotonic() - steps.t0
    ev["criteria"] = criteria(ev)
    text = table(ev)
    (out / "summary.txt").write_text(text + "\n")
    (out / "evidence.json").write_text(json.dumps(ev, indent=1, default=str))
    for name, src in (("ladder.json", raw / "ladder/ladder.json"),
                      ("profile.json", raw / f"profile-{PROFILE_LANE}/summary.json")):
        if src.is_file():
            shutil.copy(src, out / name)
    for f in (ws / ".autoresearch/ladder/baseline").glob("*.json") if ws.is_dir() else []:
        shutil.copy(f, raw / f"baseline_{f.name}")
    with tarfile.open(out / "raw.tgz", "w:gz") as tar:
        tar.add(raw, arcname="raw")
    return text


if __name__ == "__main__":
    sys.exit(main())
