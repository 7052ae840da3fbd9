"""The sandbox of every process that runs candidate or champion code (bubblewrap).

A worker sees the whole filesystem read-only: the repository and its `.git`, the state
directory, the champion's worktree, the virtual environment, the model cache, except the host's
temporary folders (`/tmp`, `/var/tmp`) and the user's home: each sandbox has empty ones of its own
(writable, gone with it, as a fresh machine's: a library that ignores TMPDIR still works), with
only what the worker reads from the host's bound back read-only (its interpreter's paths, its
model, the project: Spec.reads), so no role sees what other processes (the judge's other runs,
other jobs, the agent) leave there or when. Every host folder it sees is shown through an overlay
of its own where the kernel allows (shield_plan), so a FIFO the agent made is not the agent's pipe
there, and its seccomp filter refuses socket(AF_UNIX) (runtime.seccomp). It may write only
what its Spec names: its private scratch directory (its working directory and TMPDIR), the
folder of its shared-memory buffer and, on the champion's side, the tag's compile cache. The
candidate sees that cache through an overlay whose writes land in a folder of the judge's outside
its view (or, where overlays cannot be mounted, that folder alone): the champion's cache is never
writable by it, and the judge adds what it compiled only once it is kept (runtime.compiled). It
has a PID namespace of its own (its `/proc` shows only its own processes: no judge, no sibling,
nothing to signal), no network (a loopback only), a `/dev` with the basic nodes plus the device
nodes its lane needs (`/dev/nvidia*` for CUDA), private IPC and a private `/dev/shm`.

How a process gets in: `enter(spec)`, in a single-threaded process (a fork of the zygote, or a
fresh interpreter running this module), starts bwrap with a placeholder as the sandbox's PID 1,
joins its namespaces with setns(2) (user first, then mount, IPC, UTS, network, PID), and forks:
the child is in the sandbox's PID namespace, drops every capability (bounding set, ambient,
effective, permitted, no_new_privs) and returns to run the worker; the parent stays outside as
its keeper, waits for it, ends the sandbox and exits with the child's status (the same signal
when it was killed). So the zygote's fork path keeps its imports, each worker still gets its own
mounts, and the judge's signals keep working: the keeper, bwrap, the placeholder and the worker
are one process group in the judge's view (SIGSTOP/SIGCONT/SIGKILL of the group reach them all;
the kernel delivers SIGKILL and SIGSTOP to a namespace's PID 1 from an ancestor namespace).
File descriptors opened before entering (the socket to the judge, the log) keep working: they
are the only ways out, and the child closes every other one.

The mount plan and the Spec it is made from: runtime.sandbox_mounts; whether a sandbox can be
made here (`check()`, and the bwrap binary): runtime.sandbox_check, whose probe runs this module
with `--probe`. Linux only; nothing here is imported by the judge's other code paths on macOS.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from typing import Callable, Sequence

from pytest_ditar.runtime import seccomp
from pytest_ditar.runtime.sandbox_mounts import Spec, argv

# clone(2) flags, in the order setns(2) joins them: the user namespace first (it grants the
# capabilities the other joins need), the PID namespace last (it applies to children only).
_NAMESPACES = (("user", 0x10000000), ("mnt", 0x00020000), ("ipc", 0x08000000), ("uts", 0x04000000),
               ("net", 0x40000000), ("pid", 0x20000000))
_PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 24, 38, 47, 4
_CAP_VERSION_3 = 0x20080522
READY_TIMEOUT_S = 60.0  # bwrap and the placeholder's interpreter on a cold, busy host


class SandboxError(OSError):
    """The sandbox could not be made or entered."""




# ---- entering: in the process that will run the worker -----------------------------------------------------

def enter(spec: Spec, cwd: str | None = None, keep_fds: Sequence[int] = ()) -> list[int]:
    """Move this (single-threaded) process's work into a sandbox made from `spec`. Returns in the
    sandboxed child, with `spec.cwd` (else `cwd`) as its working directory and only fds 0-2 and
    `keep_fds` open, renumbered from 3 in their order (the new numbers are returned: every role's
    worker holds the same fds); the caller's own process becomes the child's keeper and never returns."""
    cwd = spec.cwd or cwd or os.getcwd()
    libc = ctypes.CDLL(None, use_errno=True)
    info_r, info_w = os.pipe()
    ready_r, ready_w = os.pipe()
    hold_r, hold_w = os.pipe()
    errors = tempfile.TemporaryFile()  # bwrap's stderr: a file, so a late warning never meets a closed pipe
    try:
        box = subprocess.Popen(argv(spec, info_w), pass_fds=[info_w], stdin=hold_r, stdout=ready_w, stderr=errors,
                               close_fds=True)
    except OSError as exc:
        raise SandboxError(f"cannot run {spec.bwrap}: {exc}") from None
    for fd in (info_w, ready_w, hold_r):
        os.close(fd)

    def fail(what: str) -> SandboxError:
        with contextlib.suppress(OSError):
            os.close(hold_w)
        with contextlib.suppress(Exception):
            box.kill()
            box.wait(timeout=10)
        errors.seek(0)
        said = errors.read().decode(errors="replace").strip().splitlines()
        return SandboxError(f"{what}: {said[-1]}" if said else what)

    if not select.select([ready_r], [], [], READY_TIMEOUT_S)[0] or os.read(ready_r, 1) != b"r":
        raise fail("bwrap failed")
    _join_namespaces(libc, info_r, fail)
    for fd in (info_r, ready_r):
        os.close(fd)
    os.chdir(cwd)  # joining the mount namespace put us at its root
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()  # the sandbox's PID namespace's first process after its PID 1
    if child == 0:
        return _sandboxed_child(libc, spec, keep_fds)
    _keep(child, box, hold_w)
    raise AssertionError("the keeper never returns")  # _keep exits



def _join_namespaces(libc: ctypes.CDLL, info_r: int, fail: Callable[[str], SandboxError]) -> None:
    """Join the namespaces of the sandbox's PID 1 (bwrap's --info-fd names it)."""
    try:
        pid1 = int(_read_json(info_r)["child-pid"])
        ns = {name: os.open(f"/proc/{pid1}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC) for name, _ in _NAMESPACES}
    except (OSError, ValueError, KeyError) as exc:
        raise fail(f"cannot find the sandbox's namespaces ({exc})") from None
    for name, flag in _NAMESPACES:
        if libc.setns(ns[name], flag) != 0:
            raise fail(f"cannot join the sandbox's {name} namespace: {os.strerror(ctypes.get_errno())}")
    for fd in ns.values():
        os.close(fd)


def _sandboxed_child(libc: ctypes.CDLL, spec: Spec, keep_fds: Sequence[int]) -> list[int]:
    """The sandbox's child, before any candidate code: only its fds (renumbered from 3, returned), no
    capabilities, the seccomp filter, death with its keeper, the spec's environment."""
    _close_fds_but({0, 1, 2, *keep_fds})
    fds = _renumber(list(keep_fds))
    _drop_capabilities(libc)
    if seccomp.install(libc, spec.unix_sockets) is not None:
        os._exit(121)  # never run candidate code without the filter (the selftest said why first)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: dies with its keeper
    os.environ.update(spec.env)
    tempfile.tempdir = None  # chosen afresh from TMPDIR (its scratch), not the keeper's cached /tmp
    return fds

