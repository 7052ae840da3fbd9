"""What a run ran on: the hardware/software fingerprint and whether it is the target.

Timing comparisons only mean something between runs on the same stack. A Fingerprint records
the device, driver, library versions and the numerics flags that change timings; `diff` says
what changed between two, `on_target` whether a run was on the card the product is judged on.
The dtype scanners feed the feature gate (profiles.check_features) with what a candidate holds.

torch (and pynvml) are imported lazily inside functions: the CLI, config checks and report
code import this module on machines without torch.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.metadata
import os
import platform
import re
import sys
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypedDict

from pytest_ditar.hardware.profiles import TargetProfile

if TYPE_CHECKING:  # collecting imports torch where it runs; importing this module does not
    import torch

__all__ = [
    "Clocks",
    "Fingerprint",
    "cuda_device_count",
    "collect",
    "diff",
    "on_target",
    "target_header",
    "scan_module_dtypes",
    "object_dtypes",
]


@dataclass(frozen=True)
class Clocks:
    sm_max_mhz: int | None
    mem_max_mhz: int | None


@dataclass(frozen=True)
class Fingerprint:
    device_type: str  # "cuda" | "cpu"
    device_name: str  # CUDA device name; the CPU model on cpu
    compute_capability: str  # "8.6"; "" on cpu
    memory_gib: float | None  # device memory (cuda) or physical RAM (cpu)
    driver: str
    cuda: str
    torch: str
    cudnn: str
    diffusers: str
    python: str
    platform: str  # platform.machine(), e.g. "x86_64"
    cpu_model: str
    clocks: Clocks | None  # max clocks from NVML; None without NVML
    power_limit_w: float | None
    tf32_matmul: bool
    tf32_cudnn: bool
    deterministic_algorithms: bool
    cudnn_benchmark: bool
    cudnn_deterministic: bool

    @property
    def arch(self) -> str:
        if self.device_type != "cuda" or not self.compute_capability:
            return self.device_type
        return "sm_" + self.compute_capability.replace(".", "")

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Fingerprint:
        """Inverse of to_dict. Unknown keys (newer writers) are ignored; missing ones refused,
        because a snapshot whose stack cannot be compared must not silently compare."""
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in data]
        if missing:
            raise ValueError(f"fingerprint is missing keys: {', '.join(missing)}")
        values = {n: data[n] for n in names}
        clocks = values["clocks"]
        if clocks is not None and not isinstance(clocks, Clocks):
            values["clocks"] = Clocks(
                sm_max_mhz=clocks.get("sm_max_mhz"), mem_max_mhz=clocks.get("mem_max_mhz")
            )
        return cls(**values)

    def comparable_key(self) -> dict[str, object]:
        """The fields that must match for two timings to be compared at all."""
        key: dict[str, object] = {
            "device_type": self.device_type,
            "device_name": self.device_name,
            "compute_capability": self.compute_capability,
            "driver": self.driver,
            "cuda": self.cuda,
            "torch": self.torch,
            "cudnn": self.cudnn,
            "diffusers": self.diffusers,
            "tf32_matmul": self.tf32_matmul,
            "tf32_cudnn": self.tf32_cudnn,
        }
        if self.device_type == "cpu":
            key["cpu_model"] = self.cpu_model
        return key


def _flatten(d: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _show(v: object) -> str:
    return "(none)" if v is None or v == "" else str(v)


def diff(a: Fingerprint, b: Fingerprint, *, comparable_only: bool = False) -> list[str]:
    """Human lines for every field that differs, e.g. "torch: 2.13.0 -> 2.14.1"."""
    if comparable_only:
        da, db = a.comparable_key(), b.comparable_key()
    else:
        da, db = _flatten(a.to_dict()), _flatten(b.to_dict())
    keys = list(da) + [k for k in db if k not in da]
    return [
        f"{k}: {_show(da.get(k))} -> {_show(db.get(k))}"
        for k in keys
        if da.get(k) != db.get(k)
    ]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _ram_gib() -> float | None:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 2)
    except (AttributeError, ValueError, OSError):
        return None


def _pkg_version(name: str) -> str:
    # Metadata only: importing diffusers just to read its version costs seconds.
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return ""


def _driver_from_proc() -> str:
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as fh:
            m = re.search(r"Kernel Module\s+([0-9][0-9.]*)", fh.read())
            return m.group(1) if m else ""
    except OSError:
        return ""


@dataclass(frozen=True)
class _NvmlInfo:
    driver: str = ""
    clocks: Clocks | None = None
    power_limit_w: float | None = None


def _nvml_info(props: object, index: int) -> _NvmlInfo:
    """Driver, max clocks and power limit from NVML; empty when NVML is absent or fails."""
    try:
        import pynvml
    except Exception:  # noqa: BLE001 - no NVML library
        return _NvmlInfo(driver=_driver_from_proc())
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver
        return _NvmlInfo(driver=_driver_from_proc())
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else str(driver)
        handle = None
        # Match by UUID: NVML indices ignore CUDA_VISIBLE_DEVICES, torch indices do not.
        uuid = getattr(props, "uuid", None)
        if uuid is not None:
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
            except Exception:  # noqa: BLE001 - a UUID NVML does not know: no handle
                handle = None
        if handle is None and not os.environ.get("CUDA_VISIBLE_DEVICES"):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        clocks = None
        power = None
        if handle is not None:
            try:
                clocks = Clocks(
                    sm_max_mhz=int(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)),
                    mem_max_mhz=int(
                        pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM)
                    ),
                )
            except Exception:  # noqa: BLE001 - a driver that cannot say
                clocks = None
            try:
                power = pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0
            except Exception:  # noqa: BLE001 - a driver that cannot say
                power = None
        return _NvmlInfo(driver=driver, clocks=clocks, power_limit_w=power)
    except Exception:  # noqa: BLE001 - a failing query: the driver from /proc
        return _NvmlInfo(driver=_driver_from_proc())
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - nothing to release
            pass


class _Common(TypedDict):
    """The fields every Fingerprint has from the host alone."""

    diffusers: str
    python: str
    platform: str
    cpu_model: str


class _Flags(TypedDict):
    """torch's numerics switches, as Fingerprint's fields."""

    tf32_matmul: bool
    tf32_cudnn: bool
    deterministic_algorithms: bool
    cudnn_benchmark: bool
    cudnn_deterministic: bool


def _torch_flags(torch: ModuleType) -> _Flags:
    # The legacy allow_tf32 getters still reflect the state set by the newer
    # fp32_precision API; silence their deprecation chatter.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
            "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
            "deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
            "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        }


def nvml_handle(pynvml: ModuleType, cuda_index: int) -> object:
    """NVML's handle of CUDA's device `cuda_index`: CUDA_VISIBLE_DEVICES renumbers CUDA's devices
    (by index or UUID), not NVML's. Raises what NVML raises for a device it does not know."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    entries = [e.strip() for e in visible.split(",") if e.strip()] if visible else None
    if entries is None:
        return pynvml.nvmlDeviceGetHandleByIndex(cuda_index)
    if entries[cuda_index].isdigit():
        return pynvml.nvmlDeviceGetHandleByIndex(int(entries[cuda_index]))
    return pynvml.nvmlDeviceGetHandleByUUID(entries[cuda_index])


