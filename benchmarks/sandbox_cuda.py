"""Whether CUDA initializes inside a worker's sandbox, and which of the sandbox's walls stops it
where it does not: each variant enters a sandbox built as a CUDA worker's (runtime.sandbox_mounts.Spec with
the /dev/nvidia* nodes, the host's folders shielded, an empty $HOME, /run masked, socket(AF_UNIX)
refused) less one wall, then loads the driver (cuInit) and asks torch. "unix_sockets" is what a CUDA
worker gets since this found cuInit failing without it (runtime.sandbox_mounts.unix_sockets_needed).

    python benchmarks/sandbox_cuda.py            # on a GPU machine: one JSON line per variant
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
VARIANTS = ("worker", "unix_sockets", "no_shield", "no_mask", "no_home", "bare")


def inside() -> dict:
    """What CUDA says in this process."""
    import ctypes

    out: dict = {"dev": sorted(n for n in os.listdir("/dev") if n.startswith("nvidia")),
                 "proc_driver": os.path.exists("/proc/driver/nvidia/version"),
                 "ld_library_path": os.environ.get("LD_LIBRARY_PATH", ""), "home": os.environ.get("HOME")}
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        out["cuInit"] = lib.cuInit(0)
        count = ctypes.c_int(0)
        out["cuDeviceGetCount"] = [lib.cuDeviceGetCount(ctypes.byref(count)), count.value]
    except OSError as exc:
        out["libcuda"] = str(exc)
    try:
        import torch

        out["torch_available"] = torch.cuda.is_available()
        torch.cuda.init()
        out["torch_devices"] = torch.cuda.device_count()
    except Exception as exc:  # noqa: BLE001 - the diagnosis
        out["torch_error"] = f"{type(exc).__name__}: {exc}"[:500]
    try:
        import pynvml

        pynvml.nvmlInit()
        out["nvml_devices"] = pynvml.nvmlDeviceGetCount()
    except Exception as exc:  # noqa: BLE001 - the diagnosis
        out["nvml_error"] = f"{type(exc).__name__}: {exc}"[:200]
    import socket

    try:
        socket.socket(socket.AF_UNIX).close()
        out["unix_socket"] = "made"
    except OSError as exc:
        out["unix_socket"] = exc.strerror
    with open("/proc/self/maps") as fh:
        out["libcuda_path"] = sorted({ln.split()[-1] for ln in fh if "libcuda" in ln})
    return out


def enter(variant: str) -> None:
    from pytest_ditar.runtime import hostview, sandbox, sandbox_check, sandbox_mounts

    if variant in ("no_mask", "bare"):
        sandbox_mounts.masked = lambda: []  # type: ignore[assignment]
    if variant in ("no_home", "bare"):
        sandbox_mounts.homes = lambda: ()  # type: ignore[assignment]
    bwrap, why = sandbox_check.find_bwrap()
    if bwrap is None:
        print(json.dumps({"variant": variant, "error": why}))
        return
    spec = sandbox_mounts.Spec(bwrap=bwrap, devices=sandbox_mounts.device_nodes("cuda"), reads=hostview.needed_reads(),
                        unix_sockets=variant in ("unix_sockets", "bare"),
                        shield=variant not in ("no_shield", "bare"), cwd=str(ROOT))
    try:
        sandbox.enter(spec)
    except Exception as exc:  # noqa: BLE001 - the diagnosis
        print(json.dumps({"variant": variant, "error": f"enter: {exc}"}), flush=True)
        return
    print(json.dumps({"variant": variant, **inside()}), flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--enter", choices=VARIANTS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.enter:
        enter(args.enter)
        return 0
    print(json.dumps({"variant": "host", **inside()}), flush=True)
    for v in VARIANTS:
        res = subprocess.run([sys.executable, __file__, "--enter", v], capture_output=True, text=True, timeout=120)
        print(res.stdout.strip() or json.dumps({"variant": v, "rc": res.returncode, "stderr": res.stderr[-800:]}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
