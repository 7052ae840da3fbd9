"""Lane kinds: what a lane measures and how it is judged, each kind in one place (the seam a new
kind plugs into; docs/architecture.md).

A lane's `kind:` in its suite names one. "time" is the timed lane every suite has: loop.perf.lanes
measures it (paired rounds, the sequential plan, the twin, the exclusivity watch) and judges it
(loop.perf.lanes.judge). Any other kind is three functions registered here:

- `measure(candidate, suite, lane, champion=, timeout_s=, stream=)` -> runtime.lanes.LaneMeasurement:
  its rounds against the champion's worker, on fresh requests, figures per side in `peaks` or samples;
- `judge(measurement, perf_cfg)` -> runtime.lanes.LaneResult: the lane's outcome, its `figure` the
  words every table shows (the terminal's, summary.md, the report) where there is no speedup;
- `baseline(candidate, suite, lane, timeout_s=)` -> the dict the baseline's lanes.json keeps for it.

Storing needs nothing more (LaneResult.to_dict, summary.json's schema), nor does the decision: a
guard lane REGRESSED is a DISCARD whatever it measured (core.decision). A kind is never the
objective lane (loop.run.session refuses the config): only time decides a KEEP.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from pytest_ditar.config.project import PerfConfig
from pytest_ditar.config.suite import Lane, Suite
from pytest_ditar.core import laneoutcome
from pytest_ditar.core.laneoutcome import LaneEvidence
from pytest_ditar.core.requests import RequestStream
from pytest_ditar.hardware import exclusivity
from pytest_ditar.runtime.lanes import LaneMeasurement, LaneResult
from pytest_ditar.runtime.peaks import measure_peaks
from pytest_ditar.runtime.worker import CandidateWorker
from pytest_ditar.store.records import LaneRecord

TIME = "time"


class Measure(Protocol):
    """A kind's rounds against the champion's worker, on the run's stream of fresh requests."""

    def __call__(self, candidate: CandidateWorker, suite: Suite, lane: Lane, *,
                 champion: CandidateWorker | None = None, timeout_s: float | None = None,
                 stream: RequestStream | None = None) -> LaneMeasurement: ...


class Baseline(Protocol):
    """What the baseline's lanes.json keeps for a lane of the kind (store.records.LaneRecord's dict)."""

    def __call__(self, candidate: CandidateWorker, suite: Suite, lane: Lane,
                 timeout_s: float | None = None) -> dict[str, object]: ...


@dataclass(frozen=True)
class LaneKind:
    name: str
    measure: Measure
    judge: Callable[[LaneMeasurement, PerfConfig], LaneResult]
    baseline: Baseline


KINDS: dict[str, LaneKind] = {}


def register(kind: LaneKind) -> LaneKind:
    KINDS[kind.name] = kind
    return kind


def of(lane: Lane) -> LaneKind | None:
    """The lane's kind, or None for a timed lane (loop.perf.lanes' own path)."""
    name = getattr(lane, "kind", TIME)
    return None if name == TIME else KINDS[name]


# ---- memory: the peak memory of a call per batch size (the seed's 24 GB engineering) -----------
def _judge_memory(m: LaneMeasurement, perf_cfg: PerfConfig) -> LaneResult:
    """Its peaks by side are its evidence (core.laneoutcome's memory rule: REGRESSED beyond the
    guard tolerance, 16 MiB and every call of the champion's; OK otherwise). Its peak on a GPU is
    the lane's peak VRAM, which core.decision holds to the budget."""
    tol = perf_cfg.guard_tolerance
    peaks = laneoutcome.memory_peaks(m.peaks, tol)
    oc = laneoutcome.compose(LaneEvidence(m.lane, False, m.peak_reserved_gib, memory=peaks))
    return LaneResult(m, oc, "interleaved" if any(x is not None for x in peaks.champion) else "none", tol)


def _measure_memory(candidate: CandidateWorker, suite: Suite, lane: Lane, *, champion: CandidateWorker | None = None,
                    timeout_s: float | None = None, stream: RequestStream | None = None) -> LaneMeasurement:
    """measure_peaks, with NVML's per-process device memory as the judge's outside reading on a GPU."""
    device = str(getattr(getattr(candidate, "spec", None), "device", "cpu"))
    lister = exclusivity.nvml_lister() if device.startswith("cuda") else None
    device_memory = None
    if lister is not None:
        gpu = int(device.partition(":")[2] or 0)

        def device_memory(pids: set[int]) -> int | None:
            used = [b for p, b in lister(gpu) if p in pids and b is not None]
            return sum(used) if used else None

    return measure_peaks(candidate, suite, lane, champion=champion, timeout_s=timeout_s, stream=stream,
                         device_memory=device_memory)


def _baseline_memory(candidate: CandidateWorker, suite: Suite, lane: Lane,
                     timeout_s: float | None = None) -> dict[str, object]:
    """The baseline's own peaks on the lane (the record; a memory lane is judged against the champion's
    worker measured beside the candidate, never against stored figures)."""
    m = _measure_memory(candidate, suite, lane, timeout_s=timeout_s)
    peaks = [x for x in m.peaks.get("candidate", []) if x is not None]
    figure = f"peak {statistics.median(peaks):.3f} GiB (median of {len(peaks)} calls)" if peaks else "peak unreadable"
    return LaneRecord(lane.name, m.to_dict(), figure=figure).to_dict()


MEMORY = register(LaneKind("memory", _measure_memory, _judge_memory, _baseline_memory))
