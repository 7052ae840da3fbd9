"""What issue 49's walls cost and whether a real compile passes them: a worker's start-up with the
host's folders shown through overlays (runtime.hostview.shield_plan) and without, and, with
--compile, a worker that torch.compiles the stock transformer in build() (its empty $HOME, no
socket(AF_UNIX), the overlays) and which of the files its compiler wrote the judge would add to
the compile cache (runtime.compiled.compiler_output: each refused path is listed).

    python benchmarks/sandbox_shield.py --suite tiny --workers 6 --out /tmp/shield.json     # CPU
    python benchmarks/sandbox_shield.py --suite dit-xl-2-256 --compile --out shield.json    # GPU
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

COMPILED = '''

_stock_build = build


def build(spec):
    import torch

    p = _stock_build(spec)
    p.pipe.transformer = torch.compile(p.pipe.transformer)
    from pytest_ditar.interface import Request

    p.generate(Request((1,), (1,), 2))  # the compile, in build
    return p
'''


def startup(spec, cand: Path, logs: Path, n: int, shield: bool) -> list[float]:
    from pytest_ditar.runtime import sandbox_check
    from pytest_ditar.runtime.clock import judge_clock
    from pytest_ditar.runtime.worker import CandidateWorker

    sandbox_check._CHECKED[0] = dataclasses.replace(sandbox_check._CHECKED[0], shield=shield)
    out = []
    for i in range(n):
        w = CandidateWorker(f"s{i}", cand, spec, log_path=logs / f"{shield}-{i}.log", sandboxed=True)
        t0 = judge_clock()
        w.built(600)
        out.append(judge_clock() - t0)
        w.close()
    return out


def compile_files(spec, cand: Path, logs: Path) -> dict:
    """Build a torch.compile'd transformer in a shielded sandbox; classify what its compiler wrote."""
    from pytest_ditar.runtime import compiled
    from pytest_ditar.runtime.clock import judge_clock
    from pytest_ditar.runtime.worker import CandidateWorker

    (cand / "pipeline.py").write_text((ROOT / "mutable" / "pipeline.py").read_text() + COMPILED)
    cache = Path(tempfile.mkdtemp(prefix="ditar-shield-cache-"))
    w = CandidateWorker("compiled", cand, spec, log_path=logs / "compiled.log", sandboxed=True,
                        compile_cache=cache, keep_compile_writes=True, env={
                            **os.environ, "TORCHINDUCTOR_CACHE_DIR": "/run/ditar/cache",
                            "TRITON_CACHE_DIR": "/run/ditar/cache/triton", "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
                            "TORCHINDUCTOR_AUTOGRAD_CACHE": "1"})
    t0 = judge_clock()
    try:
        w.built(1800)
        built = judge_clock() - t0
    except Exception as exc:  # noqa: BLE001 - what went wrong is the finding
        return {"error": str(exc), "log": (logs / "compiled.log").read_text()[-3000:]}
    finally:
        w.close()
    upper = Path(str(w.compile_writes)) / "upper"
    taken, refused = [], []
    for dirpath, _dirs, files in os.walk(upper):
        for name in files:
            path = Path(dirpath) / name
            rel = str(path.relative_to(upper))
            (taken if compiled.compiler_output(rel, path) else refused).append(rel)
    promoted = compiled.promote(upper, cache)
    w.drop_compile_writes()
    return {"build_s": built, "files": len(taken) + len(refused), "compiler_output": len(taken),
            "refused": sorted(refused)[:50], "promoted": dataclasses.asdict(promoted),
            "taken_examples": sorted(taken)[:10]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default="tiny")
    ap.add_argument("--device", default=None)
    ap.add_argument("--workers", type=int, default=6, help="workers started per way, alternating")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    from pytest_ditar.config.suite import load_suite
    from pytest_ditar.runtime import hostview, sandbox_check
    from pytest_ditar.runtime.harness import make_spec, pick_device
    from pytest_ditar.runtime.models import resolve_model_dir

    if sandbox_check.check():
        print(sandbox_check.check())
        return 1
    a = sandbox_check.availability()
    suite = load_suite(ROOT / "suites" / args.suite)
    device = pick_device(args.device)
    spec = make_spec(suite, resolve_model_dir(suite), device)
    tmp = Path(tempfile.mkdtemp(prefix="ditar-shield-bench-"))
    cand = tmp / "cand"
    cand.mkdir()
    (cand / "pipeline.py").write_text((ROOT / "mutable" / "pipeline.py").read_text())
    result: dict = {"suite": args.suite, "device": device, "bwrap": a.version, "shield_available": a.shield,
                    "shielded_folders": list(hostview.shield_plan())}
    if a.shield:
        startup(spec, cand, tmp, 1, False)  # the zygote's imports, paid once
        times: dict = {"off": [], "on": []}
        for i in range(args.workers):  # alternating, so a load that comes and goes hits both
            for shield in ((False, True) if i % 2 == 0 else (True, False)):
                times["on" if shield else "off"] += startup(spec, cand, tmp, 1, shield)
        result["startup_s"] = {k: {"median": statistics.median(v), "all": v} for k, v in times.items()}
        print("start-up to built, median s:", {k: round(v["median"], 3) for k, v in result["startup_s"].items()})
    if args.compile:
        result["compile"] = compile_files(spec, cand, tmp)
        print("compile:", json.dumps(result["compile"])[:2000])
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
