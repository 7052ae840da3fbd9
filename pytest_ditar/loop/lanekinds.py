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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_ditar.runtime.lanes import LaneMeasurement, LaneResult

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

