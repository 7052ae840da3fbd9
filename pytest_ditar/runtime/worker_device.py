"""The worker's operations on its device and its own state: hello (the device opened, a group
joined), build (the candidate, within its memory budget), and what the judge reads or sets between
calls (dtypes, memory, peak, steady). The timed calls are runtime.worker_main's; the protocol that
serves them all, runtime.worker_protocol's.
"""
from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from pytest_ditar.hardware.fingerprint import collect, object_dtypes
from pytest_ditar.interface import Candidate, PipelineSpec
from pytest_ditar.runtime.harness import build_candidate, pin_to_cpu, pin_to_current_cpu
from pytest_ditar.runtime.worker_protocol import Reply, WireServer

# When this process's device opening ran (perf_counter): its build reply says how much of it fell
# inside the build, which waits on it for its first device call.
_OPENING: dict[str, float] = {}


def _open_device(device: str) -> None:
    _OPENING["start"] = time.perf_counter()
    try:
        _open(device)
    finally:
        _OPENING["end"] = time.perf_counter()


def _open(device: str) -> None:
    """The context, then each library a DiT's first call loads on first use: cuBLAS(Lt) for the
    half-precision GEMMs, cuDNN for the VAE's convolutions, the fused attention kernels. Loaded
    here, beside the judge's start-up and the build's CPU work, not in the quality phase's first
    call; every worker loads the same, so no side is favoured, and only libraries are kept."""
    import torch
    import torch.nn.functional as F

    with contextlib.suppress(Exception):  # an optimisation only: the build opens what this did not
        x = torch.ones(8, 8, device=device)
        torch.mm(x, x)
        for dt in (torch.float16, torch.bfloat16):
            h = torch.ones(64, 64, device=device, dtype=dt)
            torch.mm(h, h)
            img = torch.ones(1, 32, 8, 8, device=device, dtype=dt)
            F.group_norm(F.conv2d(img, torch.ones(32, 32, 3, 3, device=device, dtype=dt), padding=1), 8)
            q = torch.ones(1, 2, 16, 64, device=device, dtype=dt)
            F.scaled_dot_product_attention(q, q, q)
            F.layer_norm(h, (64,))
        torch.cuda.synchronize(device)
        del x, h, img, q
        torch.cuda.empty_cache()


def _join_group(backend: str, device: str) -> None:
    """torch.distributed's process group of this rank (RANK, WORLD_SIZE, MASTER_* set by group())."""
    import torch
    import torch.distributed as dist

    extra: dict[str, Any] = {}  # Any: init_process_group checks each keyword against its own parameter
    if backend == "nccl":
        torch.cuda.set_device(device)
        extra["device_id"] = torch.device(device)  # NCCL bound to this rank's GPU up front
    else:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group(backend, init_method="env://", **extra)


