"""A short, stable name for one machine's device stack: where its compiler caches live.

torch.compile's caches (Inductor's FX graph and AOT autograd caches, Triton's kernels) are only
worth sharing between processes that compile for the same device with the same libraries. The
judge names that stack before its first worker starts, so it cannot wait for the worker's
fingerprint (hardware.fingerprint.collect imports torch and opens a CUDA context): the key is
made from what the judge reads without either, the GPU's name and driver through NVML, the CPU
model, and the installed versions of torch, triton and Python.

The key only keeps unlike machines apart (a state directory on a shared disk, a driver upgrade):
Inductor and Triton key every entry on the device and versions themselves, so a key that is too
coarse costs a mixed folder, never a wrong kernel.
"""
from __future__ import annotations

import functools
import hashlib
import json
import platform
import re

from pytest_ditar.hardware.fingerprint import (
    _cpu_model,
    _driver_from_proc,
    _pkg_version,
    nvml_handle,
)

__all__ = ["device_key"]


def _gpu(index: int) -> tuple[str, str]:
    """(name, driver) of the torch device `cuda:index` through NVML; ("", driver from /proc)
    when NVML cannot say. CUDA_VISIBLE_DEVICES renumbers torch's devices, not NVML's."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML library or driver
        return "", _driver_from_proc()
    try:
        handle = nvml_handle(pynvml, index)
        name, driver = pynvml.nvmlDeviceGetName(handle), pynvml.nvmlSystemGetDriverVersion()
        return (name.decode() if isinstance(name, bytes) else str(name),
                driver.decode() if isinstance(driver, bytes) else str(driver))
    except Exception:  # noqa: BLE001 - an index NVML does not know, a failing query
        return "", _driver_from_proc()
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - nothing to release
            pass


@functools.cache
def device_key(device: str) -> str:
    """"cpu-1a2b3c4d5e" or "cuda-nvidia-h200-1a2b3c4d5e" for `device` ("cpu", "cuda", "cuda:N"):
    a readable prefix, then a hash of the device's name and driver, the CPU model, the machine
    and the torch, triton and Python versions. The same on every call on one machine and stack."""
    dev = device.strip().lower()
    kind = "cuda" if dev.startswith("cuda") else "cpu"
    facts = {"kind": kind, "cpu": _cpu_model(), "machine": platform.machine(), "python": platform.python_version(),
             "torch": _pkg_version("torch"), "triton": _pkg_version("triton")}
    prefix = kind
    if kind == "cuda":
        index = int(dev.split(":", 1)[1]) if ":" in dev and dev.split(":", 1)[1].isdigit() else 0
        facts["gpu"], facts["driver"] = _gpu(index)
        slug = re.sub(r"[^a-z0-9]+", "-", facts["gpu"].lower()).strip("-")[:40]
        prefix = f"cuda-{slug}" if slug else "cuda"
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:10]
    return f"{prefix}-{digest}"
