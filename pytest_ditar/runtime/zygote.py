"""The judge's zygote: one clean process that imports the heavy libraries once and forks workers.

A fresh interpreter per worker pays Python, torch and diffusers imports every time (5 s of a
16 s candidate build on an H200 host; more on a busy CI box, three workers per gated run). The
zygote is started by the judge like a worker (a fresh interpreter, never a fork of the judge;
its process is runtime.zygote_serve), imports what every worker needs, and never touches CUDA,
so a child forked from it shares no CUDA state and no judge memory: the isolation of a spawned
worker, at the start-up of a fork.

Kept warm (issue 25). Those imports were still a gated run's critical path (6-12 s on a CPU, 13-16
s on an H200), so a sandboxed tag's zygote outlives its run and the next gated run forks from
it. Its image holds nothing of any run: it never runs candidate or champion code (each worker
runs in its own sandbox, in PID and network namespaces that cannot see or reach it), it is not
dumpable (no process of the user can ptrace it or write its memory), and it kills everything a
judge's workers left when that judge hangs up. A judge uses it only on the word of the state's
backup, never on its own: the run that started it writes its pid, start time and key into
`zygote.json`, which the record step backs up with the ledger row, and the next run reads that
file from the backup ref (`adopt`), then checks the live process against it (same start time,
command line and user, not traced), and the key against its own (interpreter, environment,
installed distributions, the package's files). Anything else (a zygote started by hand, one
whose key is stale, one busy with another judge) is not used: the run starts its own.

Linux only (fork after importing torch is not safe on macOS); anywhere else, and whenever the
zygote cannot be used, `CandidateWorker` spawns its interpreter directly.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Sequence, cast

import pytest_ditar
from pytest_ditar.core.vocabulary import ENV_ZYGOTE, ENV_ZYGOTE_IDLE, WIRE_MAX_MESSAGE, ZYGOTE_IDLE_S

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
    """The judge's connection to a zygote: one it started (`proc`), or one a recorded run handed
    over (`adopt`)."""

    def __init__(self, sock: socket.socket, pid: int, proc: subprocess.Popen | None = None,
                 kept: dict[str, Any] | None = None):
        self.sock = sock
        self.pid = pid
        self.proc = proc
        self.kept = kept  # the record a later run adopts it by (pid, start, key, name); None: this run's own
        self.adopted = proc is None
        self.handed = False  # named in the run record for the next run (handover)
        self.lock = threading.Lock()
        self.imports_s: float | None = 0.0 if self.adopted else None  # told with its first worker

    @classmethod
    def start(cls, keep_s: float = 0.0) -> "Zygote":
        """A new zygote; kept warm for `keep_s` seconds without a judge when > 0, else this run's own."""
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        key = daemon_key() if keep_s > 0 else None
        name = f"pytest-ditar/zygote/{os.getuid()}/{key}/{secrets.token_hex(6)}" if key else None
        argv = command(child.fileno(), name, keep_s)
        # a session of its own, like each worker: nothing it forks is in the judge's session
        proc = subprocess.Popen(argv, pass_fds=[child.fileno()], env=daemon_env() if key else None,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        child.close()
        kept = None
        if key:
            started = start_ticks(proc.pid)
            kept = {"pid": proc.pid, "start": started, "key": key, "name": name, "idle_s": keep_s}
        return cls(parent, proc.pid, proc, kept)

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return self.kept is not None and start_ticks(self.pid) == self.kept["start"]

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
        `sandbox` (a runtime.sandbox_mounts.Spec as JSON) where given (the first call waits for the
        zygote's imports); `ranks` > 0: a group's launcher (runtime.group), fds its ranks'
        sockets, then their logs."""
        reply = self._ask({"op": "spawn", "log": str(log_path), "cwd": str(cwd) if cwd else None, "env": env,
                           "sandbox": sandbox, "ranks": ranks}, fds)
        if self.imports_s is None:
            self.imports_s = float(reply.get("imports_s") or 0.0)
        return ZygoteChild(self, int(reply["pid"]))

    def status(self, pid: int) -> int | None:
        """The worker's exit code (negative: killed by that signal), None while it runs."""
        try:
            return self._ask({"op": "status", "pid": pid}).get("code")
        except OSError:
            return -9  # the zygote died, so did its children (they die with their parent)

    def close(self) -> None:
        """Hang up: a kept zygote then kills what this judge's workers left and waits for the next
        run; this run's own, and one it started but did not hand over (the run recorded nothing),
        is killed."""
        with contextlib.suppress(OSError):
            self.sock.close()
        if self.proc is None:
            return
        stays = self.kept is not None and self.handed
        if not stays:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, 9)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=0.01 if stays else 10)


