"""runtime.logs: a worker's log read and kept within a bound, whatever its size (issue 39)."""
from __future__ import annotations

import tracemalloc

from pytest_ditar.runtime import logs


def test_the_tail_of_a_huge_line_is_read_from_its_end_only(tmp_path):
    log = tmp_path / "w.log"
    with open(log, "wb") as fh:
        fh.write(b"first line\n")
        for _ in range(64):
            fh.write(b"x" * (1 << 20))  # one 64 MiB line
        fh.write(b"the end")
    tracemalloc.start()
    last = logs.tail(log, 1)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert last.endswith("the end") and len(last) == 2000
    assert peak < 1 << 20, peak  # 64 KiB read, never the file
    assert logs.tail(tmp_path / "missing.log") == ""


def test_a_log_is_kept_to_its_head_and_tail_with_the_cut_said(tmp_path):
    src, dst = tmp_path / "a.log", tmp_path / "kept" / "a.log"
    src.write_bytes(b"H" * 100 + b"M" * 1000 + b"T" * 100)
    assert logs.keep_capped(src, dst, head=100, tail_bytes=100) == 1000
    data = dst.read_bytes()
    assert data.startswith(b"H" * 100) and data.endswith(b"T" * 100) and b"M" not in data
    assert b"[pytest-ditar: 1000 bytes of this log cut here" in data
    small = tmp_path / "b.log"
    small.write_bytes(b"short\n")
    assert logs.keep_capped(small, tmp_path / "out" / "b.log") == 0
    assert (tmp_path / "out" / "b.log").read_bytes() == b"short\n"
