"""Roofline sanity check: a measured time below the device's FLOP floor means a broken timer.

On a GPU the ceiling is the card's datasheet peak; on a CPU it is the host's own achievable rate,
measured at baseline with a matmul probe (`host_roofline_check`). Anything at or above the floor
passes: this catches unsynchronized timers and skipped work, it does not judge efficiency.
"""

from __future__ import annotations

from pytest_ditar.hardware.fingerprint import Fingerprint, on_target
from pytest_ditar.hardware.profiles import PROFILES, TargetProfile

__all__ = ["HOST_MARGIN", "UNKNOWN_DEVICE_MARGIN", "device_peak_tflops", "flop_floor_seconds", "host_roofline_check",
           "roofline_check"]

# How far above the probe a lane may seem to run before it is refused. The probe is the best of a
# few float32 square matmuls, the friendliest work a BLAS has; a whole pipeline (attention softmax,
# norms, the scheduler, Python between kernels) runs well below it, so an honest lane stays under
# 1.0x (the tiny suite's lanes: 0.2-0.6 GFLOP/s against a 110 GFLOP/s probe). The probe and the
# lane run at different moments of a shared host, though: twelve probes half a second apart on the
# 2-core CI host read 101-147 GFLOP/s (median 117). With 1.25, a lane at 80% of the host's true
# peak still passes a probe that read 30% low; skipped work (cached outputs, a fraction of the
# steps passed off as the same work) shows up as 2x and more.
HOST_MARGIN = 1.25

# A card no profile describes (an H100 ran here as the H200's stand-in) gets the fastest profile's
# peak times this: a floor no such card beats. The target's own peak would call an honest run on a
# faster card a broken timer (an H100's 82.7 ms exact stack was a CRASH against the A5500's 136 TFLOP/s).
UNKNOWN_DEVICE_MARGIN = 2.0


def device_peak_tflops(fp: Fingerprint) -> float:
    """The peak TFLOP/s the FLOP floor uses for the card a run is on: the profile it is on
    (hardware.fingerprint.on_target: name and compute capability), else UNKNOWN_DEVICE_MARGIN times
    the fastest profile's (lenient by construction: the floor catches broken timers, it judges no card)."""
    for p in PROFILES.values():
        if p.peak_tflops and on_target(fp, p):
            return p.peak_tflops
    return UNKNOWN_DEVICE_MARGIN * max(p.peak_tflops or 0.0 for p in PROFILES.values())


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


def fmt_flops(flops: float) -> str:
    """A FLOP count (or rate, with "/s" after it) in the largest unit it reaches: "96.5 TFLOP"."""
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
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
            f"{fmt_flops(flops)} at {peak:g} TFLOP/s: the timer is not measuring the work"
        )
    return None


def host_roofline_check(measured_s: float, flops: float, host_flops_per_s: float,
                        margin: float = HOST_MARGIN) -> str | None:
    """Error message when a CPU lane's time implies more FLOP/s than `margin` times the host's
    measured rate (`flops` is the work the baseline does per call), else None."""
    if not host_flops_per_s > 0:
        raise ValueError(f"the host's FLOP/s must be > 0, got {host_flops_per_s!r}")
    if not measured_s > 0:
        return f"reported time {measured_s!r} s is not positive: the timer is not measuring the work"
    implied = flops / measured_s
    if implied > host_flops_per_s * margin:
        return (f"{fmt_flops(flops)} in {_fmt_seconds(measured_s)} implies {implied / 1e9:.3g} GFLOP/s, above the "
                f"host's measured {host_flops_per_s / 1e9:.3g} GFLOP/s (x{margin:g} margin): the timer is not "
                f"measuring the work")
    return None