def nvml_device_count() -> int | None:
    """GPUs NVML sees that CUDA_VISIBLE_DEVICES leaves visible; None without NVML (no library or
    driver). Never initializes CUDA, so a process may still fork safely after asking."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return 0
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML library or driver
        return None
    try:
        count = pynvml.nvmlDeviceGetCount()
    except Exception:  # noqa: BLE001 - a driver that cannot say
        return None
    finally:
        # Shut down again: an NVML left initialized is inherited by every fork (the zygote's
        # workers), and inside the workers' sandbox that stale state counted 0 GPUs, so torch
        # refused device 0 ("Invalid device id") while CUDA itself saw the GPU (H200 host).
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    if visible is not None:
        count = min(count, len([d for d in visible.split(",") if d.strip()]))
    return count


def cuda_nodes_present() -> bool:
    """Whether this host has an NVIDIA GPU device node that CUDA_VISIBLE_DEVICES leaves usable: the
    zygote's answer to diffusers' import-time question, which touches neither CUDA nor NVML."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def cuda_device_count() -> int:
    """CUDA devices a process started here can use (after CUDA_VISIBLE_DEVICES); 0 without CUDA.

    NVML first: it answers without importing torch or opening a CUDA context, so the judge can
    pick the device before its first worker starts. torch only where NVML is missing."""
    count = nvml_device_count()
    if count is not None:
        return count
    if sys.platform.startswith("linux") and not os.path.exists("/proc/driver/nvidia"):
        return 0  # no NVIDIA driver loaded: no CUDA device, and no torch import to learn that
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def collect(device: str = "cpu") -> Fingerprint:
    """Fingerprint of the stack a run uses on `device` ("cpu", "cuda", "cuda:N").

    Raises RuntimeError when CUDA is requested but unavailable (a silent CPU fallback would
    record a CPU timing as a GPU one). Works without torch for "cpu" (torch fields empty).
    """
    dev = device.strip().lower()
    common: _Common = {
        "diffusers": _pkg_version("diffusers"),
        "python": platform.python_version(),
        "platform": platform.machine(),
        "cpu_model": _cpu_model(),
    }
    try:
        import torch
    except ImportError:
        torch = None  # type: ignore[assignment]

    if dev == "cpu":
        flags: _Flags = (
            _torch_flags(torch)
            if torch is not None
            else _Flags(tf32_matmul=False, tf32_cudnn=False, deterministic_algorithms=False,
                        cudnn_benchmark=False, cudnn_deterministic=False)
        )
        return Fingerprint(
            device_type="cpu",
            device_name=common["cpu_model"],
            compute_capability="",
            memory_gib=_ram_gib(),
            driver="",
            cuda="",
            torch=str(torch.__version__) if torch is not None else "",
            cudnn="",
            clocks=None,
            power_limit_w=None,
            **common,
            **flags,
        )

    if not dev.startswith("cuda"):
        raise ValueError(f"unsupported device {device!r}; use 'cpu', 'cuda' or 'cuda:N'")
    if torch is None or not torch.cuda.is_available():
        raise RuntimeError(f"device {device!r} requested but CUDA is not available")
    index = torch.device(dev).index
    if index is None:
        index = torch.cuda.current_device()
    try:
        props = torch.cuda.get_device_properties(index)
    except AssertionError:  # torch counts devices through NVML; CUDA saw them (is_available above)
        raise RuntimeError(f"device {device!r}: CUDA sees a GPU, but torch counts {torch.cuda.device_count()} "
                           f"through NVML and refuses index {index}: NVML cannot see this GPU from this process "
                           "(`dit-ar doctor` says whether the workers' sandbox is the cause)") from None
    nvml = _nvml_info(props, index)
    cudnn_version = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    cuda_flags = _torch_flags(torch)
    return Fingerprint(
        device_type="cuda",
        device_name=str(props.name),
        compute_capability=f"{props.major}.{props.minor}",
        memory_gib=round(props.total_memory / 2**30, 2),
        driver=nvml.driver,
        cuda=str(torch.version.cuda or ""),
        torch=str(torch.__version__),
        cudnn=str(cudnn_version) if cudnn_version else "",
        clocks=nvml.clocks,
        power_limit_w=nvml.power_limit_w,
        **common,
        **cuda_flags,
    )


