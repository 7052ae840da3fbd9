"""Unit tests for pytest_ditar.hardware: fingerprint, target profiles, feature and roofline gates."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from pytest_ditar.hardware import fingerprint, profiles, roofline
from pytest_ditar.hardware.fingerprint import (
    Clocks,
    Fingerprint,
    collect,
    diff,
    on_target,
    scan_module_dtypes,
    target_header,
)
from pytest_ditar.hardware.profiles import PROFILES, check_features, get_profile
from pytest_ditar.hardware.roofline import flop_floor_seconds, roofline_check


def _cuda_fp(**over: object) -> Fingerprint:
    base = dict(
        device_type="cuda",
        device_name="NVIDIA RTX A5500",
        compute_capability="8.6",
        memory_gib=23.99,
        driver="580.159.03",
        cuda="13.0",
        torch="2.13.0",
        cudnn="91000",
        diffusers="0.42.1",
        python="3.11.7",
        platform="x86_64",
        cpu_model="AMD EPYC",
        clocks=Clocks(sm_max_mhz=1665, mem_max_mhz=8001),
        power_limit_w=230.0,
        tf32_matmul=False,
        tf32_cudnn=True,
        deterministic_algorithms=False,
        cudnn_benchmark=False,
        cudnn_deterministic=False,
    )
    base.update(over)
    return Fingerprint(**base)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- profiles


def test_profiles() -> None:
    a = get_profile("a5500")
    assert a.arch == "sm_86" and a.compute_capability == (8, 6)
    assert a.memory_gib == 24.0 and a.mem_bandwidth_gbs == 768.0
    assert a.dense_fp16_tflops == pytest.approx(136.4) and not a.fp8
    assert {"fp8", "fa3", "wgmma", "tma"} <= set(a.unsupported_features)
    assert "flash" in a.native_attention
    h = get_profile("H200")  # case-insensitive
    assert h.arch == "sm_90" and h.fp8 and h.dense_bf16_tflops == 779.0
    assert get_profile("cpu").peak_tflops is None
    assert set(PROFILES) == {"a5500", "h200", "cpu"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.memory_gib = 48.0  # type: ignore[misc]


def test_get_profile_unknown_lists_known_names() -> None:
    with pytest.raises(ValueError, match=r"unknown target profile 'h100'.*a5500, cpu, h200"):
        get_profile("h100")


# --------------------------------------------------------------------------- fingerprint


def test_collect_cpu_round_trips_through_dict() -> None:
    fp = collect("cpu")
    assert fp.device_type == "cpu"
    assert fp.compute_capability == "" and fp.arch == "cpu"
    assert fp.python.count(".") == 2
    assert fp.torch  # torch is installed in the dev venv
    d = fp.to_dict()
    assert json.loads(json.dumps(d)) == d  # JSON-safe for the snapshot manifest
    assert Fingerprint.from_dict(d) == fp
    assert "cpu_model" in fp.comparable_key()


def test_from_dict_with_clocks_and_missing_keys() -> None:
    fp = _cuda_fp()
    d = json.loads(json.dumps(fp.to_dict()))
    assert d["clocks"] == {"sm_max_mhz": 1665, "mem_max_mhz": 8001}
    assert Fingerprint.from_dict({**d, "added_by_newer_writer": 1}) == fp
    del d["driver"]
    with pytest.raises(ValueError, match="missing keys: driver"):
        Fingerprint.from_dict(d)


def test_collect_rejects_unknown_and_unavailable_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="unsupported device"):
        collect("tpu")
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        collect("cuda")


def test_diff_lists_changed_keys() -> None:
    a = _cuda_fp()
    b = _cuda_fp(torch="2.14.1", clocks=Clocks(sm_max_mhz=1500, mem_max_mhz=8001))
    lines = diff(a, b)
    assert lines == ["torch: 2.13.0 -> 2.14.1", "clocks.sm_max_mhz: 1665 -> 1500"]
    assert diff(a, b, comparable_only=True) == ["torch: 2.13.0 -> 2.14.1"]
    assert diff(a, a) == []
    assert diff(a, _cuda_fp(clocks=None)) == [
        "clocks.sm_max_mhz: 1665 -> (none)",
        "clocks.mem_max_mhz: 8001 -> (none)",
    ]


def test_comparable_key() -> None:
    a = _cuda_fp()
    # Clocks and power limit are reported but do not block a comparison.
    assert a.comparable_key() == _cuda_fp(power_limit_w=200.0, clocks=None).comparable_key()
    assert a.comparable_key() != _cuda_fp(tf32_matmul=True).comparable_key()
    assert "cpu_model" not in a.comparable_key()


def test_import_does_not_import_torch() -> None:
    code = ("import sys, pytest_ditar.hardware.profiles, pytest_ditar.hardware.fingerprint, "
            "pytest_ditar.hardware.roofline; print('torch' in sys.modules)")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"


# --------------------------------------------------------------------------- on target


def test_off_target_header_on_cpu() -> None:
    fp = collect("cpu")
    a5500 = get_profile("a5500")
    assert not on_target(fp, a5500)
    header = target_header(fp, a5500)
    assert header.endswith("target=a5500 (sm_86) OFF-TARGET")
    assert header.startswith("device=")
    assert on_target(fp, get_profile("cpu"))


def test_on_target_needs_name_and_capability() -> None:
    a5500 = get_profile("a5500")
    assert on_target(_cuda_fp(), a5500)
    assert target_header(_cuda_fp(), a5500) == (
        "device=NVIDIA RTX A5500 (sm_86) target=a5500 (sm_86) ON-TARGET"
    )
    # Same architecture, different card: an RTX 3090 is sm_86 but not the target.
    assert not on_target(_cuda_fp(device_name="NVIDIA GeForce RTX 3090"), a5500)
    h200 = _cuda_fp(device_name="NVIDIA H200", compute_capability="9.0")
    assert target_header(h200, a5500) == (
        "device=NVIDIA H200 (sm_90) target=a5500 (sm_86) OFF-TARGET"
    )
    assert on_target(h200, get_profile("h200"))


# --------------------------------------------------------------------------- features


def test_check_features_catches_fp8_and_hopper_features() -> None:
    a5500 = get_profile("a5500")
    got = check_features(
        {"torch.float16", "torch.float8_e4m3fn", "float8_e5m2", "fa3", "wgmma", "flash"}, a5500
    )
    assert got == [
        "fa3 not supported on a5500 (sm_86)",
        "fp8 not supported on a5500 (sm_86): float8_e5m2, torch.float8_e4m3fn",
        "wgmma not supported on a5500 (sm_86)",
    ]
    assert check_features({"torch.float16", "torch.bfloat16", "flash"}, a5500) == []
    assert check_features({"torch.float8_e4m3fn", "fa3"}, get_profile("h200")) == []


def test_scan_module_dtypes_flags_fp8_weights() -> None:
    import torch

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(4, 4)
            self.w8 = torch.nn.Parameter(
                torch.zeros(4, 4, dtype=torch.float8_e4m3fn), requires_grad=False
            )
            self.register_buffer("scale", torch.ones(1, dtype=torch.bfloat16))

    dtypes = scan_module_dtypes(Tiny())
    assert dtypes == {"torch.float32", "torch.float8_e4m3fn", "torch.bfloat16"}
    violations = check_features(dtypes, get_profile("a5500"))
    assert len(violations) == 1 and violations[0].startswith("fp8 not supported on a5500")
    assert check_features(scan_module_dtypes(torch.nn.Linear(2, 2)), get_profile("a5500")) == []
    # torch.dtype objects work as well as names.
    assert check_features([torch.float8_e5m2], get_profile("a5500"))


# --------------------------------------------------------------------------- roofline


def test_flop_floor_seconds() -> None:
    assert flop_floor_seconds(3.8e12, 750.0) == pytest.approx(3.8e12 / 750e12)
    assert flop_floor_seconds(1.364e12, get_profile("a5500")) == pytest.approx(0.01)
    with pytest.raises(ValueError, match="no peak"):
        flop_floor_seconds(1e12, get_profile("cpu"))
    with pytest.raises(ValueError):
        flop_floor_seconds(1e12, 0.0)


def test_roofline_check_catches_impossible_time() -> None:
    msg = roofline_check(0.4e-3, 3.8e12, 750.0)
    assert msg is not None
    assert msg == (
        "reported 400 us is below the 5.07 ms floor for 3.8 TFLOP at 750 TFLOP/s: "
        "the timer is not measuring the work"
    )
    assert roofline_check(0.0, 3.8e12, 750.0) is not None


def test_roofline_check_accepts_possible_time() -> None:
    # DESIGN.md anchor: DiT-XL/2 forward at batch 16, 3.80 TFLOP, fp16 compiled 23.5 ms on H200.
    assert roofline_check(23.5e-3, 3.8e12, get_profile("h200")) is None
    # The same work on the A5500 cannot take less than ~27.9 ms.
    assert roofline_check(23.5e-3, 3.8e12, get_profile("a5500")) is not None
    assert roofline_check(30e-3, 3.8e12, get_profile("a5500")) is None


def test_module_all_is_exported() -> None:
    for module in (profiles, fingerprint, roofline):
        for name in module.__all__:
            assert hasattr(module, name), (module.__name__, name)


def test_the_floor_uses_the_card_the_run_is_on() -> None:
    """The FLOP floor's peak is the running card's profile, never the target's: an H100 (no
    profile) ran an honest 82.7 ms exact stack that the A5500's 136 TFLOP/s called a broken timer."""
    assert roofline.device_peak_tflops(_cuda_fp()) == pytest.approx(136.4)
    assert roofline.device_peak_tflops(_cuda_fp(device_name="NVIDIA H200", compute_capability="9.0")) == 779.0
    h100 = roofline.device_peak_tflops(_cuda_fp(device_name="NVIDIA H100 80GB HBM3", compute_capability="9.0"))
    assert h100 >= 989.0  # the H100 SXM's datasheet dense fp16 peak
    assert roofline_check(82.7e-3, 12.5e12, h100) is None
    assert roofline_check(1e-3, 12.5e12, h100) is not None  # a broken timer is still one
    assert roofline.device_peak_tflops(_cuda_fp(compute_capability="9.0")) > 136.4  # a name alone is not the card
