"""The call's kernel launches read from a Chrome trace (runtime.kineto, issue 52): a synthetic trace
shaped as Kineto writes it, and a real CPU trace of torch.profiler (its ranges; no kernels)."""
from __future__ import annotations

import json

import pytest

from pytest_ditar.core.attribution import Span
from pytest_ditar.core.launches import FLAG_FOREIGN, FLAG_GRAPH, Launch, attribute_launches
from pytest_ditar.runtime import kineto

PID, TID = 4242, 4242


def _x(cat: str, name: str, ts: float, dur: float, pid: object = PID, tid: object = TID, **args: object) -> dict:
    # libkineto/src/output_json.cpp, ChromeTraceLogger::writeCompleteEvent: "ph": "X", "cat", "name",
    # "pid", "tid", "ts", "dur", "args"; a kernel's and a runtime call's args hold "correlation"
    # (libkineto/include/MetadataFieldCatalog.h kCorrelation) and "External id" (handleActivity).
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _trace() -> list[dict]:
    ev = [{"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "ts": 0.0, "args": {"name": "python"}},
          _x("user_annotation", "ditar::call", 1000.0, 900.0, **{"External id": 1}),
          _x("user_annotation", "ditar::graph", 1100.0, 20.0, **{"External id": 2}),
          _x("user_annotation", "ditar::vae", 1500.0, 200.0, **{"External id": 3}),
          _x("cpu_op", "aten::copy_", 1050.0, 5.0, **{"External id": 4}),
          _x("user_annotation", "other::range", 1060.0, 5.0),
          _x("user_annotation", "ditar::vae", 1500.0, 200.0, tid=999),  # another thread's: not the call's
          # the graph's replay: one cudaGraphLaunch, two kernels with its correlation
          _x("cuda_runtime", "cudaGraphLaunch", 1105.0, 8.0, correlation=77, **{"External id": 2}),
          _x("kernel", "sm90_xmma_gemm_f16f16", 1120.0, 300.0, pid=0, tid=7, correlation=77, **{"External id": 2}),
          _x("kernel", "triton_poi_fused_add_0", 1420.0, 30.0, pid=0, tid=7, correlation=77),
          # a Triton kernel through the driver, in the VAE's range
          _x("cuda_driver", "cuLaunchKernel", 1550.0, 4.0, correlation=80),
          _x("kernel", "triton_red_fused_group_norm_1", 1560.0, 40.0, pid=0, tid=7, correlation=80),
          _x("cuda_runtime", "cudaMemcpyAsync", 1051.0, 3.0, correlation=81),
          _x("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 1060.0, 2.0, pid=0, tid=7, correlation=81),
          # launched on a worker thread of the candidate's
          _x("cuda_runtime", "cudaLaunchKernel", 1200.0, 3.0, tid=5555, correlation=82),
          _x("kernel", "elementwise_kernel", 1210.0, 6.0, pid=0, tid=8, correlation=82),
          # no launch in the trace, inside the call; and one outside the call
          _x("kernel", "mystery_kernel", 1300.0, 10.0, pid=0, tid=8, correlation=999),
          _x("kernel", "before_call", 100.0, 10.0, pid=0, tid=8),
          # launched before the call (its kernel runs inside it): not the call's
          _x("cuda_runtime", "cudaLaunchKernel", 900.0, 3.0, correlation=83),
          _x("kernel", "late_warmup_kernel", 1010.0, 5.0, pid=0, tid=7, correlation=83),
          _x("gpu_user_annotation", "ditar::vae", 1550.0, 60.0, pid=0, tid=7),
          {"ph": "s", "id": 77, "pid": PID, "tid": TID, "ts": 1105.0, "cat": "ac2g", "name": "ac2g"}]
    return ev


def test_a_kineto_shaped_trace_gives_the_call_thread_ranges_and_every_kernel_by_launch(tmp_path):
    p = tmp_path / "trace.json"
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": _trace()}))
    got = kineto.read(p)
    assert sorted(s[0] for s in got["spans"]) == ["call", "graph", "vae"]
    rows = {got["names"][r[0]]: r[1:] for r in got["launches"]}
    assert rows["sm90_xmma_gemm_f16f16"] == [1105.0, 300.0, FLAG_GRAPH]
    assert rows["triton_poi_fused_add_0"] == [1105.0, 30.0, FLAG_GRAPH]
    assert rows["triton_red_fused_group_norm_1"] == [1550.0, 40.0, 0]
    assert rows["Memcpy HtoD (Pageable -> Device)"] == [1051.0, 2.0, 0]
    assert rows["elementwise_kernel"] == [1200.0, 6.0, FLAG_FOREIGN]
    assert rows["mystery_kernel"] == [None, 10.0, 0]
    assert "before_call" not in rows and "late_warmup_kernel" not in rows and "ditar::vae" not in rows
    assert got["notes"] == []
    d = attribute_launches([Span.from_row(s) for s in got["spans"]],
                           [Launch.from_row(r, got["names"]) for r in got["launches"]])
    assert d.in_graphs == 2 and d.triton == 2 and d.unattributed_ms == pytest.approx(0.01)
    assert d.phases["vae"] == pytest.approx(0.04)
    assert d.phases["transformer_inferred"] == pytest.approx(0.336)  # the graph's, and the foreign launch


def test_a_trace_whose_thread_ids_differ_takes_every_launch_as_the_call_threads():
    ev = [e | {"tid": 1} if e.get("cat") in ("cuda_runtime", "cuda_driver") else e for e in _trace()]
    got = kineto.launches(ev)
    assert got["notes"] and all(r[3] & FLAG_FOREIGN == 0 for r in got["launches"])


def test_a_kernel_record_longer_than_the_call_is_clipped_and_said():
    ev = _trace() + [_x("cuda_runtime", "cudaLaunchKernel", 1300.0, 2.0, correlation=90),
                     _x("kernel", "misstamped", 1e9, 5e12, pid=0, tid=7, correlation=90)]
    got = kineto.launches(ev)
    row = next(r for r in got["launches"] if got["names"][r[0]] == "misstamped")
    assert row[1:] == [1300.0, 900.0, 0] and got["notes"] == ["1 kernel record(s) longer than the call itself, "
                                                              "clipped to it"]


def test_no_call_range_gives_nothing():
    assert kineto.launches([e for e in _trace() if e.get("name") != "ditar::call"])["launches"] == []


def test_a_real_cpu_trace_gives_the_ranges_and_no_kernels(tmp_path):
    import torch
    from torch.autograd.profiler import record_function
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function("ditar::call"):
            with record_function("ditar::vae"):
                torch.ones(4).add_(1)
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    got = kineto.read(tmp_path / "t.json")
    assert sorted(s[0] for s in got["spans"]) == ["call", "vae"] and got["launches"] == []
    call = next(s for s in got["spans"] if s[0] == "call")
    vae = next(s for s in got["spans"] if s[0] == "vae")
    assert call[1] <= vae[1] <= vae[2] <= call[2]
