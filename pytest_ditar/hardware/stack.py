"""The software stack and device as `dit-ar doctor` reports them (torch is imported here, not in cli)."""
from __future__ import annotations

from pytest_ditar.hardware.fingerprint import collect, target_header
from pytest_ditar.hardware.profiles import get_profile


def stack_rows(target: str, ok: str, warn: str, fail: str) -> list[tuple[str, str, str]]:
    """(check, status, detail) rows: torch, diffusers, the device against the target, attention backends."""
    import importlib.metadata as md

    rows: list[tuple[str, str, str]] = []
    try:
        import torch

        rows.append(("torch", ok, torch.__version__))
    except ImportError as exc:
        return rows + [("torch", fail, str(exc))]
    try:
        v = md.version("diffusers")
        rows.append(("diffusers", ok if v.startswith("0.42") else warn, v))
    except md.PackageNotFoundError:
        rows.append(("diffusers", fail, "not installed"))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    fp = collect(device)
    profile = get_profile(target)
    header = target_header(fp, profile)
    rows.append(("device", ok if "ON-TARGET" in header else warn, header))
    if device == "cuda":
        b = torch.backends.cuda
        backends = [name for name, on in (("flash", b.flash_sdp_enabled()),
                                          ("efficient", b.mem_efficient_sdp_enabled()),
                                          ("cudnn", b.cudnn_sdp_enabled()), ("math", b.math_sdp_enabled())) if on]
        rows.append(("attention", ok, "SDPA backends enabled: " + ", ".join(backends)))
    else:
        rows.append(("attention", warn, "CPU: SDPA math/flash-cpu only; GPU backends unchecked"))
    return rows
