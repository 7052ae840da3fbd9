"""A worker's log, as the judge reads and keeps it: bounded whatever the worker wrote (issue 39).

A worker's stdout and stderr go to its log file, which the candidate fills as it likes: one line
of 1 GiB once made the judge's peak memory 2.1 GB (it read the whole file for its last line) and
the state directory 1 GiB larger (the log copied into the run). The judge reads at most
TAIL_BYTES from a log's end, and keeps at most KEEP_HEAD + KEEP_TAIL bytes of each, saying how
much it cut where it cut it.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

TAIL_BYTES = 64 << 10  # read from a log's end for its last lines
KEEP_HEAD = 256 << 10  # kept from a log's start (where the worker says what it is)
KEEP_TAIL = 768 << 10  # kept from its end (where it failed)


def tail(path: Path, lines: int = 20, max_chars: int = 2000) -> str:
    """The last `lines` lines of the log, at most `max_chars` characters, from its last TAIL_BYTES."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(max(0, size - TAIL_BYTES))
            data = fh.read(TAIL_BYTES)
    except OSError:
        return ""
    text = data.decode(errors="replace").strip().splitlines()
    return "\n".join(text[-lines:])[-max_chars:]


def keep_capped(src: Path, dst: Path, head: int = KEEP_HEAD, tail_bytes: int = KEEP_TAIL) -> int:
    """Copy the log `src` to `dst`, its first `head` and last `tail_bytes` bytes where it is longer,
    with a line saying how much was cut between them; the bytes cut (0: copied whole)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        size = os.fstat(fin.fileno()).st_size
        if size <= head + tail_bytes:
            shutil.copyfileobj(fin, fout)
            return 0
        fout.write(fin.read(head))
        cut = size - head - tail_bytes
        fout.write(f"\n[pytest-ditar: {cut} bytes of this log cut here; kept its first {head} and last "
                   f"{tail_bytes} bytes]\n".encode())
        fin.seek(size - tail_bytes)
        fout.write(fin.read(tail_bytes))
        return cut
