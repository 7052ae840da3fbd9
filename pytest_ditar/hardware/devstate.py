"""The judge's reading of the device's and the host's state after each timed call (issue 41); the
rules over it are core.devstate's.

Host: the 1-minute load average (os.getloadavg) and the CPU's current frequency, the mean of
`/sys/devices/system/cpu/cpu*/cpufreq/scaling_cur_freq`, else of `/proc/cpuinfo`'s "cpu MHz"
(a VM often has neither: then it is left out). GPU, through NVML (nvidia-ml-py's `pynvml`, opened
once per lane): SM and memory clocks, the clock-event reasons, temperature, power and the energy
counter (millijoules since the driver loaded, Volta and later). Anything NVML cannot say is left
out; without pynvml or a driver the GPU part is empty and the lane goes on (the exclusivity check,
hardware.exclusivity, already makes an uncheckable GPU lane UNSTABLE).

`doctor` asks `settings()` for persistence mode and the application clocks.
"""
from __future__ import annotations

import glob
import os
from collections.abc import Callable
from types import ModuleType
from typing import TypedDict, TypeVar

from pytest_ditar.core.devstate import reasons, round_state
from pytest_ditar.hardware.fingerprint import nvml_handle

CPUFREQ = "/sys/devices/system/cpu/cpu*/cpufreq/scaling_cur_freq"
CPUINFO = "/proc/cpuinfo"
T = TypeVar("T")


def cpu_mhz(pattern: str = CPUFREQ, cpuinfo: str = CPUINFO) -> float | None:
    """The mean current frequency of the host's CPUs in MHz, None where the host does not say."""
    vals = []
    for path in glob.glob(pattern):
        try:
            with open(path) as fh:
                vals.append(int(fh.read().strip()) / 1000.0)  # kHz
        except (OSError, ValueError):
            continue
    if not vals:
        try:
            with open(cpuinfo) as fh:
                vals = [float(line.split(":", 1)[1]) for line in fh if line.lower().startswith("cpu mhz")]
        except (OSError, ValueError, IndexError):
            vals = []
    return sum(vals) / len(vals) if vals else None


def host_state() -> dict[str, object]:
    out: dict[str, object] = {}
    try:
        out["load1"] = os.getloadavg()[0]
    except OSError:
        pass
    mhz = cpu_mhz()
    if mhz is not None:
        out["cpu_mhz"] = mhz
    return out


def _call(fn: Callable[..., T], *args: object) -> T | None:
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - a query this driver or card cannot answer: left out
        return None


class Reader:
    """Reads after each timed call; `close()` when the lane ends. `device` is the lane's (a
    "cuda:N" device opens NVML's handle of that GPU; anything else reads the host only)."""

    def __init__(self, device: str | None):
        self.nvml: ModuleType | None = None
        self.handle: object = None
        if device and device.startswith("cuda"):
            try:
                import pynvml

                pynvml.nvmlInit()
                self.nvml = pynvml
                self.handle = nvml_handle(pynvml, int(device.split(":", 1)[1]) if ":" in device else 0)
            except Exception:  # noqa: BLE001 - no NVML: the host's state only
                self.close()

    def energy_mj(self) -> float | None:
        if self.handle is None or self.nvml is None:
            return None
        v = _call(self.nvml.nvmlDeviceGetTotalEnergyConsumption, self.handle)
        return float(v) if v is not None else None

    def read(self) -> dict[str, object]:
        """The GPU's state now ({} without NVML); the host's is `host_state()`, read once a round."""
        out: dict[str, object] = {}
        if self.handle is None or self.nvml is None:
            return out
        n, h = self.nvml, self.handle
        sm, mem = _call(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM), _call(n.nvmlDeviceGetClockInfo, h,
                                                                              n.NVML_CLOCK_MEM)
        events = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            n, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        mask = _call(events, h) if events is not None else None
        temp = _call(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU)
        power = _call(n.nvmlDeviceGetPowerUsage, h)  # milliwatts
        for key, v in (("sm_mhz", sm), ("mem_mhz", mem), ("temp_c", temp)):
            if v is not None:
                out[key] = float(v)
        if power is not None:
            out["power_w"] = power / 1000.0
        if mask is not None:
            out["reasons"] = reasons(int(mask))
        return out

    def close(self) -> None:
        if self.nvml is not None:
            _call(self.nvml.nvmlShutdown)
        self.nvml = self.handle = None


