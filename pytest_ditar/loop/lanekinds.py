"""Lane kinds: what a lane measures and how it is judged, each kind in one place (the seam a new
kind plugs into; docs/architecture.md).

A lane's `kind:` in its suite names one. "time" is the timed lane every suite has: loop.lanes
measures it (paired rounds, the sequential plan, the twin, the exclusivity watch) and judges it
(loop.lanes.judge). Any other kind is three functions registered here:

- `measure(candidate, suite, lane, champion=, timeout_s=, stream=)` -> runtime.lanes.LaneMeasurement:
  its rounds against the champion's worker, on fresh requests, figures per side in `peaks` or samples;
- `judge(measurement, perf_cfg)` -> runtime.lanes.LaneResult: the lane's outcome, its `figure` the
  words every table shows (the terminal's, summary.md, the report) where there is no speedup;
- `baseline(candidate, suite, lane, timeout_s=)` -> the dict the baseline's lanes.json keeps for it.

Storing needs nothing more (LaneResult.to_dict, summary.json's schema), nor does the decision: a
guard lane REGRESSED is a DISCARD whatever it measured (core.decision). A kind is never the
objective lane (loop.session refuses the config): only time decides a KEEP.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_ditar.core import stats
from pytest_ditar.core.decision import LaneOutcome
from pytest_ditar.hardware import exclusivity
from pytest_ditar.runtime.lanes import LaneMeasurement, LaneResult
from pytest_ditar.runtime.peaks import measure_peaks
from pytest_ditar.store.records import LaneRecord

TIME = "time"


@dataclass(frozen=True)
class LaneKind:
    name: str
    measure: Callable[..., LaneMeasurement]
    judge: Callable[[LaneMeasurement, Any], LaneResult]
    baseline: Callable[..., dict[str, Any]]


KINDS: dict[str, LaneKind] = {}


def register(kind: LaneKind) -> LaneKind:
    KINDS[kind.name] = kind
    return kind


def of(lane: Any) -> LaneKind | None:
    """The lane's kind, or None for a timed lane (loop.lanes' own path)."""
    name = getattr(lane, "kind", TIME)
    return None if name == TIME else KINDS[name]


# ---- memory: the peak memory of a call per batch size (the seed's 24 GB engineering) -----------
MEMORY_FLOOR_GIB = 1 / 64  # 16 MiB: a difference below it is the allocator's and the host's own, never a regression


def _judge_memory(m: LaneMeasurement, perf_cfg: Any) -> LaneResult:
    """REGRESSED where the candidate's median peak exceeds the champion's by more than the guard
    tolerance (and 16 MiB) with every call of it above every call of the champion's; OK otherwise.
    Its peak on a GPU is the lane's peak VRAM, which core.decision holds to the budget."""
    cand = [x for x in m.peaks.get("candidate", []) if x is not None]
    champ = [x for x in m.peaks.get("champion", []) if x is not None]
    tol = perf_cfg.guard_tolerance

    def result(verdict: str, reason: str, figure: str | None = None) -> LaneResult:
        oc = LaneOutcome(m.lane, False, verdict, None, None, None, reason, m.peak_reserved_gib, figure=figure)
        return LaneResult(m, oc, "interleaved" if champ else "none", tol)

    if not cand:
        return result("MISSING", "the candidate's peak memory could not be read in its worker")
    c = statistics.median(cand)
    if not champ:
        return result("MISSING", f"peak {c:.3f} GiB; no champion measured beside it to compare with",
                      f"{c:.3f} GiB")
    h = statistics.median(champ)
    grown = c / h - 1.0 if h > 0 else math.inf
    figure = f"{c:.3f} GiB ({grown * 100:+.1f}%)"
    said = f"peak {c:.3f} GiB against the champion's {h:.3f} GiB ({grown * 100:+.1f}%, median of {len(cand)} calls)"
    if grown > tol and c - h > MEMORY_FLOOR_GIB and min(cand) > max(champ):
        return result(stats.REGRESSED, f"{said}: more than the tolerance of {tol:.0%}", figure)
    return result(stats.OK, f"{said}: within the tolerance of {tol:.0%}", figure)


def _measure_memory(candidate: Any, suite: Any, lane: Any, **kw: Any) -> LaneMeasurement:
    """measure_peaks, with NVML's per-process device memory as the judge's outside reading on a GPU."""
    device = str(getattr(getattr(candidate, "spec", None), "device", "cpu"))
    lister = exclusivity.nvml_lister() if device.startswith("cuda") else None
    if lister is not None:
        gpu = int(device.partition(":")[2] or 0)

        def device_memory(pids: set[int]) -> int | None:
            used = [b for p, b in lister(gpu) if p in pids and b is not None]
            return sum(used) if used else None

        kw["device_memory"] = device_memory
    return measure_peaks(candidate, suite, lane, **kw)


def _baseline_memory(candidate: Any, suite: Any, lane: Any, timeout_s: float | None = None) -> dict[str, Any]:
    """The baseline's own peaks on the lane (the record; a memory lane is judged against the champion's
    worker measured beside the candidate, never against stored figures)."""
    m = _measure_memory(candidate, suite, lane, timeout_s=timeout_s)
    peaks = [x for x in m.peaks.get("candidate", []) if x is not None]
    figure = f"peak {statistics.median(peaks):.3f} GiB (median of {len(peaks)} calls)" if peaks else "peak unreadable"
    return LaneRecord(lane.name, m.to_dict(), figure=figure).to_dict()


MEMORY = register(LaneKind("memory", _measure_memory, _judge_memory, _baseline_memory))
