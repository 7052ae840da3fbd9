"""Self-check of `dit-ar profile`'s device time by launch on a graph-replayed, compiled champion
(issue 52), before the real `dit-ar profile` runs: the faster_exact template with CUDA_GRAPHS,
REGIONAL_COMPILE and VAE_COMPILE on, built in this process and profiled by the worker's own
function (runtime.profiler.profile_call), attributed by the judge's (loop.perf.profile.by_launch).
Prints the share of device time in named phases, the kernels in graphs and Triton kernels, the
largest kernels no phase names; with --against-stock also the stock pipeline (LEAN off, every mark
fires) on the same request, and the per-phase device deltas with their sum checks.

    python benchmarks/profile_graphs.py --suite dit-xl-2-256 --out $OUT/profile_graphs --against-stock   # GPU
    python benchmarks/profile_graphs.py --suite tiny        # CPU: says it needs CUDA, exits 0

Done when (issue 52): named share >= 90%; the sum check's gap against the profiled walls ~0%
(by construction) and against the unprofiled walls within 5%.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _profile(name: str, flags: dict[str, Any], suite: Any, lane: Any, spec: Any, request: Any, warmup: int,
             out: Path) -> dict[str, Any]:
    """Build the template with `flags` and profile one call of `request`: the summary the judge
    would store (loop.perf.profile.summarize), the device time by launch included."""
    from pytest_ditar.core.attribution import Span, attribute
    from pytest_ditar.core.kernels import kernel_table
    from pytest_ditar.loop.perf.profile import by_launch, summarize
    from pytest_ditar.runtime.calls import lane_request
    from pytest_ditar.runtime.harness import build_candidate
    from pytest_ditar.runtime.profiler import profile_call

    import ladder

    cand = Path(tempfile.mkdtemp(prefix=f"ditar-pg-{name}-")) / "mutable"
    cand.mkdir()
    (cand / "pipeline.py").write_text(ladder.render(dict(ladder.DEFAULTS, **flags)))
    candidate = build_candidate(cand, spec)
    side = out / name
    side.mkdir(parents=True, exist_ok=True)
    warm = lane_request(suite, lane)
    profile_call(candidate, request, warm, warmup, request, spec.device, side)
    data = json.loads((side / "profile.json").read_text())
    att = attribute((Span.from_row(r) for r in data["spans"]), marks=data.get("marks"))
    table = kernel_table(((str(k[0]), int(k[1]), float(k[2])) for k in data.get("kernels", [])), att.wall_ms)
    s = summarize(data, att, table, dev=by_launch(data))
    s.update(candidate={"source": "commit", "commit": name, "dirty": False, "ref": name}, lane=lane.name,
             batch=lane.batch, steps=request.steps, warmup=warmup, flags=flags)
    return s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="dit-xl-2-256", help="tiny or dit-xl-2-256")
    ap.add_argument("--lane", default="latency_b1")
    ap.add_argument("--out", default="profile_graphs")
    ap.add_argument("--warmup", type=int, default=2, help="calls before the profiled one (compile, capture)")
    ap.add_argument("--compile-mode", default="default", help="REGIONAL_COMPILE's and VAE_COMPILE's mode")
    ap.add_argument("--against-stock", action="store_true", help="also the stock pipeline, and the deltas")
    ap.add_argument("--cpu-rehearsal", action="store_true",
                    help="run the same path on the CPU, compile off (no kernels: checks the wiring only)")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available() and not args.cpu_rehearsal:
        print("profile_graphs: needs CUDA (a graph-replayed, compiled champion); nothing run")
        return 0
    device = "cpu" if args.cpu_rehearsal else "cuda"
    card = "cpu" if args.cpu_rehearsal else torch.cuda.get_device_name()
    from pytest_ditar.cli.profile import device_delta_lines, named_lines
    from pytest_ditar.config.suite import load_suite
    from pytest_ditar.core.launches import device_deltas
    from pytest_ditar.runtime.calls import fresh_request, new_stream
    from pytest_ditar.runtime.harness import make_spec
    from pytest_ditar.runtime.models import resolve_model_dir

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    suite = load_suite(ROOT / "suites" / args.suite)
    lane = suite.lane(args.lane)
    spec = make_spec(suite, resolve_model_dir(suite), device)
    request = fresh_request(new_stream(suite), suite, lane, "profile/call")
    mode = None if args.cpu_rehearsal else args.compile_mode
    champ = {"LEAN": True, "CUDA_GRAPHS": True, "REGIONAL_COMPILE": mode, "VAE_COMPILE": mode}
    sides = {"champion": _profile("champion", champ, suite, lane, spec, request, args.warmup, out)}
    if args.against_stock:
        sides["stock"] = _profile("stock", {"LEAN": False}, suite, lane, spec, request, args.warmup, out)
    doc: dict[str, Any] = {"suite": args.suite, "lane": lane.name, "device": card,
                           "torch": torch.__version__, "sides": {}}
    for name, s in sides.items():
        dev = s.get("device_attribution") or {}
        print(f"== {name} ({card}): call wall {s['call_wall_ms']:.2f} ms under the "
              f"profiler, {s.get('unprofiled_wall_ms') or float('nan'):.2f} ms unprofiled")
        for line in named_lines(s.get("device_attribution"), not args.cpu_rehearsal, s.get("launch_notes") or [],
                                s.get("launch_error")):
            print(line)
        for key, ms in sorted((dev.get("phases") or {}).items(), key=lambda kv: -kv[1])[:12]:
            star = "*" if (dev.get("inferred") or {}).get(key) else ""
            print(f"  {key:<24} {ms:>9.3f} ms{star}")
        if dev.get("top_inferred"):
            print("largest kernels placed by position (inferred):")
            for k in dev["top_inferred"][:5]:
                print(f"  {k['name'][:70]:<70} {k['kernels']:>6} {k['ms']:>9.3f} ms")
        doc["sides"][name] = {k: s.get(k) for k in ("call_wall_ms", "unprofiled_wall_ms", "device_ms",
                                                    "device_attribution", "launch_notes", "launch_error", "marks",
                                                    "flags")}
    ref, new = sides.get("stock"), sides["champion"]
    if ref and ref.get("device_attribution") and new.get("device_attribution"):
        d = device_deltas(ref["device_attribution"], new["device_attribution"],
                          (ref["call_wall_ms"], new["call_wall_ms"]),
                          (ref.get("unprofiled_wall_ms"), new.get("unprofiled_wall_ms")))
        doc["against_stock"] = d
        print("== champion against stock, the same request:")
        for line in device_delta_lines(d, 12):
            print(line)
    share = (sides["champion"].get("device_attribution") or {}).get("named_share")
    doc["named_share"] = share
    (out / "profile_graphs.json").write_text(json.dumps(doc, indent=1))
    print(f"profile_graphs: champion named share {share if share is None else f'{100 * share:.1f}%'} "
          f"(done-when >= 90%); {out / 'profile_graphs.json'}")
    return 0 if args.cpu_rehearsal or (share is not None and share >= 0.9) else 1


if __name__ == "__main__":
    sys.exit(main())
