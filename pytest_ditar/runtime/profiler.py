"""Worker side of `dit-ar profile`: one candidate call under torch.profiler, with the pipeline's parts
marked by ranges that this module installs, never by the candidate.

Marks (labels of core.attribution): a forward pre/post hook pair on every module of a model the
candidate holds whose class (or a base class) is listed in `MODULE_LABELS` (attention,
feed-forward, adaLN, norms, the timestep/class embedding, blocks, patch embed) and on the model
itself ("transformer"); the VAE's `decoder` and `post_quant_conv` ("vae"; nothing inside it);
the scheduler's `step`, `scale_model_input` and `set_timesteps`, wrapped on the instance;
`torch.cuda.CUDAGraph.replay`, wrapped on the class ("graph": whoever replays a graph). Each
mark is a `record_function` range, so it also shows in the Chrome trace. All of it is removed
after the call.

On CUDA, profile.json also holds every kernel of the call with its launch's time (runtime.kineto,
from the trace's correlation ids), so the judge attributes the device's own records to the
phases by launch (core.launches), graph-replayed and Triton kernels included.

The worker runs this (worker_main.op_profile) and writes two files into the folder the judge
named (its scratch): the Chrome trace and `profile.json` (the spans, the top operators, the
FLOPs). The judge attributes the spans (core.attribution) and stores both.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Union

from pytest_ditar.core.attribution import CALL, OP, SPAN_PHASE, module_label
from pytest_ditar.core.launches import GRAPH
from pytest_ditar.interface import Candidate, Request
from pytest_ditar.runtime import kineto

if TYPE_CHECKING:  # the worker imports torch when it profiles; the judge never does
    import torch
    from torch.autograd.profiler import record_function as RecordFunction
    from torch.autograd.profiler_util import FunctionEvent, FunctionEventAvg
    from torch.profiler import profile
    from torch.utils.hooks import RemovableHandle

Event = Union["FunctionEvent", "FunctionEventAvg"]  # a profiler event, or an operator's average
Cell = str | int | float  # one cell of profile.json's tables

PREFIX = "ditar::"  # every range this module opens; nothing else in a trace starts with it
TRACE = "trace.json"
DATA = "profile.json"
TOP_OPS = 10
SCHEDULER_METHODS = {"step": "scheduler.step", "scale_model_input": "scheduler.scale",
                     "set_timesteps": "scheduler.set_timesteps"}
WALK_DEPTH = 4


@dataclass
class Marks:
    """The hooks and wrappers installed on one candidate, and how to take them off again."""

    handles: list[RemovableHandle] = field(default_factory=list)
    # (object, name, the old value, whether it was the object's own attribute)
    wrapped: list[tuple[object, str, object, bool]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # label -> modules or methods marked

    def add_hooks(self, label: str, *handles: RemovableHandle) -> None:
        """A module marked with `label`: its hooks, taken off by remove()."""
        self.handles.extend(handles)
        self.counts[label] = self.counts.get(label, 0) + 1

    def add_wrapped(self, label: str, obj: object, name: str, old: object, had: bool) -> None:
        """A method of `obj` wrapped in a `label` range: its old value, put back by remove()."""
        self.wrapped.append((obj, name, old, had))
        self.counts[label] = self.counts.get(label, 0) + 1

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        for obj, name, old, had in reversed(self.wrapped):
            if had:
                setattr(obj, name, old)
            elif isinstance(obj, type):  # a class's method (CUDAGraph.replay): its mappingproxy is read-only
                if name in vars(obj):
                    delattr(obj, name)
            else:
                obj.__dict__.pop(name, None)
        self.handles, self.wrapped = [], []


def _reachable(candidate: object) -> tuple[list[torch.nn.Module], list[object]]:
    """The torch modules and the scheduler-like objects reachable from the candidate's attributes
    (and dict/list values) a few levels deep; a module's own insides are not walked here."""
    import torch

    seen: set[int] = set()
    modules: list[torch.nn.Module] = []
    schedulers: list[object] = []
    frontier: list[object] = [candidate]
    for _ in range(WALK_DEPTH + 1):
        nxt: list[object] = []
        for obj in frontier:
            if id(obj) in seen or obj is None or isinstance(obj, (str, bytes, int, float, bool, type)):
                continue
            seen.add(id(obj))
            if isinstance(obj, torch.nn.Module):
                modules.append(obj)
            elif isinstance(obj, torch.Tensor):
                continue
            elif isinstance(obj, dict):
                nxt.extend(obj.values())
            elif isinstance(obj, (list, tuple)):
                nxt.extend(obj)
            else:
                if type(obj).__name__.endswith("Scheduler") and callable(getattr(obj, "step", None)):
                    schedulers.append(obj)
                if hasattr(obj, "__dict__"):
                    nxt.extend(vars(obj).values())
        frontier = nxt
    inner = {id(m) for top in modules for m in list(top.modules())[1:]}
    return [m for m in modules if id(m) not in inner], schedulers


