"""Target profiles: the cards the product is judged on, and the features each one lacks.

The product is judged on one target (RTX A5500, sm_86). A profile holds the figures other
modules check against (VRAM budget, peak TFLOP/s for the roofline floor) and the features the
card cannot run, so a candidate holding FP8 weights fails the gate on sm_86. What a run actually
ran on is hardware.fingerprint; the FLOP floor is hardware.roofline.

No torch import here: the CLI, config checks and report code use profiles without it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = [
    "TargetProfile",
    "PROFILES",
    "get_profile",
    "check_features",
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


# --------------------------------------------------------------------------- features


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
