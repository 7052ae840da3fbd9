"""core is pure (docs/architecture.md): numbers and arrays in, verdicts out, no I/O. Beside
import-linter's `core-pure` (no package imports), this reads core's AST for the ways out of a
process: no `os`, `subprocess`, `shutil`, `socket`, `pathlib`, `io`, `sys` import, no `open(...)`
call, no `.read_text`/`.write_text`/`.read_bytes`/`.write_bytes`, no `/proc` or `/sys` path. The
clock (`time`) stays: a phase clock reads it and takes no input from outside the process."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
BANNED_MODULES = {"os", "subprocess", "shutil", "socket", "pathlib", "io", "sys", "tempfile", "glob"}
BANNED_METHODS = {"read_text", "write_text", "read_bytes", "write_bytes", "open", "unlink", "mkdir"}


def io_sites(source: str, name: str) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [f"{name}:{node.lineno} import {a.name}" for a in node.names
                    if a.name.split(".")[0] in BANNED_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in BANNED_MODULES:
            out.append(f"{name}:{node.lineno} from {node.module}")
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id == "open":
                out.append(f"{name}:{node.lineno} open(...)")
            elif isinstance(f, ast.Attribute) and f.attr in BANNED_METHODS:
                out.append(f"{name}:{node.lineno} .{f.attr}(...)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value.startswith(("/proc", "/sys/", "/dev/")):
            out.append(f"{name}:{node.lineno} {node.value!r}")
    return out


def test_core_does_no_io():
    found = [s for p in sorted((REPO / "pytest_ditar/core").rglob("*.py"))
             for s in io_sites(p.read_text(), str(p.relative_to(REPO)))]
    assert not found, "core does I/O (move it to runtime, hardware or store and pass the value in):\n" + \
        "\n".join(found)


def test_the_check_sees_each_way_out():
    planted = ('import os\nfrom pathlib import Path\nimport subprocess\n'
               'x = open("f")\ny = Path("a").read_text()\nz = "/proc/self/stat"\n')
    assert len(io_sites(planted, "planted.py")) == 6, io_sites(planted, "planted.py")
