"""Free disk space before a gated run, and the words for a disk that filled during one (issue 39).

A gated run writes its record (the run folder, worker logs each capped by runtime.logs, the
summary, the ledger row, its backup in git, the revert) on the project's disk. A run that starts
with less than NEED_BYTES free there is refused before anything is written; one whose disk fills
later (another process, a worker's scratch on the same disk) is refused at the write that failed,
the state it began with left whole (store.atomic: no torn file; the ledger row last). Either way
the line says where, how much, and what to do.

No pytest, git or torch here.
"""
from __future__ import annotations

import errno
import shutil
from pathlib import Path

NEED_BYTES = 32 << 20  # to start a run: its record, its workers' capped logs, room to spare
RECORD_BYTES = 8 << 20  # to write the record once decided (summary, row, backup, revert): checked before the row
FULL = "disk full"  # how every refusal for space starts
_FULL_WORDS = ("No space left on device", "Out of diskspace", "Disk quota exceeded")  # git's and the OS's


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def shortage(*paths: Path, need: int = NEED_BYTES) -> str | None:
    """A refusal naming the first of `paths` (or its nearest existing folder) whose disk has less
    than `need` bytes free; None where all have room."""
    for p in paths:
        where = _existing(Path(p))
        free = shutil.disk_usage(where).free
        if free < need:
            return (f"{FULL}: {free / 2**20:.1f} MiB free on the disk of {where}, a gated run needs "
                    f"{need >> 20} MiB to record itself: free space there and run again (nothing ran, "
                    "nothing was recorded)")
    return None


def ensure_room(*paths: Path, need: int = RECORD_BYTES) -> None:
    """Raise OSError(ENOSPC) naming the disk where fewer than `need` bytes are free: before the
    first byte of a record, so that a disk filled during the run leaves no half-written one."""
    for p in paths:
        where = _existing(Path(p))
        free = shutil.disk_usage(where).free
        if free < need:
            raise OSError(errno.ENOSPC, f"No space left on device: {free / 2**20:.1f} MiB free on the disk of "
                                        f"{where}, the record needs {need >> 20} MiB")


def is_full(exc: BaseException) -> bool:
    """An error that is the disk being full: ENOSPC or EDQUOT, or git saying so in its message."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return any(words in str(exc) for words in _FULL_WORDS)


def full_refusal(exc: BaseException, what: str) -> str:
    """The one REFUSED line for a disk that filled at `what`."""
    detail = " ".join(str(exc).split())[:300]
    return (f"{FULL} while {what}: {detail}: the state is as the run found it; free space on the project's "
            "disk and run the same command again")
