"""What one sandboxed process may touch (Spec) and bwrap's command line for it: the mount plan.

Every host folder the worker sees is read-only (through an overlay of its own where it shields:
hostview.shield_plan); the host's temporary folders and homes are empty ones of the sandbox's own,
with what the worker reads bound back; masks hide another role's paths; the spec's writable paths,
binds and private folders (an overlay or a tmpfs, its writes kept in a judge's folder where the spec
keeps them) go in last. runtime.sandbox enters the sandbox this plan makes.
"""
from __future__ import annotations

import glob
import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Sequence

from pytest_ditar.runtime.hostview import homes, masked, needed_reads, outermost, shield_plan, under

# The sandbox's PID 1: says it is up once bwrap has mounted everything, then holds the
# namespaces open until its keeper (the other end of its stdin) is gone.
_HOLD = "import os\nos.write(1, b'r')\nos.read(0, 1)\n"


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
                   shield=bool(d.get("shield", False)))


def unix_sockets_needed(device: str) -> bool:
    """Whether a worker on `device` needs socket(AF_UNIX) (runtime.seccomp): a CUDA one does. The
    driver opens Unix sockets at cuInit (CUDA_ERROR_OPERATING_SYSTEM, 304, when refused) and after it
    (a 4096^2 half-precision matmul failed with cudaErrorUnknown once the refusal came after torch's
    first CUDA call): H100 and H200, driver 580, benchmarks/sandbox_cuda.py."""
    return str(device).startswith("cuda")


def device_nodes(device: str) -> tuple[str, ...]:
    """The device nodes a lane on `device` needs: every /dev/nvidia* for CUDA (control, UVM, the
    GPUs, MIG capabilities), none on CPU."""
    if not str(device).startswith("cuda"):
        return ()
    return tuple(sorted(glob.glob("/dev/nvidia*")))


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

