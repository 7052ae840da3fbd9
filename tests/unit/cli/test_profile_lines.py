"""`dit-ar profile`'s table on a GPU (issue 41), from a hand-made summary (this CI host has none):
device busy is the kernel table's sum, graph-replayed kernels included, and the share no host
operator launched is said; an unmarked phase is named, not 0.00."""
from __future__ import annotations

from pathlib import Path

from pytest_ditar.cli.profile import describe
from pytest_ditar.core.attribution import PHASES
from pytest_ditar.core.kernels import kernel_table


def _summary() -> dict:
    wall = 70.0
    table = kernel_table([("sm90_xmma_gemm_f16f16", 400, 30.0), ("triton_poi_fused_add_0", 300, 6.0),
                          ("void pytorch_flash::flash_fwd_kernel", 100, 10.0), ("Memcpy DtoH", 1, 0.5)], wall)
    phases = []
    for key, label, parent in PHASES:
        unmarked = "bypass" if key in ("attention", "mlp") else None
        phases.append({"key": key, "label": label, "parent": parent, "level": 0 if parent is None else 1,
                       "host_ms": 0.0 if unmarked else 1.0, "share": 0.01, "calls": 0 if unmarked else 25,
                       "inferred": False, "per_step_ms": None, "device_ms": 0.5, "unmarked": unmarked})
    return {"candidate": {"source": "commit", "commit": "a" * 40, "dirty": False}, "lane": "latency_b1", "batch": 1,
            "steps": 25, "device": "cuda:0", "threads": 1, "warmup": 1, "call_wall_ms": wall, "steps_seen": 25,
            "coverage": 0.95, "device_ms": table.busy_ms, "device_linked_ms": 8.0, "kernels": table.to_dict(),
            "phases": phases, "notes": [], "unprofiled_wall_ms": None, "top_ops": [], "flops": 0.0, "trace": "t.json"}


def test_gpu_table_device_busy_is_every_kernel_and_unmarked_rows_are_named():
    s = _summary()
    out = "\n".join(describe(s, Path("/tmp/p")))
    assert f"device busy {100 * 46.5 / 70:.1f}% of the call's wall: every kernel" in out
    assert "of it 38.50 ms in kernels no host operator launched (CUDA graph replays)" in out
    assert "by kernel family (kernels the device ran; they add up to the wall): GEMM 30.00 ms" in out
    assert "device idle (no kernel running) 23.50 ms" in out
    rows = [ln for ln in out.splitlines() if ln.startswith(("  attention", "  MLP"))]
    assert rows and all("unmarked: the pipeline bypasses the module" in r and "0.00" not in r for r in rows), rows


def _side(graphs: bool, wall_ms: float, unprofiled_ms: float) -> dict:
    """One side of `--against` through the judge's own functions: host spans, the kernels by launch
    (a graph-replayed champion whose marks never fire, or an eager baseline whose do)."""
    from pytest_ditar.core.attribution import Span, attribute
    from pytest_ditar.core.launches import FLAG_GRAPH, Launch, attribute_launches
    from pytest_ditar.loop.perf.profile import summarize

    wall = wall_ms * 1e3
    spans = [Span("call", 0.0, wall, 0.0)]
    launches = []
    for i in range(10):
        t = 1000.0 + i * (wall - 3000) / 10
        if graphs:
            spans.append(Span("graph", t, t + 50))
            launches += [Launch("sm90_xmma_gemm", t + 10, 600.0, FLAG_GRAPH),
                         Launch("triton_poi_fused_0", t + 10, 100.0, FLAG_GRAPH),
                         Launch("flash_fwd_kernel", t + 10, 200.0, FLAG_GRAPH)]
        else:
            spans += [Span("transformer", t, t + 500, 0.0), Span("attention", t + 100, t + 200, 0.0),
                      Span("scheduler.step", t + 600, t + 700, 0.0)]
            launches += [Launch("sm90_xmma_gemm", t + 50, 1500.0), Launch("flash_fwd_kernel", t + 150, 400.0),
                         Launch("elementwise_kernel", t + 650, 20.0)]
    spans.append(Span("vae", wall - 2000, wall - 1000, 0.0))
    launches.append(Launch("cudnn_conv", wall - 1500, 800.0))
    dev = attribute_launches(spans, launches)
    table = kernel_table([(lc.name, 1, lc.device_us / 1e3) for lc in launches], wall_ms)
    data = {"spans": [], "unprofiled_s": unprofiled_ms / 1e3, "device": "cuda:0", "threads": 1}
    marks = {"transformer": 1, "attention": 28, "mlp": 28, "scheduler.step": 1, "vae": 1}
    s = summarize(data, attribute(spans, marks=marks), table, dev=(dev, None))
    return s | {"candidate": {"source": "commit", "commit": "b" * 40, "dirty": False, "ref": "baseline"},
                "lane": "latency_b1", "batch": 1, "steps": 10, "warmup": 1}


def test_gpu_table_names_the_device_time_by_launch_and_against_checks_the_sum():
    from pytest_ditar.loop.perf.profile import compare

    ref, new = _side(False, 40.0, 38.0), _side(True, 12.0, 11.0)
    new["against"] = compare(ref, new)
    out = "\n".join(describe(new, Path("/tmp/p")))
    assert "device time in named phases: 100.0% (31 kernels, 30 in CUDA graphs, 10 Triton; unattributed 0.00 ms" \
        in out, out
    row = next(ln for ln in out.splitlines() if "replayed / compiled / rewritten kernels *" in ln)
    assert row.split()[-2:] == ["7.00*", "58.3%"], row  # 10 x (600 + 100) us of the graphs, by position
    att = next(ln for ln in out.splitlines() if ln.startswith("    attention"))
    assert "2.00*" in att and "unmarked: by launch only" in att, att
    dev = new["against"]["device_phases"]
    assert abs(dev["summed_ms"] - (12.0 - 40.0)) < 1e-9  # with the device's idle row: the profiled walls
    assert "sum check: the deltas -28.00 ms against the difference of the profiled call walls 40.00 -> 12.00 ms " \
           "(-28.00 ms): gap 0.0%" in out
    assert "against the difference of the unprofiled walls 38.00 -> 11.00 ms (-27.00 ms): gap 3.7%" in out
    assert "sum check: the phases' deltas without idle -9.50 ms against the difference of the device busy 19.99" \
           not in out  # busy: 10 x 1.92 + 0.8 = 20.0 -> 9.8
    assert "the phases' deltas without idle -10.20 ms against the difference of the device busy 20.00 -> 9.80 ms" \
        in out


def test_cpu_table_says_there_are_no_kernels_and_prints_no_share():
    s = _summary() | {"device_ms": None}
    out = "\n".join(describe(s, Path("/tmp/p")))
    assert "device time by launch: none on a CPU (no kernels" in out and "named phases" not in out
