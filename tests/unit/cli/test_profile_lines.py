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