# ---- keeping a zygote warm between runs ------------------------------------------------------
# what varies between two shells' identical runs and no import reads, and git's switches that
# `dit-ar experiment` sets for its own git (vcs.hardened.judge_env; the zygote runs no git): left out
_VOLATILE = ("PWD", "OLDPWD", "SHLVL", "_", "PS1", "PS2", "TERM", "COLORTERM", "COLUMNS", "LINES", "DISPLAY",
             "WINDOWID", "TMUX", "TMUX_PANE", "STY", "DBUS_SESSION_BUS_ADDRESS", "LS_COLORS", "MAIL",
             "HISTFILE", ENV_ZYGOTE_IDLE)
_VOLATILE_PREFIXES = ("PYTEST_", "SSH_", "XDG_SESSION_", "TERM_PROGRAM", "COV_CORE_", "GIT_")


def daemon_env() -> dict[str, str]:
    """The environment a kept zygote is started with: the judge's, less what only a shell sets."""
    return {k: v for k, v in os.environ.items()
            if k not in _VOLATILE and not k.startswith(_VOLATILE_PREFIXES)}


def command(fd: int, name: str | None, keep_s: float) -> list[str]:
    serve = ["--serve", name, "--idle", f"{keep_s:g}"] if name else []
    return [sys.executable, *PYTHON_FLAGS, "-m", "pytest_ditar.runtime.zygote_serve", "--zygote", str(fd), *serve]


def daemon_key() -> str:
    """What a kept zygote's image was made from, as this judge sees it now: the interpreter, the
    environment it is started with, the installed distributions (a pip install changes a name),
    and the judge's own package files (size and mtime: an edit moves them). A zygote of another
    key is stale and never used."""
    pkg = Path(pytest_ditar.__file__).resolve().parent
    files = sorted((str(f.relative_to(pkg)), f.stat().st_size, f.stat().st_mtime_ns) for f in pkg.rglob("*.py"))
    dists = sorted(e for d in _site_dirs() for e in os.listdir(d) if e.endswith((".dist-info", ".egg-info", ".pth")))
    blob = json.dumps({"exe": os.path.realpath(sys.executable), "version": sys.version, "flags": PYTHON_FLAGS,
                       "env": sorted(daemon_env().items()), "dists": dists, "package": str(pkg), "files": files})
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _site_dirs() -> list[str]:
    return sorted({p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and os.path.isdir(p)})


def start_ticks(pid: int) -> int | None:
    """The process's start time (clock ticks since boot, /proc/PID/stat field 22): with the pid,
    it names one process for the machine's uptime. None when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in (b"Z", b"X") else int(fields[19])


def _status(pid: int) -> dict[str, str]:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    return {k: v.strip() for k, _, v in (ln.partition(":") for ln in lines)}


def adoption_problem(rec: Mapping[str, Any], key: str) -> str | None:
    """Why the recorded zygote `rec` may not serve this judge (None: it may), from the machine's
    own account of the process, never the process's word."""
    try:
        pid = int(rec["pid"])
        int(rec["start"]), str(rec["name"])  # noqa: B018 - a record without them is no usable record
    except (KeyError, TypeError, ValueError):
        return "no usable record"
    if rec.get("key") != key:
        return "stale: the interpreter, environment, distributions or package changed"
    if start_ticks(pid) != int(rec["start"]):
        return "gone"
    other = not_ours(rec)
    if other:
        return other
    if start_ticks(pid) != int(rec["start"]):  # ended while its command line was read
        return "gone"
    st = _status(pid)
    if st.get("TracerPid", "0") != "0":
        return f"pid {pid} is being traced"
    return None


def not_ours(rec: Mapping[str, Any]) -> str | None:
    """Why the live process at the recorded pid is not this record's zygote (it runs something else,
    the user's other zygote say, or it is another user's), or None. Such a record was left behind:
    the run says nothing of it (issue 50), while one that is gone or stale is said."""
    pid, name = int(rec["pid"]), str(rec["name"])
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    except (OSError, UnicodeDecodeError):
        return None  # ended: adoption_problem says "gone"
    want = command(-1, name, float(rec.get("idle_s", 0)))
    fd_at = want.index("-1")  # the starting judge's socket: any number
    if len(argv) != len(want) or argv[:fd_at] + argv[fd_at + 1:] != want[:fd_at] + want[fd_at + 1:]:
        return f"pid {pid} runs something else"
    if set(_status(pid).get("Uid", "").split()) != {str(os.getuid())}:
        return f"pid {pid} is another user's"
    return None


def adopt(rec: Mapping[str, Any]) -> tuple[Zygote | None, str | None]:
    """The recorded zygote, connected, or None and why not."""
    key = daemon_key()
    problem = adoption_problem(rec, key)
    if problem:
        return None, problem
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.settimeout(5.0)
        sock.connect("\0" + str(rec["name"]))
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        peer, uid, _ = struct.unpack("3i", creds)
        if peer != int(rec["pid"]) or uid != os.getuid():
            raise OSError(f"the socket is held by pid {peer}")
        hello = sock.recv(WIRE_MAX_MESSAGE)
        if not hello:
            raise OSError("busy with another judge")
        sock.settimeout(None)
    except OSError as exc:
        sock.close()
        return None, str(exc)
    return Zygote(sock, int(rec["pid"]), kept={**rec}), None