def _renumber(fds: list[int]) -> list[int]:
    """Move `fds` to 3, 4, ... in their order, parked above them all first so none is overwritten."""
    top = max([*fds, 2]) + 1
    parked = [os.dup2(fd, top + i, inheritable=True) for i, fd in enumerate(fds)]
    for fd in fds:
        os.close(fd)
    moved = [os.dup2(fd, 3 + i, inheritable=True) for i, fd in enumerate(parked)]
    for fd in parked:
        if fd not in moved:
            os.close(fd)
    return moved


def _read_json(fd: int) -> dict:
    """bwrap's --info-fd object (it may come in more than one read)."""
    raw = b""
    while True:
        if not select.select([fd], [], [], READY_TIMEOUT_S)[0]:
            raise ValueError("no sandbox info from bwrap")
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return json.loads(raw.decode())
        raw += chunk
        with contextlib.suppress(ValueError):
            return json.loads(raw.decode())


def _keep(child: int, box: subprocess.Popen, hold_w: int) -> None:
    """The keeper: wait for the sandboxed child, end the sandbox, exit as the child did."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _close_fds_but({0, 1, 2, hold_w})
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    os.close(hold_w)  # the placeholder reads EOF and exits: the namespaces go with it
    with contextlib.suppress(Exception):
        box.wait(timeout=10)
    with contextlib.suppress(Exception):
        box.kill()
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
            signal.signal(sig, signal.SIG_DFL)
        with contextlib.suppress(OSError, ValueError):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def _close_fds_but(keep: set[int]) -> None:
    """Close every fd but `keep` (close_range: no /proc needed, which the keeper cannot read)."""
    low = 0
    for fd in sorted(keep):
        if fd > low:
            os.closerange(low, fd)
        low = max(low, fd + 1)
    os.closerange(low, os.sysconf("SC_OPEN_MAX") if os.sysconf("SC_OPEN_MAX") > 0 else 1 << 20)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_capabilities(libc: ctypes.CDLL) -> None:
    """No capability left, now or after an exec (joining the user namespace gave all of them)."""
    try:
        last = int(open("/proc/sys/kernel/cap_last_cap").read())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    if libc.capset(ctypes.byref(_CapHeader(_CAP_VERSION_3, 0)), (_CapData * 2)()) != 0:
        os._exit(121)  # never run candidate code with capabilities
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        os._exit(121)
    with open("/proc/self/status") as fh:
        eff = next((line.split()[1] for line in fh if line.startswith("CapEff:")), "")
    if eff.strip("0"):
        os._exit(121)


def _probe_inside(spec: Spec, outside: str, judge: int) -> int:
    """Runs in the probe's sandboxed child: every wall a worker relies on, from inside."""
    try:
        with open(os.path.join(outside, "planted"), "w") as fh:
            fh.write("x")
        print(f"a write to {outside} was not refused")
        return 1
    except OSError:
        pass
    with contextlib.suppress(OSError):  # its parent: the sandbox's own /tmp where the host's is; never the host's
        with open(os.path.join(os.path.dirname(outside), "planted"), "w") as fh:
            fh.write("x")
    with open(os.path.join(spec.writable[0], "ok"), "w") as fh:  # its scratch is writable
        fh.write("x")
    with open(os.path.join(spec.private[0], "ok"), "w") as fh:  # its private cache too, and it stays private
        fh.write("x")
    if os.getppid() != 0 or any(p.isdigit() and int(p) > 64 for p in os.listdir("/proc")):
        print("the sandbox's /proc shows processes outside it")
        return 1
    try:
        os.kill(judge, 0)
        print("the judge's process is reachable from inside the sandbox")
        return 1
    except ProcessLookupError:
        pass
    return 0


