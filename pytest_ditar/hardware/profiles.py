"""Hardware fingerprint and target profiles.

Timing comparisons only mean something between runs on the same stack, and the product is
judged on one target (RTX A5500, sm_86). This module records what a run ran on, says whether
that was the target, rejects features the target lacks, and sanity-checks measured times
against the card's FLOP ceiling.

torch (and pynvml) are imported lazily inside functions: the CLI, config checks and report
code import this module on machines without torch.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from types import MappingProxyType
from typing import Any

__all__ = [
    "TargetProfile",
    "PROFILES",
    "get_profile",
    "Clocks",
    "Fingerprint",
    "collect",
    "diff",
    "on_target",
    "target_header",
    "check_features",
    "scan_module_dtypes",
    "flop_floor_seconds",
    "roofline_check",
]


# --------------------------------------------------------------------------- target profiles


@dataclass(frozen=True)
class TargetProfile:
    name: str
    arch: str  # "sm_86"; "cpu" for the generic CPU profile
    compute_capability: tuple[int, int] | None
    memory_gib: float | None  # the VRAM budget the gate enforces
    mem_bandwidth_gbs: float | None
    dense_fp16_tflops: float | None  # tensor-core peak, fp32 accumulate, no sparsity
    dense_bf16_tflops: float | None
    tf32_tflops: float | None
    fp8: bool
    native_attention: tuple[str, ...]  # SDPA backends that are native on this card
    unsupported_features: tuple[str, ...]  # features that fail the gate when targeting it
    name_match: str  # substring of the CUDA device name that identifies the card
    source: str  # where the figures come from (datasheet vs measured)

    @property
    def peak_tflops(self) -> float | None:
        """Best dense half-precision peak: the most lenient (hence safe) FLOP floor."""
        peaks = [p for p in (self.dense_fp16_tflops, self.dense_bf16_tflops) if p]
        return max(peaks) if peaks else None


_A5500 = TargetProfile(
    name="a5500",
    arch="sm_86",
    compute_capability=(8, 6),
    memory_gib=24.0,
    mem_bandwidth_gbs=768.0,
    # GA102, 80 SMs x 1665 MHz boost x 1024 dense FP16 FLOP/clk/SM = 136.4 TFLOP/s. The
    # datasheet's "272.8 TFLOPS tensor" is the 2:4-sparse figure. Workstation Ampere runs
    # FP16/BF16 with FP32 accumulate at full rate (GeForce halves it). TF32 is half rate.
    dense_fp16_tflops=136.4,
    dense_bf16_tflops=136.4,
    tf32_tflops=68.2,
    fp8=False,
    native_attention=("flash", "efficient", "cudnn", "math"),
    # FP8/FP4 tensor cores, FA3/FA4, wgmma and TMA are Hopper/Blackwell-only.
    unsupported_features=("fp8", "fp4", "fa3", "fa4", "wgmma", "tma"),
    name_match="A5500",
    source="RTX A5500 datasheet (10240 CUDA / 320 tensor cores, 1665 MHz, 768 GB/s), "
    "dense = sparse/2",
)

_H200 = TargetProfile(
    name="h200",
    arch="sm_90",
    compute_capability=(9, 0),
    # 141 GB HBM3e; torch reports 139.8 GiB total on the H200 here.
    memory_gib=139.8,
    # Measured on this project's H200 (DESIGN.md anchors): 8192^3 matmul 750 fp16 / 779
    # bf16 TFLOP/s, device copy 4.2 TB/s. The datasheet peaks (989 TFLOP/s, 4.8 TB/s) are
    # not reachable, and a floor from them would be too lenient.
    mem_bandwidth_gbs=4200.0,
    dense_fp16_tflops=750.0,
    dense_bf16_tflops=779.0,
    tf32_tflops=494.0,  # datasheet dense TF32; not measured here
    fp8=True,
    native_attention=("flash", "efficient", "cudnn", "math", "fa3"),
    unsupported_features=("fp4", "fa4"),
    name_match="H200",
    source="measured here (torch 2.11): matmul 8192^3, device copy; TF32 from datasheet",
)

_CPU = TargetProfile(
    name="cpu",
    arch="cpu",
    compute_capability=None,
    memory_gib=None,
    mem_bandwidth_gbs=None,
    dense_fp16_tflops=None,
    dense_bf16_tflops=None,
    tf32_tflops=None,
    fp8=False,
    native_attention=("math",),
    unsupported_features=(),
    name_match="",
    source="generic CPU: no peak figures, no roofline floor",
)

PROFILES: Mapping[str, TargetProfile] = MappingProxyType(
    {p.name: p for p in (_A5500, _H200, _CPU)}
)


def get_profile(name: str) -> TargetProfile:
    key = name.strip().lower()
    try:
        return PROFILES[key]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise ValueError(f"unknown target profile {name!r}; known profiles: {known}") from None


# --------------------------------------------------------------------------- fingerprint


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

    def to_dict(self) -> dict[str, Any]:
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

    def comparable_key(self) -> dict[str, Any]:
        """The fields that must match for two timings to be compared at all."""
        key: dict[str, Any] = {
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


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _show(v: Any) -> str:
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


def _nvml_info(props: Any, index: int) -> _NvmlInfo:
    """Driver, max clocks and power limit from NVML; empty when NVML is absent or fails."""
    try:
        import pynvml  # type: ignore[import-not-found]
    except Exception:
        return _NvmlInfo(driver=_driver_from_proc())
    try:
        pynvml.nvmlInit()
    except Exception:
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
            except Exception:
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
            except Exception:
                clocks = None
            try:
                power = pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0
            except Exception:
                power = None
        return _NvmlInfo(driver=driver, clocks=clocks, power_limit_w=power)
    except Exception:
        return _NvmlInfo(driver=_driver_from_proc())
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _torch_flags(torch: Any) -> dict[str, bool]:
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


def collect(device: str = "cpu") -> Fingerprint:
    """Fingerprint of the stack a run uses on `device` ("cpu", "cuda", "cuda:N").

    Raises RuntimeError when CUDA is requested but unavailable (a silent CPU fallback would
    record a CPU timing as a GPU one). Works without torch for "cpu" (torch fields empty).
    """
    dev = device.strip().lower()
    common = {
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
        flags = (
            _torch_flags(torch)
            if torch is not None
            else dict.fromkeys(
                ("tf32_matmul", "tf32_cudnn", "deterministic_algorithms",
                 "cudnn_benchmark", "cudnn_deterministic"),
                False,
            )
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
    props = torch.cuda.get_device_properties(index)
    nvml = _nvml_info(props, index)
    cudnn_version = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
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
        **_torch_flags(torch),
    )


# --------------------------------------------------------------------------- target checks


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


def _feature_of(name: str) -> str:
    """Map a dtype or feature name to the feature it needs ("torch.float8_e4m3fn" -> "fp8")."""
    n = name.strip().lower().removeprefix("torch.")
    if n.startswith("float8") or n.startswith("fp8"):
        return "fp8"
    if n.startswith("float4") or n.startswith(("fp4", "nvfp4", "mxfp4")):
        return "fp4"
    return n


def check_features(requested: Iterable[Any], profile: TargetProfile) -> list[str]:
    """Violations for features/dtypes the target lacks; [] when all are supported.

    Accepts feature names ("fa3", "wgmma"), dtype names ("float8_e4m3fn") or torch.dtype
    objects (str() gives "torch.float8_e4m3fn").
    """
    by_feature: dict[str, list[str]] = {}
    for item in requested:
        name = str(item)
        feature = _feature_of(name)
        if feature in profile.unsupported_features or (feature == "fp8" and not profile.fp8):
            by_feature.setdefault(feature, []).append(name)
    lines = []
    for feature, names in sorted(by_feature.items()):
        line = f"{feature} not supported on {profile.name} ({profile.arch})"
        shown = sorted(set(names) - {feature})  # "fa3: fa3" says nothing
        lines.append(f"{line}: {', '.join(shown)}" if shown else line)
    return lines


def scan_module_dtypes(module: Any) -> set[str]:
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
        nxt = []
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



# --------------------------------------------------------------------------- roofline


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
