"""A memory lane's rounds: the peak of each side's call, read inside its worker and from outside it.

The judge's own reading (OutsidePeak) samples the worker's process tree from /proc and, on a GPU,
NVML's per-process device memory; a candidate can lower the figure its own process reports, not
this one. Calls are made as a lane's are (runtime.calls); no clock is kept.
"""
from __future__ import annotations

import os
import threading
from dataclasses import replace
from typing import Any, Callable

from pytest_ditar.config.suite import Lane, Suite
from pytest_ditar.core.requests import RequestStream
from pytest_ditar.runtime import proctree
from pytest_ditar.runtime.calls import JUDGE_ORDER, fresh_request, lane_request, new_stream, timed_call
from pytest_ditar.runtime.clock import judge_clock
from pytest_ditar.runtime.lanes import LaneMeasurement
from pytest_ditar.runtime.worker import CandidateWorker


class OutsidePeak:
    """The judge's own reading of a worker's memory during a call, taken from outside the process
    the candidate runs in: every 2 ms, the resident set of the worker's process tree (`/proc`), and
    on a GPU its processes' device memory as NVML reports it (`device_memory`: pids -> bytes). The
    worker's own figure (CandidateWorker.peak) comes from inside that process, where a candidate
    can reset the kernel's high-water mark or torch's peak statistics; this one it cannot lower."""

    INTERVAL_S = 0.002
    RESCAN = 25  # samples between scans for new processes in the tree

    def __init__(self, root_pid: int | None, device_memory: Callable[[set[int]], int | None] | None = None):
        self.root = root_pid
        self.device_memory = device_memory
        self.host_bytes = 0
        self.device_bytes: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ditar-outside-peak", daemon=True)

    def __enter__(self) -> OutsidePeak:
        if self.root is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        assert self.root is not None
        pids: set[int] = set()
        n = 0
        while True:
            if n % self.RESCAN == 0:
                pids = proctree.descendants([self.root])
            self.host_bytes = max(self.host_bytes, sum(_resident_bytes(p) for p in pids))
            if self.device_memory is not None:
                used = self.device_memory(pids)
                if used is not None:
                    self.device_bytes = max(self.device_bytes or 0, used)
            n += 1
            if self._stop.wait(self.INTERVAL_S):
                return

    def gib(self, where: str) -> float | None:
        """The peak seen, in GiB, of the kind the worker reported ("device" or "host"); None where unseen."""
        seen = self.device_bytes if where == "device" else self.host_bytes or None
        return seen / 2**30 if seen else None


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _resident_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):  # gone between the scan and the read
        return 0


def measure_peaks(candidate: CandidateWorker, suite: Suite, lane: Lane, *, champion: CandidateWorker | None = None,
                  timeout_s: float | None = None, stream: RequestStream | None = None,
                  device_memory: Callable[[set[int]], int | None] | None = None) -> LaneMeasurement:
    """A memory lane's rounds: after `lane.warmup` untimed calls a side, `lane.repeats` rounds on fresh
    requests, each side's call in an order drawn from the judge's entropy, only that side running.
    A call's figure is the larger of the worker's own peak (reset just before, read just after:
    CandidateWorker.peak) and the judge's reading from outside its process (OutsidePeak), so a
    candidate that resets or fakes its own figure gains nothing. No clock is kept."""
    stream = stream or new_stream(suite)
    sides = {"candidate": candidate, **({"champion": champion} if champion not in (None, candidate) else {})}
    workers = list(sides.values())
    m = LaneMeasurement(lane.name, [], [])
    t_wall = judge_clock()
    for w in workers:
        for _ in range(lane.warmup):
            timed_call(w, workers, lane_request(suite, lane), timeout_s, [])
    where = "host"
    for r in range(lane.repeats):
        req = fresh_request(stream, suite, lane, f"peak/{r}", m.nonces)
        m.seeds.append(list(req.seeds))
        order = list(sides)
        JUDGE_ORDER.shuffle(order)
        m.orders.append("".join(name[0] for name in order))
        for name in order:
            w = sides[name]
            w.peak(reset=True)
            root = w.proc.pid if getattr(w, "proc", None) is not None else None
            with OutsidePeak(root, device_memory) as outside:
                timed_call(w, workers, req, timeout_s, m.overhead_s)
            own, where = w.peak()
            seen = [x for x in (own, outside.gib(where)) if x is not None]
            m.peaks.setdefault(name, []).append(max(seen) if seen else None)
    for w in workers:
        w.resume()
    cand = [x for x in m.peaks.get("candidate", []) if x is not None]
    # device memory is what core.decision holds to the VRAM budget
    reserved = max(cand) if where == "device" and cand else m.peak_reserved_gib
    return replace(m, peak_reserved_gib=reserved, wall_s=judge_clock() - t_wall)