def _moved(arg: str, moved: dict[int, int]) -> str:
    """An fd argument ("7", or "7,8" for a group's) with each kept fd's number inside the sandbox."""
    parts = arg.split(",")
    if not all(p.isdigit() for p in parts):
        return arg
    return ",".join(str(moved.get(int(p), int(p))) for p in parts)


def main(args: list[str]) -> int:
    """`python -m pytest_ditar.runtime.sandbox SPEC [--keep FD,..] -m MODULE ARGS...`: run MODULE
    (as __main__, with ARGS) inside the sandbox SPEC, the fds FD,.. kept open; `--probe SPEC
    OUTSIDE JUDGE`: check() in a fresh process."""
    import runpy

    if args[0] == "--probe":
        spec = Spec.from_dict(json.loads(args[1]))
        try:
            enter(spec)
        except OSError as exc:
            print(exc)
            return 1
        return _probe_inside(spec, args[2], int(args[3]))
    spec, rest, keep = Spec.from_dict(json.loads(args[0])), args[1:], []
    if rest[:1] == ["--keep"]:
        keep, rest = [int(a) for a in rest[1].split(",") if a], rest[2:]
    if rest[:1] != ["-m"] or len(rest) < 2:
        raise SystemExit("usage: python -m pytest_ditar.runtime.sandbox SPEC [--keep FD,..] -m MODULE ARGS...")
    try:
        moved = dict(zip(keep, enter(spec, keep_fds=keep)))
    except OSError as exc:
        print(f"sandbox: {exc}", file=sys.stderr)
        return 120
    # the module's fd arguments follow their fds (a worker's socket: 3, whatever its number outside)
    sys.argv = [rest[1], *(_moved(a, moved) for a in rest[2:])]
    runpy.run_module(rest[1], run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
