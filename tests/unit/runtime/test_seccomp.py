"""runtime.seccomp's filter, run by a small classic-BPF interpreter here (what a worker meets is
tests/adversarial/test_sandbox.py's): the refused calls, the allowed, another architecture's."""
import errno
import struct

import pytest

from pytest_ditar.runtime import seccomp

ALLOW, REFUSE = 0x7FFF0000, 0x00050000 | errno.EPERM
ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}


def run(prog: bytes, arch: int, nr: int, arg0: int = 0) -> int:
    """What the kernel's seccomp would return for the call `nr` made under `arch` with first
    argument `arg0`."""
    insns = [struct.unpack("=HBBI", prog[i:i + 8]) for i in range(0, len(prog), 8)]
    data = struct.pack("=iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)  # seccomp_data: nr, arch, ip, args
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:
            acc = struct.unpack("=I", data[k:k + 4])[0]
        elif code == 0x06:
            return k
        elif code in (0x15, 0x35):
            hit = acc == k if code == 0x15 else acc >= k
            pc += jt if hit else jf
        else:
            raise AssertionError(f"unknown instruction {code:#x}")
        pc += 1


@pytest.mark.parametrize("machine", sorted(seccomp.DENIED))
def test_every_listed_call_is_refused_and_the_rest_allowed(machine):
    prog = seccomp.program(machine)
    table = seccomp.DENIED[machine]
    for name, nr in table.items():
        assert run(prog, ARCH[machine], nr) == REFUSE, name
    refused = set(table.values())
    for nr in range(0, 460):
        if nr not in refused:
            assert run(prog, ARCH[machine], nr) == ALLOW, nr
    other = next(a for m, a in ARCH.items() if m != machine)
    assert run(prog, other, 0) == REFUSE  # another architecture's calls: none of a worker's


def test_x32_calls_are_refused_on_x86_64():
    prog = seccomp.program("x86_64")
    assert run(prog, ARCH["x86_64"], 0x40000000 + 101) == REFUSE  # ptrace through the x32 ABI
    assert run(prog, ARCH["x86_64"], 0x40000000) == REFUSE


def test_an_architecture_without_a_table_has_no_filter():
    assert seccomp.program("riscv64") is None


SOCKETPAIR = {"x86_64": 53, "aarch64": 199}


@pytest.mark.parametrize("machine", sorted(seccomp.DENIED))
def test_a_unix_socket_is_refused_and_other_families_and_pairs_allowed(machine):
    prog, arch, nr = seccomp.program(machine), ARCH[machine], seccomp.SOCKET[machine]
    assert run(prog, arch, nr, arg0=1) == REFUSE  # socket(AF_UNIX): no path or abstract name to reach
    assert run(prog, arch, nr, arg0=(0xDEAD << 32) | 1) == REFUSE  # the kernel reads an int: the low word
    for family in (0, 2, 10, 16):  # AF_UNSPEC, AF_INET (the loopback), AF_INET6, AF_NETLINK
        assert run(prog, arch, nr, arg0=family) == ALLOW, family
    assert run(prog, arch, SOCKETPAIR[machine], arg0=1) == ALLOW  # an unnamed pair reaches nothing
    assert run(prog, arch, seccomp.DENIED[machine]["ptrace"], arg0=1) == REFUSE  # the table still applies


def test_a_cuda_group_keeps_unix_sockets():
    prog = seccomp.program("x86_64", unix_sockets=True)
    assert run(prog, ARCH["x86_64"], 41, arg0=1) == ALLOW
    assert run(prog, ARCH["x86_64"], 101) == REFUSE

