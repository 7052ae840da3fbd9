"""runtime.seccomp's filter, run by a small classic-BPF interpreter here (what a worker meets is
tests/adversarial/test_sandbox.py's): the refused calls, the allowed, another architecture's."""
import errno
import struct

import pytest

from pytest_ditar.runtime import seccomp

ALLOW, REFUSE = 0x7FFF0000, 0x00050000 | errno.EPERM
ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}


def run(prog: bytes, arch: int, nr: int) -> int:
    """What the kernel's seccomp would return for the call `nr` made under `arch`."""
    insns = [struct.unpack("=HBBI", prog[i:i + 8]) for i in range(0, len(prog), 8)]
    data = struct.pack("=iI", nr, arch)  # seccomp_data: nr, arch
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
