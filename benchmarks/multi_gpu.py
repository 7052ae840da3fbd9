"""Issue 8 on a 2-GPU host: sharded quality phase, the CFG-split lane, the exclusivity check.

    python benchmarks/multi_gpu.py --suite dit-xl-2-256 --out multi_gpu     # 2x H200 (NCCL)
    python benchmarks/multi_gpu.py --suite tiny --out /tmp/mg               # CPU dry run (gloo)

1. Quality phase wall time: `pytest -m quality` (1 GPU) vs `pytest -m quality -n 2` (one xdist
   worker per GPU), both as a user runs them, process start included.
2. CFG-split lane: the lean 1-GPU pipeline vs `demo_candidates/cfg_split.py` over 2 ranks, both
   launched by pytest_ditar.multigpu (same barrier/sync timing), alternating blocks; ratio of
   medians with a bootstrap 95% CI (stats.compare). The outputs of the 2-rank group are checked
   against the stock pipeline with the exact contract.
3. Exclusivity: a second process allocates on GPU 0; exclusivity.check must name its PID. On CPU
   there is no NVML: the real check says "not checked" and a simulated process list shows the
   message.
Prints a table and writes <out>/multi_gpu.json.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def sh(cmd, cwd, env=None):
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    return res, time.perf_counter() - t0


def workspace(suite: str, ws: Path, scale: int) -> Path:
    """A scratch research project on `suite` whose corpus is repeated `scale` times with fresh seeds.

    Only the quality phase is measured here, so the lanes are cut to 3 rounds to keep the
    baseline (which calibrates every lane) short; the corpus and the pipeline are untouched."""
    import yaml

    from pytest_ditar.demo import make_workspace

    make_workspace(ROOT, ws, suite)
    path = ws / "suites" / suite / "suite.yaml"
    spec = yaml.safe_load(path.read_text())
    base = spec["corpus"]
    spec["corpus"] = [dict(it, id=f"{it['id']}-r{r}", seed=it["seed"] + 100_000 * r) if r else dict(it)
                      for r in range(scale) for it in base]
    spec["lanes"] = [dict(l, repeats=3, warmup=1) for l in spec["lanes"]]
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@l", "commit", "-qam", f"corpus x{scale}, short lanes"],
                   cwd=ws, check=True)
    return ws


def quality_phase(ws: Path, device: str) -> dict:
    ditar = [sys.executable, "-m", "pytest_ditar.cli", "--config", "config/autoresearch.json"]
    res, _ = sh([*ditar, "init", "--tag", "mg"], ws)
    assert res.returncode == 0, res.stderr
    res, base_s = sh([*ditar, "baseline", "--device", device], ws)
    assert res.returncode == 0, res.stdout + res.stderr
    from pytest_ditar.cli import _plugin_flag  # "-p pytest_ditar.plugin" where no entry point is installed

    py = [sys.executable, "-m", "pytest", *_plugin_flag(), "-p", "no:cacheprovider", "-q", "-m", "quality"]
    one, t1 = sh([*py, f"--ditar-device={device}"], ws)
    two, t2 = sh([*py, "-n", "2"], ws)  # one batch per scope; workers pin themselves to cuda:0 / cuda:1
    ok = lambda r: r.returncode == 0 and "quality" in r.stdout  # noqa: E731
    items = len(json.loads((ws / ".autoresearch/mg/baseline/manifest.json").read_text())["items"])
    return {"items": items, "baseline_s": base_s, "one_gpu_s": t1, "two_gpu_s": t2, "speedup": t1 / t2,
            "one_ok": ok(one), "two_ok": ok(two), "two_tail": two.stdout.strip().splitlines()[-2:]}


def cfg_split_lane(suite_name: str, device: str, blocks: int, repeats: int) -> dict:
    from pytest_ditar import stats
    from pytest_ditar.harness import batches, build_candidate, make_spec, run_batch
    from pytest_ditar.interface import Request
    from pytest_ditar.models import resolve_model_dir
    from pytest_ditar.multigpu import group_outputs, group_times
    from pytest_ditar.perf import lane_request
    from pytest_ditar.quality import check_contract, compute_metrics
    from pytest_ditar.config import DEFAULT_THRESHOLDS, Thresholds
    from pytest_ditar.suite import load_suite

    suite = load_suite(ROOT / "suites" / suite_name)
    spec = make_spec(suite, resolve_model_dir(suite), device)
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"ditar-mg-{os.getpid()}"
    lean, split = tmp / "lean", tmp / "split"
    for d, src in ((lean, "faster_exact.py"), (split, "cfg_split.py")):
        d.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "pytest_ditar/demo_candidates" / src, d / "pipeline.py")
    lane = next(l for l in suite.lanes if l.name == "latency_b1")
    req = lane_request(suite, lane)
    one, two = [], []
    for _ in range(blocks):  # alternating blocks: drift lands on both sides
        one += group_times(lean, spec, req, world=1, warmup=1, repeats=repeats)["samples"]
        two += group_times(split, spec, req, world=2, warmup=1, repeats=repeats)["samples"]
    c = stats.compare(one, two, min_effect=0.02, alpha=0.05, max_cv=0.5, n_boot=2000)
    group = batches(suite.corpus[:4], suite, 4)[0]
    ref = run_batch(build_candidate(ROOT / "mutable", spec), group, suite, None)
    (lat, img), = group_outputs(split, spec, [Request(tuple(i.label for i in group), tuple(i.seed for i in group),
                                                       suite.steps_for(group[0]))], world=2)
    t = Thresholds(**DEFAULT_THRESHOLDS["exact"])
    exact = [check_contract(o.item_id, "exact", compute_metrics(lat[n], img[n], o.latents, o.image), t).passed
             for n, o in enumerate(ref)]
    shutil.rmtree(tmp, ignore_errors=True)
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return {"lane": lane.name, "one_gpu_median_ms": med(one) * 1e3, "two_gpu_median_ms": med(two) * 1e3,
            "speedup": c.speedup, "ci95": [c.ci_low, c.ci_high], "verdict": c.verdict, "n": [len(one), len(two)],
            "exact_contract": f"{sum(exact)}/{len(exact)}"}


def exclusivity_probe(device: str) -> dict:
    from pytest_ditar import exclusivity

    if device.startswith("cuda"):
        code = "import torch,time; x=torch.ones(2**28, device='cuda:0'); time.sleep(60)"
    else:
        code = "import time; time.sleep(60)"
    intruder = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(15 if device.startswith("cuda") else 0.5)  # let it create its CUDA context
        real = exclusivity.check("cuda:0" if device.startswith("cuda") else "cpu", allowed={os.getpid()})
        out = {"intruder_pid": intruder.pid, "real_check": real.message(), "caught": not real.ok}
        if not real.checked:  # CPU dry run: the same logic on a simulated NVML list
            sim = exclusivity.check("cuda:0", lambda g: [(intruder.pid, 2**30)], allowed={os.getpid()})
            out.update(simulated_check=sim.message(), caught_simulated=not sim.ok)
        return out
    finally:
        intruder.kill()
        intruder.wait()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default="dit-xl-2-256")
    ap.add_argument("--out", default="multi_gpu")
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--scales", default="1,8", help="corpus sizes to shard, as multiples of the suite's corpus")
    args = ap.parse_args()
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"suite": args.suite, "device": device, "gpus": torch.cuda.device_count() if device == "cuda" else 0,
              "backend": "nccl" if device == "cuda" else "gloo", "quality_phase": []}
    save = lambda: (out / "multi_gpu.json").write_text(json.dumps(result, indent=1, default=str))  # noqa: E731
    for scale in (int(x) for x in args.scales.split(",")):
        ws = Path(args.workdir or out / "workspace").resolve() / f"x{scale}"
        shutil.rmtree(ws, ignore_errors=True)
        result["quality_phase"].append(quality_phase(workspace(args.suite, ws, scale), device))
        save()
        print(f"[multi_gpu] quality phase x{scale}: {result['quality_phase'][-1]}", flush=True)
    result["exclusivity"] = exclusivity_probe(device)
    save()
    result["cfg_split"] = cfg_split_lane(args.suite, device, args.blocks, args.repeats)
    save()
    c, e = result["cfg_split"], result["exclusivity"]
    print(f"| what | figure |  ({args.suite}, {device}, {result['backend']})")
    print("|---|---|")
    for q in result["quality_phase"]:
        print(f"| quality phase, {q['items']} items, 1 device | {q['one_gpu_s']:.1f} s (ok={q['one_ok']}) |")
        print(f"| quality phase, {q['items']} items, -n 2 | {q['two_gpu_s']:.1f} s (ok={q['two_ok']}), {q['speedup']:.2f}x |")
    print(f"| {c['lane']} 1-GPU lean | median {c['one_gpu_median_ms']:.2f} ms |")
    print(f"| {c['lane']} 2-GPU CFG split | median {c['two_gpu_median_ms']:.2f} ms, {c['speedup']:.3f}x "
          f"ci95 [{c['ci95'][0]:.3f}, {c['ci95'][1]:.3f}] {c['verdict']}; exact contract {c['exact_contract']} |")
    print(f"| exclusivity | {e['real_check']}" + (f"; simulated: {e['simulated_check']}" if "simulated_check" in e else "") + " |")
    print(f"json {out / 'multi_gpu.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
