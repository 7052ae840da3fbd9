"""Where a candidate's build goes (issue 25): the worker's steps timed apart, one build alone and
several at once (a gated run builds the candidate, the champion and its twin together).

A parent imports torch and diffusers once, as the zygote does, then forks K children at the same
moment; each child opens the device, loads the suite's pipeline with `from_pretrained`, moves it to
the device and makes two calls, each step timed on its own clock (CPU seconds beside the wall, so
a step that waits shows as wall without CPU). The first child's `from_pretrained` is profiled.

    python benchmarks/build_cost.py --suite tiny --out /tmp/bc                 # CPU
    python benchmarks/build_cost.py --suite dit-xl-2-256 --out $OUT/build_cost  # GPU
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPS = ("open_device", "from_pretrained", "to_device", "first_call", "second_call")


def child(model_dir: Path, device: str, dtype_name: str, profile: bool, steps: int) -> dict:
    import torch
    from diffusers import DiTPipeline

    name = torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu"
    out: dict = {"pid": os.getpid(), "device_name": name}
    marks = []

    def mark(name: str, t0: float, c0: float) -> None:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        marks.append(name)
        out[name] = {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0, "majflt": ru.ru_majflt}

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    t0, c0 = time.perf_counter(), time.process_time()
    if device.startswith("cuda"):
        x = torch.ones(64, 64, device=device, dtype=torch.float16)
        torch.mm(x, x)
        sync()
    mark("open_device", t0, c0)
    t0, c0 = time.perf_counter(), time.process_time()
    prof = cProfile.Profile() if profile else None
    if prof:
        prof.enable()
    pipe = DiTPipeline.from_pretrained(model_dir, dtype=getattr(torch, dtype_name), local_files_only=True)
    if prof:
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(18)
        out["profile"] = buf.getvalue()
    pipe.set_progress_bar_config(disable=True)
    mark("from_pretrained", t0, c0)
    t0, c0 = time.perf_counter(), time.process_time()
    pipe = pipe.to(device)
    sync()
    mark("to_device", t0, c0)
    for name in ("first_call", "second_call"):
        t0, c0 = time.perf_counter(), time.process_time()
        with torch.no_grad():
            pipe(class_labels=[1], num_inference_steps=steps, output_type="np",
                 generator=torch.Generator("cpu").manual_seed(0))
        sync()
        mark(name, t0, c0)
    return out


def run_batch(k: int, model_dir: Path, device: str, dtype: str, steps: int) -> list[dict]:
    """Fork k children at once from this (imported, device-free) process; their reports."""
    kids = []
    for i in range(k):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report on the pipe, then leave without the parent's cleanup
            os.close(r)
            try:
                rep = child(model_dir, device, dtype, profile=(i == 0), steps=steps)
            except BaseException as exc:  # noqa: BLE001 - said in the table, never silent
                rep = {"error": repr(exc)}
            with os.fdopen(w, "w") as f:
                json.dump(rep, f)
            os._exit(0)
        os.close(w)
        kids.append((pid, r))
    reports = []
    for pid, r in kids:
        with os.fdopen(r) as f:
            reports.append(json.loads(f.read() or '{"error": "no report"}'))
        os.waitpid(pid, 0)
    return reports


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default="tiny")
    ap.add_argument("--concurrent", default="1,3", help="comma-separated numbers of builds at once")
    ap.add_argument("--steps", type=int, default=2, help="denoising steps of the two timed calls")
    ap.add_argument("--out", default="build_cost")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    # the parent must not open CUDA before it forks (nor must the zygote): ask NVML whether there is one
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    t0 = time.perf_counter()
    import diffusers  # noqa: F401 - the zygote's imports, paid once before the forks
    import torch

    diffusers.utils.logging.disable_progress_bar()

    from pytest_ditar.config.suite import load_suite
    from pytest_ditar.runtime.models import resolve_model_dir

    imports_s = time.perf_counter() - t0
    suite = load_suite(ROOT / "suites" / args.suite)
    model_dir = resolve_model_dir(suite)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = suite.pipeline.dtype_for(device)
    sizes = {p.name: p.stat().st_size for p in model_dir.rglob("*.safetensors")}
    result = {"suite": args.suite, "device": device, "torch": torch.__version__, "dtype": dtype, "imports_s": imports_s,
              "weights_bytes": sum(sizes.values()), "batches": {}}
    print(f"build cost, {args.suite} on {device} ({dtype}; weights on disk "
          f"{result['weights_bytes'] / 2**30:.2f} GiB); parent imports {imports_s:.1f}s")
    print(f"{'at once':>7} {'child':>5} " + " ".join(f"{s:>22}" for s in STEPS) + f" {'total':>8}")
    for k in (int(x) for x in args.concurrent.split(",")):
        reports = run_batch(k, model_dir, device, dtype, args.steps)
        result["batches"][str(k)] = reports
        result["device"] = next((r["device_name"] for r in reports if "device_name" in r), result["device"])
        for i, rep in enumerate(reports):
            if "error" in rep:
                print(f"{k:>7} {i:>5} error: {rep['error']}")
                continue
            cells = [f"{rep[s]['wall']:7.2f}s (cpu {rep[s]['cpu']:6.2f})" for s in STEPS]
            print(f"{k:>7} {i:>5} " + " ".join(f"{c:>22}" for c in cells)
                  + f" {sum(rep[s]['wall'] for s in STEPS[:3]):7.2f}s")
    first = result["batches"][args.concurrent.split(",")[0]][0]
    if "profile" in first:
        print("from_pretrained, first child, cumulative:\n" + first["profile"])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "build_cost.json").write_text(json.dumps(result, indent=1))
    print(f"device: {result['device']}; wrote {out / 'build_cost.json'} "
          "(total = open + from_pretrained + to_device: what a build waits on)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
