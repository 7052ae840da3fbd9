"""The kernel launches of one profiled call, read from the Chrome trace torch.profiler exported
(Kineto's JSON): for `dit-ar profile`'s device time by launch (core.launches). Worker side.

What is read, as Kineto writes it (pytorch/kineto libkineto/src/output_json.cpp,
ChromeTraceLogger::handleActivity: "cat" is toString(op.type()), "ts"/"dur" microseconds,
"pid"/"tid"; libkineto/include/ActivityType.h names the categories; the kernel's and the
runtime call's "args" carry "correlation", CudaMetadataFields::kCorrelation in
libkineto/include/MetadataFieldCatalog.h and CuptiActivity.h):

- the ranges runtime.profiler opened ("ditar::*", "user_annotation" or "cpu_op") on the thread of
  the one "ditar::call" range: they become spans on the trace's clock;
- the runtime and driver calls ("cuda_runtime", "cuda_driver") by their "correlation": the
  launch's host time, its thread and its name (cudaGraphLaunch: a graph's replay, FLAG_GRAPH);
- the device's records ("kernel", "gpu_memcpy", "gpu_memset"), each linked by its "correlation" to
  its launch. A graph's replayed kernels all carry their cudaGraphLaunch's correlation (CUPTI).

Kept: the kernels launched inside the call's range (by the launch's host time, not the kernel's
own timestamps, which CUPTI can misstamp), and those with no launch found whose device
time starts inside it (their launch time None: core.launches counts them unattributed). A launch
on another thread than the call's gets FLAG_FOREIGN (no range of the call applies); where no
runtime call at all lies on the call's thread (a trace whose thread ids differ), every launch is
taken as the call thread's, and a note says so.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TypedDict

from pytest_ditar.core.launches import FLAG_FOREIGN, FLAG_GRAPH

PREFIX = "ditar::"
CALL = PREFIX + "call"
HOST_RANGE_CATS = ("user_annotation", "cpu_op")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
GRAPH_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch")  # and their _v10000/_ptsz variants


class TraceLaunches(TypedDict):
    spans: list[list[str | float]]  # [label, start, end]
    names: list[str]
    launches: list[list[int | float | None]]  # [name index, launch ts or None, device us, flags]
    notes: list[str]


def read(path: str | Path) -> TraceLaunches:
    """The trace at `path` as launches(): see there."""
    with open(path, encoding="utf-8") as f:
        doc: object = json.load(f)
    events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    return launches(events if isinstance(events, list) else [])


def _num(v: object) -> float | None:
    try:
        return float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _corr(e: Mapping[str, object]) -> int | None:
    args = e.get("args")
    c = args.get("correlation") if isinstance(args, dict) else None
    try:
        return int(c) if isinstance(c, (int, float, str)) else None
    except (TypeError, ValueError):
        return None


def _ranges(evs: list[dict[str, object]], pid: object, tid: object) -> list[list[str | float]]:
    """[label, start, end] of every "ditar::*" range on the call's thread."""
    out: list[list[str | float]] = []
    for e in evs:
        name = e.get("name")
        if (e.get("cat") in HOST_RANGE_CATS and isinstance(name, str) and name.startswith(PREFIX)
                and e.get("pid") == pid and e.get("tid") == tid):
            ts, dur = _num(e.get("ts")), _num(e.get("dur")) or 0.0
            if ts is not None:
                out.append([name[len(PREFIX):], ts, ts + dur])
    return out


def _runtime(evs: list[dict[str, object]]) -> dict[int, tuple[float, object, str]]:
    """correlation -> (host ts, thread, name) of every runtime and driver call."""
    out: dict[int, tuple[float, object, str]] = {}
    for e in evs:
        if e.get("cat") in LAUNCH_CATS:
            c, ts = _corr(e), _num(e.get("ts"))
            if c is not None and ts is not None:
                out[c] = (ts, e.get("tid"), str(e.get("name", "")))
    return out


def launches(events: Iterable[object]) -> TraceLaunches:
    """{"spans": [[label, start, end]], "names": [kernel name], "launches": [[name index, launch
    ts or None, device us, flags]], "notes": [...]} of the trace's one "ditar::call" range; empty
    lists where there is none."""
    evs: list[dict[str, object]] = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]
    call = next((e for e in evs if e.get("name") == CALL and e.get("cat") in HOST_RANGE_CATS), None)
    out = TraceLaunches(spans=[], names=[], launches=[], notes=[])
    lo = _num(call.get("ts")) if call is not None else None
    if call is None or lo is None:
        return out
    pid, tid = call.get("pid"), call.get("tid")
    hi = lo + (_num(call.get("dur")) or 0.0)
    out["spans"] = _ranges(evs, pid, tid)
    runtime = _runtime(evs)
    same_thread = any(t == tid for _, t, _ in runtime.values())
    if runtime and not same_thread:
        out["notes"].append("no runtime call on the call's thread id in the trace: every launch taken as the "
                            "call thread's")
    index: dict[str, int] = {}
    clipped = 0
    for e in evs:
        if e.get("cat") not in DEVICE_CATS:
            continue
        ts, dur = _num(e.get("ts")), max(0.0, _num(e.get("dur")) or 0.0)
        if ts is None:
            continue
        c = _corr(e)
        launch = runtime.get(c) if c is not None else None
        if launch is None:
            if not lo <= ts <= hi:
                continue
            at, flags = None, 0
        else:
            at, ltid, lname = launch
            if not lo <= at <= hi:
                continue
            flags = (FLAG_GRAPH if lname.startswith(GRAPH_LAUNCHES) else 0) | \
                (FLAG_FOREIGN if same_thread and ltid != tid else 0)
        if dur > hi - lo:  # a record whose clock went wrong (CUPTI can misstamp a session's first kernels)
            dur, clipped = hi - lo, clipped + 1
        name = str(e.get("name", ""))
        i = index.setdefault(name, len(index))
        out["launches"].append([i, at, round(dur, 3), flags])
    out["names"] = list(index)
    if clipped:
        out["notes"].append(f"{clipped} kernel record(s) longer than the call itself, clipped to it")
    return out
