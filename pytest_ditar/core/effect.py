"""The smallest effect a lane's verdict needs: one rule for the gate (loop.perf.lanes.judge) and for
`dit-ar compare`, so that compare judges as the gate does.

A lane the sequential plan grew (the objective lane, paired, with its looks) is judged against
`perf.min_speedup` itself: the plan's error spending already pays for the host's noise. Any other
comparison (a guard lane, one fixed-size set, two sides timed apart) against k times the baseline's
A/A noise, never below `perf.min_speedup` (stats.calibrated_min_effect); the paired A/A noise where
the two sides were timed in the same rounds. Pure: numbers in, numbers out.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_ditar.core import stats


def noise_floor(noise: Mapping[str, Any] | None, paired: bool) -> stats.NoiseFloor | None:
    """The baseline lane's stored A/A noise (lanes.json `noise`) as a NoiseFloor: its paired part
    for a paired comparison where one was stored; None where nothing was."""
    raw = (noise or {}).get("paired") if paired else None
    fields = {k: v for k, v in (raw or noise or {}).items() if k != "paired"}
    return stats.NoiseFloor(**fields) if fields else None


def threshold(noise: Mapping[str, Any] | None, *, paired: bool, grown: bool, min_speedup: float,
              noise_k: float) -> float:
    """The fraction a speedup must clear (1 + threshold) for the gate to call it FASTER."""
    if grown:
        return float(min_speedup)
    return stats.calibrated_min_effect(noise_floor(noise, paired), min_speedup, noise_k)