class DeviceOps(WireServer):
    """The operations that set up and read the device and the process (each returns the reply header)."""

    def __init__(self, conn: Connection):
        super().__init__(conn)
        self.device = "cpu"
        self._candidate: Candidate | None = None
        self.gc_was_enabled = True

    def op_hello(self, device: str, cpu_threads: int, fingerprint: bool, buffer: str,
                 group: str | None = None) -> Reply:
        import torch

        self.buffer = open(buffer, "r+b")
        # its name is gone before any candidate code runs (the judge holds it open too): what a
        # worker sees of its buffer never depends on when the judge read this reply
        with contextlib.suppress(OSError):
            os.unlink(buffer)
        self.device = device
        # The judge's share (runtime.worker_process.worker_threads): pools that spin-wait against other
        # workers' turn CPU timing noise into outliers and a GPU run's parallel builds into a crawl.
        torch.set_num_threads(cpu_threads)
        if group:  # a rank of a group (runtime.group): the process group exists before build()
            _join_group(group, device)
        reply: Reply = {"pid": os.getpid(), "argv": sys.argv}
        if fingerprint:
            reply["fingerprint"] = collect(device).to_dict()
        if device.startswith("cuda"):
            # The device's context, allocator and BLAS libraries open now, while the judge collects
            # and runs its guards, rather than inside the build it then waits on. What a candidate
            # would open anyway, opened before any of its code runs: nothing of it is carried over.
            import threading

            threading.Thread(target=_open_device, args=(device,), name="ditar-open-device", daemon=True).start()
        return reply

    def op_build(self, candidate_dir: str, spec: dict[str, Any], memory_budget_gib: float | None) -> Reply:
        self._bind_memory_budget(memory_budget_gib)
        self.candidate_dir = candidate_dir
        # No bytecode written next to the candidate: a champion's worktree must stay exactly its
        # commit (loop.run.session checks), and `import mutable.x` finds this package's own parent.
        sys.dont_write_bytecode = True
        sys.path.insert(0, str(Path(candidate_dir).parent))
        spec_obj = PipelineSpec(**{**spec, "model_dir": Path(spec["model_dir"])})
        t0, cpu0 = time.perf_counter(), time.thread_time()
        self._candidate = build_candidate(Path(candidate_dir), spec_obj)
        self._sync()
        t1 = time.perf_counter()
        reply: Reply = {"build_s": t1 - t0, "build_cpu_s": time.thread_time() - cpu0}
        if "start" in _OPENING:  # what of the device's opening the build overlapped (and may have waited on)
            end = _OPENING.get("end", t1)
            reply["open_s"] = end - _OPENING["start"]
            reply["open_in_build_s"] = max(0.0, min(end, t1) - max(_OPENING["start"], t0))
        return reply

    @property
    def candidate(self) -> Candidate:
        """The candidate built (op_build); an op that needs it before then is the judge's error."""
        if self._candidate is None:
            raise RuntimeError("no candidate built yet (build before this operation)")
        return self._candidate

    def op_dtypes(self) -> Reply:
        return {"dtypes": sorted(object_dtypes(self.candidate))}

    def op_memory(self, reset: bool) -> Reply:
        if not self.device.startswith("cuda"):
            return {"allocated_gib": None, "reserved_gib": None}
        import torch

        torch.cuda.synchronize(self.device)
        if reset:
            torch.cuda.reset_peak_memory_stats(self.device)
        return {"allocated_gib": torch.cuda.max_memory_allocated(self.device) / 2**30,
                "reserved_gib": torch.cuda.max_memory_reserved(self.device) / 2**30}

    def op_peak(self, reset: bool) -> Reply:
        """This worker's peak memory since the last reset, in GiB: the device's reserved bytes on CUDA,
        the process's resident set (VmHWM, reset through clear_refs) on the CPU; None where unreadable."""
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize(self.device)
            if reset:
                torch.cuda.reset_peak_memory_stats(self.device)
            return {"gib": torch.cuda.max_memory_reserved(self.device) / 2**30, "where": "device"}
        try:
            if reset:
                with open("/proc/self/clear_refs", "w") as fh:
                    fh.write("5")  # the resident set's high-water mark starts again from now
            with open("/proc/self/status") as fh:
                kib = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
        except (OSError, StopIteration, ValueError):
            return {"gib": None, "where": "host"}
        return {"gib": kib / 2**20, "where": "host"}

    def op_steady(self, on: bool, pin_cpu: bool, cpu: int | None = None) -> Reply:
        """No garbage-collector pause inside a timed round; with pin_cpu, no migration between
        launches; with `cpu`, on that core (every worker of a CPU lane on the same one)."""
        if on:
            self.gc_was_enabled = gc.isenabled()
            gc.collect()
            gc.disable()
            self.old_mask = pin_to_cpu(cpu) if cpu is not None else pin_to_current_cpu() if pin_cpu else None
        else:
            old_mask = getattr(self, "old_mask", None)
            if old_mask is not None:
                os.sched_setaffinity(0, old_mask)
            if self.gc_was_enabled:
                gc.enable()
        return {}

    def _idle_probe(self) -> float | None:
        """Seconds one tiny kernel takes from launch to completion before the timed work starts
        (core.interference): tens of microseconds on an idle GPU, a time slice when another
        process's work is still queued on it. None on CPU (a paused CPU worker runs nothing)."""
        if not self.device.startswith("cuda"):
            return None
        import torch

        if getattr(self, "probe_tensor", None) is None:
            self.probe_tensor = torch.zeros(1, device=self.device)
            torch.cuda.synchronize(self.device)
        t0 = time.perf_counter()
        self.probe_tensor.add_(1.0)
        torch.cuda.synchronize(self.device)
        return time.perf_counter() - t0

    def _sync(self) -> None:
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize(self.device)

    def _bind_memory_budget(self, budget_gib: float | None) -> None:
        """The allocator raises OOM at the target's size: a candidate that only fits a bigger card crashes."""
        if not budget_gib or not self.device.startswith("cuda"):
            return
        import torch

        dev = torch.device(self.device)
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        total = torch.cuda.get_device_properties(index).total_memory / 2**30
        if budget_gib < total:
            torch.cuda.set_per_process_memory_fraction(budget_gib / total, index)