def retire(rec: Mapping[str, Any]) -> bool:
    """End the kept zygote a run record names (`dit-ar demo` when its workspace goes): only the very
    process recorded (same pid, start time, this user's, serving that name); True when one was ended."""
    try:
        pid, start, name = int(rec["pid"]), int(rec["start"]), str(rec["name"])
    except (KeyError, TypeError, ValueError):
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except (OSError, UnicodeDecodeError):
        return False
    if start_ticks(pid) != start or name not in argv or set(_status(pid).get("Uid", "").split()) != {str(os.getuid())}:
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, 9)  # its own session (Zygote.start): the group is the zygote and what it forked
    return True


_ZYGOTE: list[Zygote | None] = []
_STARTING = threading.Lock()
_NOT_ADOPTED: list[str] = []  # why this judge did not use the recorded zygote


def _left_behind(rec: Mapping[str, Any]) -> bool:
    try:
        return start_ticks(int(rec["pid"])) == int(rec["start"]) and not_ours(rec) is not None
    except (KeyError, TypeError, ValueError):
        return False


def keep_seconds() -> float:
    """How long a zygote started now stays warm for the next run ($DITAR_ZYGOTE_IDLE_S; 0: not kept)."""
    try:
        return max(0.0, float(os.environ.get(ENV_ZYGOTE_IDLE, ZYGOTE_IDLE_S)))
    except ValueError:
        return ZYGOTE_IDLE_S


def _usable() -> bool:
    return sys.platform.startswith("linux") and os.environ.get(ENV_ZYGOTE, "1") != "0"


def begin(record: Mapping[str, Any] | None, keep: bool) -> None:
    """This judge's zygote, chosen once, early: the recorded one where it may serve (`record`, from
    the state's backup), else a new one, kept warm for the next run when `keep` (a sandboxed
    gated run) and $DITAR_ZYGOTE_IDLE_S > 0."""
    with _STARTING:
        if _ZYGOTE or not _usable():
            return
        z = None
        if record is not None:
            z, why = adopt(record)
            # a record whose pid runs no zygote of ours (the user's other tag's, a reused pid) was left
            # behind: the run says nothing of it (issue 50)
            if why and not _left_behind(record):
                _NOT_ADOPTED.append(why)
        if z is None:
            with contextlib.suppress(OSError):
                z = Zygote.start(keep_seconds() if keep else 0.0)
        _ZYGOTE.append(z)


def zygote() -> Zygote | None:
    """This judge's zygote, started on first use; None where it cannot serve (then spawn directly)."""
    with _STARTING:  # launcher threads may ask at the same time: one zygote per judge
        if not _ZYGOTE:
            z = None
            if _usable():
                with contextlib.suppress(OSError):
                    z = Zygote.start()
            _ZYGOTE.append(z)
        z = _ZYGOTE[0]
        if z is not None and not z.alive():
            _ZYGOTE[0] = z = None  # it died: spawn directly from now on
        return z


def imports_s() -> float | None:
    """How long this judge's zygote took to import torch and diffusers (None before its first
    worker; 0 for a warm one)."""
    z = _ZYGOTE[0] if _ZYGOTE else None
    return z.imports_s if z is not None else None


def state() -> str:
    """What the time line says of the zygote: "warm" (a recorded one), "kept" (started now, left
    warm for the next run), and why a recorded one was not used; "" for this run's own."""
    z = _ZYGOTE[0] if _ZYGOTE else None
    if z is not None and z.adopted:
        return "warm"
    said = ["kept for the next run"] if z is not None and z.kept is not None else []
    if _NOT_ADOPTED:
        said.append(f"the recorded zygote not used: {_NOT_ADOPTED[0]}")
    return "; ".join(said)


def handover() -> dict[str, Any] | None:
    """What the run record keeps for the next run to adopt this judge's zygote by; None when it is
    not kept or not alive."""
    z = _ZYGOTE[0] if _ZYGOTE else None
    if z is None or z.kept is None or not z.alive():
        return None
    z.handed = True
    return {k: z.kept[k] for k in ("pid", "start", "key", "name", "idle_s")}


def running_pid() -> int | None:
    """The zygote's pid if this judge has one (never starts it)."""
    z = _ZYGOTE[0] if _ZYGOTE else None
    return z.pid if z is not None else None


def close() -> None:
    if _ZYGOTE and _ZYGOTE[0] is not None:
        _ZYGOTE[0].close()
        _ZYGOTE[0] = None
