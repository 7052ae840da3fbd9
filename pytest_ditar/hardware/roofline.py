"""Roofline sanity check: a measured time below the card's FLOP floor means a broken timer.

Anything at or above the floor passes: this catches unsynchronized timers and skipped work, it
does not judge efficiency.
"""

from __future__ import annotations

from pytest_ditar.hardware.profiles import TargetProfile

__all__ = ["flop_floor_seconds", "roofline_check"]


def _peak_tflops(profile_or_peak: TargetProfile | float) -> float:
    if isinstance(profile_or_peak, TargetProfile):
        peak = profile_or_peak.peak_tflops
        if peak is None:
            raise ValueError(f"profile {profile_or_peak.name!r} has no peak TFLOP/s figure")
    else:
        peak = float(profile_or_peak)
    if not peak > 0:
        raise ValueError(f"peak TFLOP/s must be > 0, got {peak!r}")
    return peak


def flop_floor_seconds(flops: float, profile_or_peak_tflops: TargetProfile | float) -> float:
    """Fewest seconds `flops` can take at the card's peak: a lower bound on any honest time."""
    if not flops >= 0:
        raise ValueError(f"flops must be >= 0, got {flops!r}")
    return float(flops) / (_peak_tflops(profile_or_peak_tflops) * 1e12)


def _fmt_flops(flops: float) -> str:
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if flops >= scale:
            return f"{flops / scale:.3g} {unit}"
    return f"{flops:.3g} FLOP"


def _fmt_seconds(s: float) -> str:
    if s >= 1.0:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} us"


def roofline_check(
    measured_s: float, flops: float, peak_tflops: TargetProfile | float
) -> str | None:
    """Error message when a measured time beats physics (timer not synchronized, work skipped),
    else None. Anything at or above the floor passes: this catches broken timers, it does not
    judge efficiency."""
    peak = _peak_tflops(peak_tflops)
    if not measured_s > 0:
        return f"reported time {measured_s!r} s is not positive: the timer is not measuring the work"
    floor = flop_floor_seconds(flops, peak)
    if measured_s < floor:
        return (
            f"reported {_fmt_seconds(measured_s)} is below the {_fmt_seconds(floor)} floor for "
            f"{_fmt_flops(flops)} at {peak:g} TFLOP/s: the timer is not measuring the work"
        )
    return None