def _is_vae(m: object) -> bool:
    name = type(m).__name__.lower()
    return ("autoencoder" in name or "vae" in name) and hasattr(m, "decoder")


def install(candidate: object) -> Marks:
    """Mark the candidate's models and schedulers (see the module's docstring)."""
    import torch
    from torch.autograd.profiler import record_function

    marker = _Marker(record_function, torch.nn.Module)
    roots, schedulers = _reachable(candidate)
    for root in roots:
        marker.model(root)
    for sched in schedulers:
        marker.scheduler(sched)
    marker.graphs(getattr(getattr(torch, "cuda", None), "CUDAGraph", None))
    return marker.marks


class _Marker:
    """Puts the ranges on, into one Marks: a forward pre-hook and hook pair on a module (one stack of
    open ranges for all of them), a wrapper on a scheduler's method."""

    def __init__(self, record_function: type[RecordFunction], module_type: type[torch.nn.Module]):
        self.marks = Marks()
        self.record_function, self.module_type = record_function, module_type
        self.stack: list[RecordFunction] = []

    def hook(self, module: torch.nn.Module, label: str) -> None:
        def enter(*_: object) -> None:
            rf = self.record_function(PREFIX + label)
            rf.__enter__()
            self.stack.append(rf)

        def leave(*_: object) -> None:
            if self.stack:
                self.stack.pop().__exit__(None, None, None)

        self.marks.add_hooks(label, module.register_forward_pre_hook(enter),
                             module.register_forward_hook(leave, always_call=True))

    def model(self, root: torch.nn.Module) -> None:
        """A top-level model: a VAE's decoder as one range; a transformer as one, and every inner
        module whose class names a phase as its own."""
        if _is_vae(root):
            for part in (getattr(root, "post_quant_conv", None), root.decoder):
                if isinstance(part, self.module_type):
                    self.hook(part, "vae")
            return
        if "Transformer" in type(root).__name__ or "Transformer" in type(getattr(root, "_orig_mod", None)).__name__:
            self.hook(root, "transformer")
        for m in list(root.modules())[1:]:
            label = module_label(c.__name__ for c in type(m).__mro__)
            if label is not None and label in SPAN_PHASE:
                self.hook(m, label)

    def scheduler(self, sched: object) -> None:
        for name, label in SCHEDULER_METHODS.items():
            old = getattr(sched, name, None)
            if callable(old):
                self.marks.add_wrapped(label, sched, name, old, name in vars(sched))
                setattr(sched, name, _ranged(old, PREFIX + label, self.record_function))


    def graphs(self, graph_class: object) -> None:
        """Every CUDA graph's replay in a GRAPH range, whoever replays it (the candidate's own
        graphs, Inductor's cudagraph trees): its kernels share one launch (core.launches)."""
        old = getattr(graph_class, "replay", None)
        if isinstance(graph_class, type) and callable(old):
            self.marks.add_wrapped(GRAPH, graph_class, "replay", old, "replay" in vars(graph_class))
            setattr(graph_class, "replay", _ranged(old, PREFIX + GRAPH, self.record_function))


def _ranged(fn: Callable[..., object], name: str,
            record_function: Callable[[str], AbstractContextManager[object]]) -> Callable[..., object]:
    def wrapper(*args: object, **kwargs: object) -> object:
        with record_function(name):
            return fn(*args, **kwargs)
    return wrapper


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def profile_call(candidate: Candidate, request: Request, warm: Request, warmup: int, reference: Request | None,
                 device: str, out_dir: Path) -> dict[str, object]:
    """Warm up (`warmup` calls of `warm`), time one unprofiled call of `reference`, then run
    `request` once under torch.profiler inside a "call" range; write the trace and the data
    file into `out_dir`; return the reply (file names, sizes, walls)."""
    import torch
    from torch.autograd.profiler import record_function
    from torch.profiler import ProfilerActivity, profile

    out_dir = Path(out_dir)
    cuda = device.startswith("cuda")
    marks = install(candidate)
    try:
        for _ in range(warmup):
            candidate.generate(warm)
        _sync(device)
        unprofiled_s = None
        if reference is not None:
            t0 = time.perf_counter()
            candidate.generate(reference)
            _sync(device)
            unprofiled_s = time.perf_counter() - t0
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=activities, record_shapes=True, with_flops=True) as prof:
            t0 = time.perf_counter()
            with record_function(PREFIX + CALL):
                candidate.generate(request)
                _sync(device)
            wall_s = time.perf_counter() - t0
    finally:
        marks.remove()
    t_post = time.perf_counter()
    prof.export_chrome_trace(str(out_dir / TRACE))
    events = prof.events()
    data = {"spans": spans_of(events, cuda), "top_ops": top_ops(prof, cuda), "flops": total_flops(prof),
            "kernels": kernels_of(events, cuda) if cuda else host_ops(prof),
            "marks": marks.counts, "wall_s": wall_s, "unprofiled_s": unprofiled_s, "events": len(events),
            "torch": torch.__version__, "threads": torch.get_num_threads(), "device": device}
    if cuda:
        data.update(_launches(out_dir / TRACE))
    (out_dir / DATA).write_text(json.dumps(data))
    return {"trace": TRACE, "data": DATA, "wall_s": wall_s, "post_s": time.perf_counter() - t_post}


