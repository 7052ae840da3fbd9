"""The judge's own folder for one process's workers, and the fixed place every sandbox sees them.

Every role (candidate, champion, twin, holdout baseline) is built alike: its code, scratch,
shared-memory buffer, log and compile-cache writes live in folders of one judge folder, named
by chance and never by role, and its sandbox shows them at the same fixed paths (`CODE`, `WORK`,
`IO`, `CACHE` under `BOX`). So nothing a worker can read (paths, `/proc/self/mountinfo`, its fds'
links, its environment) says which role it plays; the role lives in the judge alone.

The judge folder lies in /dev/shm where there is one: every sandbox mounts a /dev/shm of its own
over it, so no worker sees another's folders. It is named after the judge's pid, so a later
judge removes what a killed one left (`sweep`), and the judge removes its own at exit.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import re
import secrets
import shutil
import tempfile
from pathlib import Path

from pytest_ditar.runtime import proctree

BOX = "/run/ditar"  # /run is a tmpfs of each sandbox's own (runtime.hostview.masked)
CODE = f"{BOX}/code"  # the parent of the role's package, read-only
WORK = f"{BOX}/work"  # its scratch: working directory, TMPDIR
IO = f"{BOX}/io"  # its shared-memory buffer's folder
BUFFER = f"{IO}/arrays"
CACHE = f"{BOX}/cache"  # the compile cache, an overlay whose writes land in the judge's folder
PREFIX = "ditar-run-"
_NAME = re.compile(rf"^{PREFIX}(\d+)-")
_OURS: list[Path] = []


def base() -> str:
    """/dev/shm where there is one (memory, and hidden from every sandbox); else the temp directory."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


def judge_dir() -> Path:
    """This process's judge folder, made (after sweeping dead judges' folders) on first use."""
    if not _OURS:
        sweep()
        _OURS.append(Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=base())))
        atexit.register(remove)
    return _OURS[0]


def new(kind: str) -> Path:
    """A fresh folder of `kind` (code, work, io, logs, cache) in the judge folder, named by chance."""
    parent = judge_dir() / kind
    parent.mkdir(exist_ok=True)
    path = parent / secrets.token_hex(6)
    path.mkdir()
    return path


def hidden_outside_shm() -> tuple[str, ...]:
    """The judge folder where a sandbox does not hide it already (no /dev/shm): to be masked."""
    return () if base() == "/dev/shm" else (str(judge_dir()),)


def sweep(where: str | None = None) -> list[str]:
    """Remove the judge folders of processes that are gone (a killed or interrupted run's); returns them."""
    folder = where or base()
    gone = []
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            m = _NAME.match(name)
            if m and _gone(int(m.group(1)), os.path.join(folder, name)):
                shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
                gone.append(name)
    return gone


def _gone(pid: int, path: str) -> bool:
    """The judge that made `path` has ended: no such process, a zombie (killed, not yet reaped), or
    a later process that was given its pid."""
    if not proctree.pid_exists(pid):
        return True
    if not os.path.isdir("/proc"):  # nothing more to ask: it lives
        return False
    if proctree.started(pid) is None:
        return True
    try:
        return bool(proctree.started_after(pid, os.stat(path).st_mtime))
    except OSError:  # swept by another judge meanwhile
        return False


def remove() -> None:
    """The judge's own folder, at exit."""
    for path in _OURS:
        shutil.rmtree(path, ignore_errors=True)
    _OURS.clear()
