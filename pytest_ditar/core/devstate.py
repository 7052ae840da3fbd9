"""The device's and the host's state around each timed round (issue 41), as plain data.

The judge reads it (hardware.devstate) after every timed call, never inside one: on a GPU, NVML's
SM and memory clocks, clock-event ("throttle") reasons, temperature, power and energy counter; on
any host, the load average and the CPU's current frequency, where readable. A round is summed up
here: the lowest clocks, the highest temperature and power, and every reason seen. A round with a
throttle reason that slows the device (power or thermal, software or hardware), read after a
reference's call, is void, like a reference's call that started on a busy device
(core.interference): the clock changed under it, not the code. Read after the candidate's own call
it counts against the candidate, as its busy start does: a candidate could draw the card past its
power cap in exactly its slow calls, and voiding those rounds would drop its worst calls.

Pure: numbers and names in, numbers and names out.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final

from pytest_ditar.core.vocabulary import SIDE_CANDIDATE

# NVML's clock-event reason bits (nvmlClocksEventReason*, formerly nvmlClocksThrottleReason*).
REASON_BITS: Final[Mapping[int, str]] = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# The reasons that mean the device ran slower than it was set to: they void a round. Idle, the
# application clocks a user set, sync boost and the display's clock are not slowdowns of a call.
SLOWDOWNS: Final = frozenset({"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                              "hw_power_brake_slowdown"})


def reasons(mask: int) -> list[str]:
    """The names of the bits set in an NVML clock-event reason mask (unknown bits as hex)."""
    out = [name for bit, name in REASON_BITS.items() if mask & bit]
    rest = mask & ~sum(REASON_BITS)
    if rest:
        out.append(f"0x{rest:x}")
    return out


State = Mapping[str, object]  # a read or a round's state: numbers by key, `reasons`, `side`, `slowed`


def _numbers(states: Iterable[State], key: str) -> list[float]:
    return [v for r in states if isinstance(v := r.get(key), (int, float))]


def _words(v: object) -> list[str]:
    return [str(x) for x in v] if isinstance(v, (list, tuple)) else []


def round_state(reads: Sequence[State]) -> dict[str, object]:
    """One round's state from the reads taken after its calls: the lowest clocks and CPU frequency,
    the highest load, temperature and power, every reason seen. Keys no read had are left out."""
    def pick(key: str, how: Callable[[list[float]], float]) -> float | None:
        vals = _numbers(reads, key)
        return how(vals) if vals else None

    out: dict[str, object] = {
        "load1": pick("load1", max), "cpu_mhz": pick("cpu_mhz", min), "sm_mhz": pick("sm_mhz", min),
        "mem_mhz": pick("mem_mhz", min), "temp_c": pick("temp_c", max), "power_w": pick("power_w", max)}
    out = {k: v for k, v in out.items() if v is not None}
    if any("reasons" in r for r in reads):
        out["reasons"] = sorted({x for r in reads for x in _words(r.get("reasons"))})
    slowed = sorted({x for r in reads if r.get("side") not in (None, SIDE_CANDIDATE)
                     for x in _words(r.get("reasons")) if x in SLOWDOWNS})
    if slowed:  # after a reference's call: the round is void
        out["slowed"] = slowed
    return out


def throttled(rounds: Sequence[State]) -> list[int]:
    """Indices of the rounds with a slowdown read after a reference's call (round_state's `slowed`): void."""
    return [i for i, r in enumerate(rounds) if r.get("slowed")]


def energy_per_image(joules: Sequence[float], batch: int) -> float | None:
    """A side's median energy per image over its timed calls (J), None without readings."""
    vals = sorted(j for j in joules if j is not None and j >= 0)
    if not vals or batch < 1:
        return None
    mid = len(vals) // 2
    med = vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2
    return med / batch


def describe(rounds: Sequence[State], energy: Mapping[str, float | None]) -> str | None:
    """One line of a lane's device and host state over its rounds (the run summary's); None without any."""
    if not rounds:
        return None

    def span(key: str, unit: str, fmt: str = "{:.0f}") -> str | None:
        vals = _numbers(rounds, key)
        if not vals:
            return None
        lo, hi = fmt.format(min(vals)), fmt.format(max(vals))
        return f"{lo}{unit}" if lo == hi else f"{lo}-{hi}{unit}"

    parts = [f"{name} {v}" for name, v in (("SM", span("sm_mhz", " MHz")), ("memory", span("mem_mhz", " MHz")),
                                            ("temperature", span("temp_c", " C")), ("power", span("power_w", " W")),
                                            ("host load", span("load1", "", "{:.2f}")),
                                            ("CPU", span("cpu_mhz", " MHz"))) if v]
    per_image = [f"{side} {j:.3g} J" for side, j in energy.items() if j is not None]
    if per_image:
        parts.append("energy per image " + ", ".join(per_image))
    hot = throttle_note(rounds)
    if hot:
        parts.append(hot.split(":", 1)[0] + ": void")
    return ", ".join(parts) if parts else None


def throttle_note(rounds: Sequence[State]) -> str | None:
    """What a lane's verdict adds where the device throttled in some rounds (voided, re-timed)."""
    hot = throttled(rounds)
    if not hot:
        return None
    seen = sorted({x for i in hot for x in _words(rounds[i].get("slowed"))})
    return (f"{len(hot)} of {len(rounds)} rounds throttled ({', '.join(seen)}): void, re-timed within the budget; "
            "repeated, the card's cooling or power limit is the problem (`dit-ar doctor`)")