class Rounds:
    """A lane's record of state: each timed call run through `timed` (its energy, then a read of
    the device), each round closed by `end_round` (the host's read, and the round summed up by
    core.devstate.round_state into `states`). The lists are the measurement's own, so a look
    during the lane sees every round closed so far."""

    def __init__(self, device: str | None, states: list[dict[str, object]], energy: dict[str, list[float]]):
        self.reader = Reader(device)
        self.states, self.energy = states, energy
        self.reads: list[dict[str, object]] = []

    def timed(self, side: str, call: Callable[[], T]) -> T:
        e0 = self.reader.energy_mj()  # read outside the timed call, as every state is
        out = call()
        e1 = self.reader.energy_mj()
        if e0 is not None and e1 is not None:
            self.energy.setdefault(side, []).append((e1 - e0) / 1e3)
        self.reads.append({**self.reader.read(), "side": side})  # whose call it followed: core.devstate voids by it
        return out

    def end_round(self) -> None:
        self.states.append(round_state([*self.reads, host_state()]))
        self.reads = []

    def close(self) -> None:
        self.reader.close()


class Clocks(TypedDict):
    sm_mhz: int | None
    mem_mhz: int | None


class Settings(TypedDict, total=False):
    """The GPU's persistence mode (1: on) and its application clocks: `app` (now), `default`, `max`."""

    persistence: int | None
    app: Clocks
    default: Clocks
    max: Clocks


def settings(index: int = 0) -> Settings | None:
    """Persistence mode and the application clocks (current and default) of CUDA's GPU `index`;
    None without NVML (no library, no driver, no such GPU)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML
        return None
    try:
        h = nvml_handle(pynvml, index)
        def clocks(fn: Callable[..., int]) -> Clocks:
            return {"sm_mhz": _call(fn, h, pynvml.NVML_CLOCK_SM), "mem_mhz": _call(fn, h, pynvml.NVML_CLOCK_MEM)}

        return {"persistence": _call(pynvml.nvmlDeviceGetPersistenceMode, h),
                "app": clocks(pynvml.nvmlDeviceGetApplicationsClock),
                "default": clocks(pynvml.nvmlDeviceGetDefaultApplicationsClock),
                "max": clocks(pynvml.nvmlDeviceGetMaxClockInfo)}
    except Exception:  # noqa: BLE001 - a device NVML does not know
        return None
    finally:
        _call(pynvml.nvmlShutdown)


def doctor_row(ok: str, warn: str, probe: Callable[[int], Settings | None] = settings) -> tuple[str, str, str]:
    """`dit-ar doctor`'s "gpu clocks" row: persistence mode and the application clocks of GPU 0,
    and the nvidia-smi commands that set them; a host without a GPU through NVML skips it."""
    s = probe(0)
    if s is None:
        return "gpu clocks", ok, "skipped: no GPU through NVML (a CPU lane reads the load and CPU MHz each round)"
    todo = []
    if s.get("persistence") != 1:
        todo.append("persistence mode off (the driver unloads between runs, the first call pays for it): "
                    "`sudo nvidia-smi -pm 1`")
    app, top = s.get("app") or Clocks(sm_mhz=None, mem_mhz=None), s.get("max") or Clocks(sm_mhz=None, mem_mhz=None)
    app_sm, top_sm = app.get("sm_mhz"), top.get("sm_mhz")
    if app_sm is not None and top_sm and app_sm < top_sm:
        todo.append(f"application clocks {app['sm_mhz']}/{app.get('mem_mhz')} MHz (SM/memory) below the card's "
                    f"{top['sm_mhz']}/{top.get('mem_mhz')}: `sudo nvidia-smi -ac {top.get('mem_mhz')},{top['sm_mhz']}`")
    if todo:
        return "gpu clocks", warn, "; ".join(todo) + (" (to hold the SM clock still: `sudo nvidia-smi -lgc "
                                                      f"{top.get('sm_mhz')},{top.get('sm_mhz')}`)")
    return "gpu clocks", ok, (f"persistence mode on, application clocks {app.get('sm_mhz')}/{app.get('mem_mhz')} MHz "
                              "(SM/memory); each round's clocks and throttle reasons are read, a throttled round is "
                              "void")
