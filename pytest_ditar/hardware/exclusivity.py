"""Perf-lane exclusivity: no other process may use the GPU a lane is timing on.

Another job on the same GPU (a second agent, an xdist worker, a notebook) steals SMs and memory
bandwidth at random moments; its effect looks exactly like a regression or a speedup. So a lane
checks NVML's process list before it starts and keeps polling while it runs; any foreign PID
makes the lane UNSTABLE with that PID named, never a silently poisoned timing.

pynvml comes with nvidia-ml-py, a dependency on Linux. A lane on a GPU whose exclusivity cannot
be checked (pynvml not importable, nvmlInit failing, a query failing) is UNSTABLE with that
reason: an unchecked GPU is not a clean one. A CPU lane has no GPU to share and is not checked.
`dit-ar doctor` says the same in its "gpu exclusivity" row. The process-list function is
injectable so the logic is tested without a GPU.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from pytest_ditar.hardware.fingerprint import nvml_handle

# (pid, used bytes or None) for every process NVML sees on GPU `index`
ProcessLister = Callable[[int], list[tuple[int, int | None]]]


@dataclass(frozen=True)
class Offender:
    pid: int
    name: str
    used_bytes: int | None

    def describe(self) -> str:
        mem = f", {self.used_bytes / 2**30:.1f} GiB" if self.used_bytes else ""
        return f"pid {self.pid} ({self.name}{mem})"


@dataclass
class ExclusivityReport:
    gpu: int | None
    checked: bool
    offenders: list[Offender] = field(default_factory=list)
    note: str = ""

    @property
    def ok(self) -> bool:
        """No other process seen, and on a GPU, seen because NVML answered."""
        return not self.offenders and (self.checked or self.gpu is None)

    def message(self) -> str:
        if not self.checked and self.gpu is not None:
            return f"GPU exclusivity cannot be checked: {self.note}"
        if not self.checked:
            return f"exclusivity not checked ({self.note})"
        if self.ok:
            return f"GPU {self.gpu} exclusive"
        who = ", ".join(o.describe() for o in self.offenders)
        return f"GPU {self.gpu} shared with {who}: timings would be poisoned"


def process_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip() or "?"
    except OSError:
        return "?"


def nvml_lister() -> ProcessLister | None:
    """NVML's compute + graphics process lists, or None when NVML is not available."""
    return nvml()[0]


def nvml() -> tuple[ProcessLister | None, str]:
    """(NVML's process lister, "") or (None, why NVML is unavailable)."""
    try:
        import pynvml
    except ImportError as exc:
        return None, f"NVML unavailable (pynvml not importable: {exc}; pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - no driver, no GPU: not checkable
        return None, f"NVML unavailable (nvmlInit failed: {type(exc).__name__}: {exc})"
    def lister(index: int) -> list[tuple[int, int | None]]:
        h = nvml_handle(pynvml, index)  # CUDA's numbering, the workers', to NVML's device
        procs = []
        for fn in (pynvml.nvmlDeviceGetComputeRunningProcesses, pynvml.nvmlDeviceGetGraphicsRunningProcesses):
            try:
                procs += [(int(p.pid), getattr(p, "usedGpuMemory", None)) for p in fn(h)]
            except pynvml.NVMLError:
                pass
        return procs

    return lister, ""


def gpu_index(device: str) -> int | None:
    """CUDA's index of `device`: cuda -> 0 (a fresh process's current device, which the workers
    given `cuda` use), cuda:N -> N, cpu -> None. Never imports torch: the judge asks this for its
    GPU watch, and the judge opens no CUDA context (importing torch for it cost about 3 s of a
    run's two lanes on an H200 and initialized CUDA in the judge)."""
    if not device.startswith("cuda"):
        return None
    return int(device.split(":", 1)[1]) if ":" in device else 0


def own_pids() -> set[int]:
    """This process and every descendant of it (a multi-GPU lane's ranks are ours, not intruders).
    A lane's watch is given the judge's and its kept zygote's trees instead (loop.perf.lanes,
    runtime.proctree.descendants)."""
    tops = {os.getpid()}
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    children.setdefault(int(fh.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    pids, todo = set(tops), list(tops)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in pids:
                pids.add(child)
                todo.append(child)
    return pids


def check(device: str, lister: ProcessLister | None = None, allowed: Iterable[int] | None = None,
          namer: Callable[[int], str] = process_name) -> ExclusivityReport:
    """One look at the GPU behind `device`."""
    index = gpu_index(device)
    if index is None:
        return ExclusivityReport(None, False, note="no NVML on CPU")
    why = ""
    if lister is None:
        lister, why = nvml()
    if lister is None:
        return ExclusivityReport(index, False, note=why)
    mine = set(allowed) if allowed is not None else own_pids()
    try:
        procs = lister(index)
    except Exception as exc:  # noqa: BLE001
        return ExclusivityReport(index, False, note=f"NVML query failed: {exc}")
    offenders = [Offender(pid, namer(pid), used) for pid, used in procs if pid not in mine]
    return ExclusivityReport(index, True, offenders)


class Watch:
    """Check before a lane, then poll every `interval_s` while it runs (a daemon thread)."""

    def __init__(self, device: str, lister: ProcessLister | None = None, interval_s: float = 0.5,
                 allowed: Callable[[], Iterable[int]] | None = None, namer: Callable[[int], str] = process_name):
        self.device = device
        self.lister = lister if lister is not None else (nvml_lister() if gpu_index(device) is not None else None)
        # without a lister every look asks NVML again, and says why it cannot answer
        self.interval_s = interval_s
        self.allowed = allowed or own_pids
        self.namer = namer
        self.report = ExclusivityReport(gpu_index(device), False, note="not started")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seen: dict[int, Offender] = {}

    def _look(self) -> None:
        r = check(self.device, self.lister, self.allowed(), self.namer)
        if not r.checked:
            self.report = r
            return
        for o in r.offenders:
            self._seen.setdefault(o.pid, o)
        self.report = ExclusivityReport(r.gpu, True, list(self._seen.values()))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._look()

    def __enter__(self) -> "Watch":
        self._look()
        if self.report.checked:
            self._thread = threading.Thread(target=self._loop, name="ditar-exclusivity", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.report.checked:
            self._look()  # one last look: a job that started and is still there


def combine(reports: list[ExclusivityReport]) -> ExclusivityReport:
    """One report for a lane on several GPUs (a group lane: one watch per rank's GPU): the first
    GPU that was shared or could not be checked, else the first GPU's."""
    return next((r for r in reports if not r.ok), reports[0])


def doctor_row(ok: str, warn: str, fail: str, cuda_devices: int | None = None,
               probe: "Callable[[], tuple[ProcessLister | None, str]]" = nvml) -> tuple[str, str, str]:
    """`dit-ar doctor`'s "gpu exclusivity" row: FAIL where CUDA is there but NVML is not (every
    gated lane on it would be UNSTABLE), warn where neither is."""
    lister, why = probe()
    if lister is not None:
        return "gpu exclusivity", ok, "NVML answers: each lane's GPU is checked for other processes"
    if cuda_devices is None:
        try:
            import torch

            cuda_devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
        except Exception:  # noqa: BLE001 - no torch here: no CUDA lane either
            cuda_devices = 0
    if cuda_devices:
        return "gpu exclusivity", fail, (f"GPU exclusivity cannot be checked: {why}: every gated lane on this host's "
                                         f"{cuda_devices} GPU(s) is UNSTABLE until it can")
    return "gpu exclusivity", warn, f"{why}; no CUDA device here, so CPU lanes are not affected"
