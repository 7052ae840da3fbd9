"""The worker's seccomp filter: system calls a candidate has no use for and could reach beyond its
sandbox with, refused with EPERM (issue 39).

The sandbox (runtime.sandbox) gives a worker its own PID, mount, network, IPC and UTS namespaces
and no capability. What namespaces do not cover is the kernel itself: tracing (ptrace),
another process's memory (process_vm_readv/writev), hardware counters and sampling of other
processes (perf_event_open), programs loaded into the kernel (bpf), a fault handler that stalls
the kernel at will (userfaultfd), the kernel's keyrings (keyctl, add_key, request_key), io_uring
(whose work the filter would not see), kernel modules and kexec, and namespaces of its own
(unshare, setns: a user namespace of its own gives it capabilities again). A classic BPF program
refuses those by number on the native architecture, every system call of another (32-bit)
architecture, and x86_64's x32 calls. It also refuses socket(2) of the AF_UNIX family (its
first argument, inspected): a read-only mount does not stop connect(2) to a socket file, and a
worker's network namespace stops only abstract names, so a Unix socket was a channel from a role
to a relay the agent runs, or to another role (issue 49). socketpair(2) stays (an unnamed pair
reaches nothing; multiprocessing's pipes use it). `unix_sockets=True` leaves socket(AF_UNIX) to a
multi-rank CUDA group, whose NCCL passes memory handles over Unix sockets (runtime.group), and to
any CUDA worker: the driver opens Unix sockets at cuInit and later (docs/trust.md). The
worker installs it on itself after it joined its sandbox and dropped its capabilities
(no_new_privs is set then), before any candidate code runs;
every thread and process it starts inherits it.

No pytest, git or torch here.
"""
from __future__ import annotations

import ctypes
import errno
import platform
import struct

# the numbers of the refused calls, per architecture (asm/unistd.h)
DENIED: dict[str, dict[str, int]] = {
    "x86_64": {"ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "perf_event_open": 298,
               "bpf": 321, "userfaultfd": 323, "keyctl": 250, "add_key": 248, "request_key": 249,
               "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "kexec_load": 246,
               "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
               "unshare": 272, "setns": 308},
    "aarch64": {"ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "perf_event_open": 241,
                "bpf": 280, "userfaultfd": 282, "keyctl": 219, "add_key": 217, "request_key": 218,
                "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "kexec_load": 104,
                "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106,
                "unshare": 97, "setns": 268},
}
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
SOCKET = {"x86_64": 41, "aarch64": 198}  # socket(2)
AF_UNIX = 1
_ARG0_LOW = 16  # seccomp_data.args[0]'s low word (little-endian; the kernel reads an int)
_X32_BIT = 0x40000000

_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(machine: str | None = None, unix_sockets: bool = False) -> bytes | None:
    """The filter for `machine` (this one's by default) as struct sock_filter[]; None where there
    is no table for it. `unix_sockets`: socket(AF_UNIX) allowed (a CUDA group's)."""
    machine = machine or platform.machine()
    if machine not in DENIED:
        return None
    refuse = _RET_ERRNO | errno.EPERM
    nrs = sorted(DENIED[machine].values())
    out = [_insn(_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
           _insn(_JEQ_K, 1, 0, _AUDIT_ARCH[machine]),
           _insn(_RET_K, 0, 0, refuse),  # another architecture's calls: none of a worker's
           _insn(_LD_W_ABS, 0, 0, 0)]  # seccomp_data.nr
    if machine == "x86_64":
        out += [_insn(_JGE_K, 0, 1, _X32_BIT), _insn(_RET_K, 0, 0, refuse)]
    if not unix_sockets:  # socket(AF_UNIX, ...): refused; socket of another family: allowed at once
        out += [_insn(_JEQ_K, 0, 4, SOCKET[machine]),
                _insn(_LD_W_ABS, 0, 0, _ARG0_LOW),
                _insn(_JEQ_K, 0, 1, AF_UNIX),
                _insn(_RET_K, 0, 0, refuse),
                _insn(_RET_K, 0, 0, _RET_ALLOW)]
    for i, nr in enumerate(nrs):  # a match jumps over the remaining tests and the allow to the refusal
        out.append(_insn(_JEQ_K, len(nrs) - i, 0, nr))
    out += [_insn(_RET_K, 0, 0, _RET_ALLOW), _insn(_RET_K, 0, 0, refuse)]
    return b"".join(out)


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def install(libc: ctypes.CDLL, unix_sockets: bool = False) -> str | None:
    """Install the filter on this thread (no_new_privs must be set); None on success, else why not."""
    prog = program(unix_sockets=unix_sockets)
    if prog is None:
        return f"no seccomp table for {platform.machine()}"
    fprog = _Fprog(len(prog) // 8, prog)
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        import os

        return f"prctl(PR_SET_SECCOMP) failed: {os.strerror(ctypes.get_errno())}"
    return None