def _launches(trace: Path) -> dict[str, object]:
    """The call's kernels by launch, from the trace just written (runtime.kineto); a trace it
    cannot read leaves the device column to the operators' figures, and says why."""
    try:
        got = kineto.read(trace)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return {"launch_error": f"{type(exc).__name__}: {exc}"[:300]}
    return {"trace_spans": got["spans"], "launch_names": got["names"], "launches": got["launches"],
            "launch_notes": got["notes"]}


def _on_host(e: Event) -> bool:
    """A host-side event (an operator, a range), not a kernel or a device-side range."""
    return str(getattr(e, "device_type", "CPU")).endswith("CPU")


def _device_us(e: Event) -> float:
    # device_time_total since torch 2.4; cuda_time_total before it (deprecated since, with a warning)
    return float((e.device_time_total if hasattr(e, "device_time_total") else getattr(e, "cuda_time_total", 0.0))
                 or 0.0)


def _self_device_us(e: Event) -> float:
    return float((e.self_device_time_total if hasattr(e, "self_device_time_total")
                  else getattr(e, "self_cuda_time_total", 0.0)) or 0.0)


def spans_of(events: Iterable[FunctionEvent], cuda: bool) -> list[list[Cell]]:
    """[label, start us, end us(, device us)] of every range this module opened, on the call's
    thread; on CUDA also each top-level operator of the call ("op"), for the device time of the
    phases that have no range (core.attribution)."""
    call = next((e for e in events if e.name == PREFIX + CALL and _on_host(e)), None)
    if call is None:
        return []
    out: list[list[Cell]] = []
    for e in events:
        if e.thread != call.thread or not _on_host(e):  # a range's device-side twin (gpu_user_annotation) too
            continue
        if e.name.startswith(PREFIX):
            row: list[Cell] = [e.name[len(PREFIX):], round(e.time_range.start, 3), round(e.time_range.end, 3)]
        elif cuda and e.cpu_parent is not None and e.cpu_parent.id == call.id:
            row = [OP, round(e.time_range.start, 3), round(e.time_range.end, 3)]
        else:
            continue
        if cuda:
            row.append(round(_device_us(e), 3))
        out.append(row)
    return out


def kernels_of(events: Iterable[FunctionEvent], cuda: bool) -> list[list[Cell]]:
    """[name, calls, device ms] of every kernel, copy and memset the device ran while the call's
    range was open, from the profiler's device-side records: a CUDA graph's replayed kernels and a
    compiled region's Triton kernels count like an eager operator's (no host operator is needed to
    find them). The device-side twins of ranges (gpu_user_annotation) are not kernels."""
    call = next((e for e in events if e.name == PREFIX + CALL and _on_host(e)), None)
    if call is None or not cuda:
        return []
    lo, hi = call.time_range.start, call.time_range.end
    acc: dict[str, list[float]] = {}
    for e in events:
        if _on_host(e) or getattr(e, "is_user_annotation", False) or e.name.startswith(PREFIX):
            continue
        if not lo <= e.time_range.start <= hi:
            continue
        row = acc.setdefault(e.name, [0, 0.0])
        row[0] += 1
        row[1] += (e.time_range.end - e.time_range.start) / 1e3
    return [[name, int(c), round(ms, 6)] for name, (c, ms) in acc.items()]


def host_ops(prof: profile) -> list[list[Cell]]:
    """[name, calls, self CPU ms] of every host operator (the marks left out): a CPU's kernel table."""
    return [[a.key, int(a.count), round(a.self_cpu_time_total / 1e3, 6)] for a in prof.key_averages()
            if _on_host(a) and not a.key.startswith(PREFIX) and a.self_cpu_time_total > 0]


def top_ops(prof: profile, cuda: bool, n: int = TOP_OPS) -> list[dict[str, Cell | None]]:
    """The operators with the most self time (device time on CUDA), the marked ranges left out."""
    rows = [a for a in prof.key_averages() if not a.key.startswith(PREFIX) and _on_host(a)]  # kernels: the trace
    rows.sort(key=(lambda a: _self_device_us(a)) if cuda else (lambda a: a.self_cpu_time_total), reverse=True)
    return [{"name": a.key, "calls": int(a.count), "self_cpu_us": float(a.self_cpu_time_total),
             "cpu_total_us": float(a.cpu_time_total), "self_device_us": _self_device_us(a) if cuda else None,
             "flops": float(a.flops or 0)} for a in rows[:n]]


def total_flops(prof: profile) -> float:
    """FLOPs of the operators the profiler has a formula for (matmul, conv, add, mul)."""
    return float(sum(a.flops or 0 for a in prof.key_averages()))
