"""The judge's zygote: one clean process that imports the heavy libraries once and forks workers.

A fresh interpreter per worker pays Python, torch and diffusers imports every time (5 s of a
16 s candidate build on an H200 host; more on a busy CI box, three workers per gated run). The
zygote is started by the judge like a worker (a fresh interpreter, never a fork of the judge),
imports what every worker needs, and never touches CUDA, so a child forked from it shares no
CUDA state and no judge memory: the isolation of a spawned worker, at the start-up of a fork.

Linux only (fork after importing torch is not safe on macOS); anywhere else, and whenever the
zygote cannot be used, `CandidateWorker` spawns its interpreter directly.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Sequence, cast

from pytest_ditar.core.vocabulary import ENV_ZYGOTE, WIRE_MAX_MESSAGE

# -P (3.11+): the interpreter's working directory is not put on sys.path, so nothing planted there
# shadows a module; the worker puts the candidate package's parent there itself.
PYTHON_FLAGS: tuple[str, ...] = ("-P",) if sys.version_info >= (3, 11) else ()


class ZygoteChild:
    """A worker forked by the zygote, with the part of Popen's interface CandidateWorker uses."""

    def __init__(self, zygote: "Zygote", pid: int):
        self.zygote = zygote
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.zygote.status(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", cast(float, timeout))  # set with the deadline
            time.sleep(0.005)
        return code


class Zygote:
    def __init__(self) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # a session of its own, like each worker: nothing it forks is in the judge's session
        self.proc = subprocess.Popen([sys.executable, *PYTHON_FLAGS, "-m", "pytest_ditar.runtime.worker_main",
                                      "--zygote", str(child.fileno())], pass_fds=[child.fileno()],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        child.close()
        self.sock = parent
        self.lock = threading.Lock()
        self.imports_s: float | None = None  # its imports' seconds, told with its first worker

    def _ask(self, request: dict[str, Any], fds: Sequence[int] = ()) -> dict[str, Any]:
        with self.lock:  # workers are launched on threads of their own: one request in flight at a time
            socket.send_fds(self.sock, [json.dumps(request).encode()], list(fds))
            reply = self.sock.recv(WIRE_MAX_MESSAGE)
        if not reply:
            raise OSError("the zygote is gone")
        return json.loads(reply)

    def spawn(self, fds: Sequence[int], log_path: Path, cwd: Path | None, env: dict[str, str],
              sandbox: str | None = None, ranks: int = 0) -> ZygoteChild:
        """Fork a worker serving the socket fds[0], with `env` as its environment, inside the sandbox
        `sandbox` (a runtime.sandbox.Spec as JSON) where given (the first call waits for the
        zygote's imports); `ranks` > 0: a group's launcher (runtime.group), fds its ranks'
        sockets, then their logs."""
        reply = self._ask({"op": "spawn", "log": str(log_path), "cwd": str(cwd) if cwd else None, "env": env,
                           "sandbox": sandbox, "ranks": ranks}, fds)
        self.imports_s = reply.get("imports_s", self.imports_s)
        return ZygoteChild(self, int(reply["pid"]))

    def status(self, pid: int) -> int | None:
        """The worker's exit code (negative: killed by that signal), None while it runs."""
        try:
            return self._ask({"op": "status", "pid": pid}).get("code")
        except OSError:
            return -9  # the zygote died, so did its children (they die with their parent)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, 9)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


_ZYGOTE: list[Zygote | None] = []
_STARTING = threading.Lock()


def zygote() -> Zygote | None:
    """This judge's zygote, started on first use; None where it cannot serve (then spawn directly)."""
    with _STARTING:  # launcher threads may ask at the same time: one zygote per judge
        if not _ZYGOTE:
            z = None
            if sys.platform.startswith("linux") and os.environ.get(ENV_ZYGOTE, "1") != "0":
                with contextlib.suppress(OSError):
                    z = Zygote()
            _ZYGOTE.append(z)
        z = _ZYGOTE[0]
        if z is not None and z.proc.poll() is not None:
            _ZYGOTE[0] = z = None  # it died: spawn directly from now on
        return z


def imports_s() -> float | None:
    """How long this judge's zygote took to import torch and diffusers (None before its first worker)."""
    z = _ZYGOTE[0] if _ZYGOTE else None
    return z.imports_s if z is not None else None


def running_pid() -> int | None:
    """The zygote's pid if this judge started one (never starts it)."""
    z = _ZYGOTE[0] if _ZYGOTE else None
    return z.proc.pid if z is not None else None


def close() -> None:
    if _ZYGOTE and _ZYGOTE[0] is not None:
        _ZYGOTE[0].close()
        _ZYGOTE[0] = None