# --------------------------------------------------------------------------- target


def on_target(fp: Fingerprint, profile: TargetProfile) -> bool:
    if profile.compute_capability is None:  # generic CPU profile
        return fp.device_type == "cpu"
    major, minor = profile.compute_capability
    return (
        fp.device_type == "cuda"
        and fp.compute_capability == f"{major}.{minor}"
        and profile.name_match.lower() in fp.device_name.lower()
    )


def target_header(fp: Fingerprint, profile: TargetProfile) -> str:
    """One line for reports: 'device=NVIDIA H200 (sm_90) target=a5500 (sm_86) OFF-TARGET'."""
    state = "ON-TARGET" if on_target(fp, profile) else "OFF-TARGET"
    return f"device={fp.device_name} ({fp.arch}) target={profile.name} ({profile.arch}) {state}"


# --------------------------------------------------------------------------- dtypes


def scan_module_dtypes(module: torch.nn.Module) -> set[str]:
    """dtype names ("torch.float16", ...) of a torch module's parameters and buffers."""
    dtypes = {str(p.dtype) for p in module.parameters()}
    dtypes.update(str(b.dtype) for b in module.buffers())
    return dtypes


def object_dtypes(candidate: object, depth: int = 3) -> set[str]:
    """Dtypes of every module parameter/buffer and tensor reachable from the built candidate.

    Walks attributes (and dict/list values) a few levels deep, so weights kept in a pipeline,
    a module or a plain dict of tensors are all seen.
    """
    import torch

    seen: set[int] = set()
    dtypes: set[str] = set()
    frontier = [candidate]
    for _ in range(depth + 1):
        nxt: list[object] = []
        for obj in frontier:
            if id(obj) in seen or obj is None or isinstance(obj, (str, bytes, int, float, bool)):
                continue
            seen.add(id(obj))
            if isinstance(obj, torch.Tensor):
                dtypes.add(str(obj.dtype))
            elif isinstance(obj, torch.nn.Module):
                dtypes.update(scan_module_dtypes(obj))
            elif isinstance(obj, dict):
                nxt.extend(obj.values())
            elif isinstance(obj, (list, tuple)):
                nxt.extend(obj)
            elif hasattr(obj, "__dict__") and not isinstance(obj, type):
                nxt.extend(vars(obj).values())
        frontier = nxt
    return dtypes
