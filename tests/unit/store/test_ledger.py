"""Unit tests for the hash-chained experiment ledger."""

from __future__ import annotations

import fcntl
import json
import multiprocessing
import os
from pathlib import Path

import pytest

from pytest_ditar.store.ledger import (
    COLUMNS,
    GENESIS_HASH,
    Ledger,
    LedgerError,
    LedgerLockTimeout,
    row_hash,
)


def sample(i: int = 0, **kw) -> dict:
    row = dict(
        commit=f"c{i:06x}",
        parent=f"p{i:06x}",
        **{"class": "exact"},
        description=f"try {i}",
        lane="latency_b1",
        metric=1.0 + i / 100,
        ci_low=0.99,
        ci_high=1.2,
        quality_pass=32,
        quality_total=32,
        peak_vram_gib=7.5,
        status="DISCARD",
        reason="not faster",
        cumulative_class="exact",
        device="NVIDIA H200",
        off_target=True,
    )
    row.update(kw)
    return row


def filled(tmp_path: Path, n: int = 4) -> Ledger:
    led = Ledger(tmp_path)
    for i in range(n):
        led.append(sample(i))
    return led


def rewrite_line(path: Path, index: int, transform) -> None:
    lines = path.read_text().splitlines()
    lines[index] = transform(lines[index])
    path.write_text("".join(line + "\n" for line in lines))


# ---- append / read ---------------------------------------------------------------------------


def test_append_and_read(tmp_path):
    led = Ledger(tmp_path / "state")  # created on first append
    assert led.rows() == [] and led.verify().ok
    stored = led.append(sample(0, status="KEEP"))
    assert stored.run == 1
    assert stored.time.endswith("+00:00")
    assert stored.prev_hash == GENESIS_HASH
    raw = json.loads(led.jsonl_path.read_text().splitlines()[0])
    assert stored.hash == row_hash(raw) and stored.schema_version == 1  # hashed with the row
    second = led.append({"commit": "x", "description": "partial row"})
    assert second.run == 2 and second.prev_hash == stored.hash
    assert second.lane == "" and second.metric == ""  # missing columns filled
    rows = led.rows()
    assert [r.run for r in rows] == [1, 2]
    assert rows[0].metric == 1.0 and rows[0].off_target is True
    tsv = led.tsv_path.read_text().splitlines()
    assert tsv[0].split("\t") == list(COLUMNS)
    assert tsv[1].split("\t")[COLUMNS.index("off_target")] == "1"
    assert len(tsv) == 3
    report = led.verify()
    assert report.ok and report.n_rows == 2 and report.problems == () and report.repairable == ()


def test_caller_time_kept_and_tabs_escaped(tmp_path):
    led = Ledger(tmp_path)
    led.append(sample(0, time="2025-01-01T00:00:00+00:00", description="a\tb\nc\\d"))
    assert led.rows()[0].description == "a\tb\nc\\d"
    line = led.tsv_path.read_text().splitlines()[1]
    cells = line.split("\t")
    assert len(cells) == len(COLUMNS)
    assert cells[COLUMNS.index("description")] == "a\\tb\\nc\\\\d"
    assert cells[COLUMNS.index("time")] == "2025-01-01T00:00:00+00:00"
    assert led.verify().ok


def test_non_finite_float_stored_as_text(tmp_path):
    led = Ledger(tmp_path)
    led.append(sample(0, metric=float("nan")))
    assert led.rows()[0].metric == "nan"
    assert led.verify().ok


@pytest.mark.parametrize("key", ["bogus", "run", "hash", "prev_hash", "schema_version"])
def test_unknown_or_assigned_key_rejected(tmp_path, key):
    led = Ledger(tmp_path)
    with pytest.raises(ValueError, match=repr(key)):
        led.append(sample(0, **{key: "x"}))
    assert led.rows() == []


def test_unsupported_value_type_rejected(tmp_path):
    with pytest.raises(ValueError, match="'reason'"):
        Ledger(tmp_path).append(sample(0, reason=["a"]))


# ---- tamper detection ----------------------------------------------------------------------


def test_chain_verifies(tmp_path):
    report = filled(tmp_path, 5).verify()
    assert report.ok and report.n_rows == 5


def test_edited_jsonl_field_detected(tmp_path):
    led = filled(tmp_path)

    def edit(line: str) -> str:
        row = json.loads(line)
        row["status"] = "KEEP"
        return json.dumps(row)

    rewrite_line(led.jsonl_path, 2, edit)
    report = led.verify()
    assert not report.ok
    assert "row 3: hash mismatch (edited?)" in report.problems
    assert "results.tsv row 3 differs from ledger.jsonl: edited?" in report.problems


def test_rehashed_edit_breaks_next_link(tmp_path):
    led = filled(tmp_path)

    def edit(line: str) -> str:
        row = json.loads(line)
        row["metric"] = 9.99
        row["hash"] = row_hash(row)  # a careful forger recomputes the hash...
        return json.dumps(row)

    rewrite_line(led.jsonl_path, 2, edit)
    report = led.verify()
    assert "row 4: prev_hash does not match row 3" in report.problems  # ...but not the chain


def test_edited_tsv_detected(tmp_path):
    led = filled(tmp_path)
    rewrite_line(led.tsv_path, 2, lambda line: line.replace("DISCARD", "KEEP"))
    report = led.verify()
    assert not report.ok
    assert report.problems == ("results.tsv row 2 differs from ledger.jsonl: edited?",)


@pytest.mark.parametrize("index, expected", [
    (2, "row 3: prev_hash does not match row 2"),
    (0, "row 1: prev_hash is not the genesis hash (row deleted?)"),
    (3, "results.tsv has 4 rows but ledger.jsonl has 3: rows deleted from ledger.jsonl?"),
])
def test_deleted_row_detected(tmp_path, index, expected):
    led = filled(tmp_path)
    lines = led.jsonl_path.read_text().splitlines()
    del lines[index]
    led.jsonl_path.write_text("".join(line + "\n" for line in lines))
    report = led.verify()
    assert not report.ok
    assert expected in report.problems


def test_malformed_json_detected(tmp_path):
    led = filled(tmp_path)
    rewrite_line(led.jsonl_path, 1, lambda line: line[:-5])
    report = led.verify()
    assert not report.ok
    assert any(p.startswith("row 2: malformed JSON") for p in report.problems)
    with pytest.raises(LedgerError, match="row 2"):
        led.rows()
    with pytest.raises(LedgerError):
        led.append(sample(9))  # never extend a corrupt ledger


def test_repair_refuses_on_tampering(tmp_path):
    led = filled(tmp_path)
    rewrite_line(led.tsv_path, 1, lambda line: line.replace("DISCARD", "KEEP"))
    with pytest.raises(LedgerError, match="integrity"):
        led.repair()
    assert led.repair(force=True).ok  # JSONL is the truth; forcing regenerates the view


# ---- crash safety ---------------------------------------------------------------------------


def test_simulated_crash_is_repairable(tmp_path):
    led = filled(tmp_path, 3)
    old_tsv = led.tsv_path.read_text()
    led.append(sample(3))
    # kill -9 after the JSONL replace but before the TSV replace: old TSV + stray temp file.
    led.tsv_path.write_text(old_tsv)
    stale = tmp_path / ".results.tsv.abc123.tmp"
    stale.write_text("half a fi")
    report = led.verify()
    assert report.ok and report.n_rows == 4
    assert report.repairable and "lags ledger.jsonl by 1 row" in report.repairable[0]
    fixed = led.repair()
    assert fixed.ok and fixed.repairable == () and fixed.n_rows == 4
    assert not stale.exists()
    assert len(led.tsv_path.read_text().splitlines()) == 5


def test_missing_tsv_is_repairable_and_append_regenerates(tmp_path):
    led = filled(tmp_path, 2)
    led.tsv_path.unlink()
    (tmp_path / ".ledger.jsonl.zz.tmp").write_text("{")
    assert led.verify().repairable
    led.append(sample(2))
    report = led.verify()
    assert report.ok and report.repairable == () and report.n_rows == 3
    assert not list(tmp_path.glob("*.tmp"))


def test_lock_timeout(tmp_path):
    led = Ledger(tmp_path, lock_timeout_s=0.2)
    fd = os.open(led.lock_path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(LedgerLockTimeout, match="could not lock"):
            led.append(sample(0))
    finally:
        os.close(fd)
    assert led.append(sample(0)).run == 1


def _writer(state_dir: str, worker: int, n: int) -> None:
    led = Ledger(Path(state_dir), lock_timeout_s=60)
    for i in range(n):
        led.append(sample(worker * 100 + i, description=f"worker {worker} row {i}"))


def test_concurrent_appends(tmp_path):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, 10)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    led = Ledger(tmp_path)
    rows = led.rows()
    assert len(rows) == 40
    assert sorted(r.run for r in rows) == list(range(1, 41))
    assert len({r.description for r in rows}) == 40
    report = led.verify()
    assert report.ok and report.n_rows == 40 and report.repairable == ()


# ---- queries --------------------------------------------------------------------------------


def test_kept_commits_last_and_champion(tmp_path):
    """The champion is the last KEEP of the ledger, whatever its lane (loop.run.champion's one answer)."""
    from pytest_ditar.core.decision import kept_rows
    from pytest_ditar.loop.run.champion import kept_commit

    led = Ledger(tmp_path)
    assert kept_commit(led) is None
    led.append(sample(1, status="KEEP"))
    led.append(sample(2, status="DISCARD"))
    led.append(sample(3, status="KEEP", lane="throughput_b8"))
    led.append(sample(4, status="KEEP"))
    led.append(sample(5, status="CRASH"))
    assert [r.commit for r in kept_rows(led.rows())] == ["c000001", "c000003", "c000004"]
    assert kept_commit(led) == "c000004"
    assert [r.run for r in led.last(2)] == [4, 5]
    assert led.last(0) == [] and len(led.last(99)) == 5


def _append_forever(state_dir: str) -> None:
    led = Ledger(Path(state_dir))
    i = 0
    while True:
        led.append(sample(i))
        i += 1


@pytest.mark.parametrize("delay_s", [0.05, 0.13, 0.31])
def test_kill_9_mid_append_leaves_verifiable_files(tmp_path, delay_s):
    import signal
    import time

    ctx = multiprocessing.get_context("fork")
    p = ctx.Process(target=_append_forever, args=(str(tmp_path),))
    p.start()
    time.sleep(delay_s)
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    led = Ledger(tmp_path)
    report = led.verify()
    assert report.ok, report.problems  # possibly a lagging TSV, never a problem
    n = report.n_rows
    led.append(sample(10_000))  # the next writer cleans temps and catches the TSV up
    after = led.verify()
    assert after.ok and after.repairable == () and after.n_rows == n + 1
    assert not list(tmp_path.glob("*.tmp"))


# ---- store.atomic and store.paths: what the ledger (and every other writer) is built on -----


def test_atomic_writes_leave_only_the_target(tmp_path):
    from pytest_ditar.store.atomic import write_bytes_atomic, write_json_atomic, write_text_atomic

    write_bytes_atomic(tmp_path / "a.bin", b"\x00\x01")
    write_text_atomic(tmp_path / "sub" / "b.txt", "x\r\ny\n")  # parent created, newlines kept
    write_json_atomic(tmp_path / "c.json", {"k": Path("p")}, default=str)
    assert (tmp_path / "a.bin").read_bytes() == b"\x00\x01"
    assert (tmp_path / "sub" / "b.txt").read_bytes() == b"x\r\ny\n"
    assert (tmp_path / "c.json").read_text() == '{\n "k": "p"\n}'
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.bin", "b.txt", "c.json", "sub"]


def test_atomic_file_keeps_the_old_file_when_the_writer_fails(tmp_path):
    from pytest_ditar.store.atomic import atomic_file, remove_stale_temps

    target = tmp_path / "t.npz"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_file(target) as fh:
        fh.write(b"half")
        raise RuntimeError("killed mid-write")
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["t.npz"]
    (tmp_path / ".t.npz.abc.tmp").write_bytes(b"stale")  # what a kill -9 leaves
    remove_stale_temps(target)
    assert [p.name for p in tmp_path.iterdir()] == ["t.npz"]


def test_publish_dir_swaps_or_defers(tmp_path):
    from pytest_ditar.store.atomic import publish_dir, temp_dir_beside

    target = tmp_path / "snap"
    for content, replace, published in (("one", False, True), ("two", False, False), ("three", True, True)):
        tmp = temp_dir_beside(target)
        (tmp / "f").write_text(content)
        assert publish_dir(tmp, target, replace=replace) is published
        assert not tmp.exists()
    assert (target / "f").read_text() == "three"  # "two" lost to the existing one, "three" replaced it
    assert [p.name for p in tmp_path.iterdir()] == ["snap"]


def test_file_lock_times_out_with_the_callers_error(tmp_path):
    from pytest_ditar.store.atomic import LockTimeout, file_lock

    with file_lock(tmp_path / "x" / ".lock", 1.0):
        with pytest.raises(LockTimeout, match=r"could not lock .*within 0.1s: busy"):
            with file_lock(tmp_path / "x" / ".lock", 0.1, holder="busy"):
                pass
    with file_lock(tmp_path / "x" / ".lock", 0.1):  # released on exit
        pass
    assert issubclass(LedgerLockTimeout, LockTimeout) and issubclass(LedgerLockTimeout, LedgerError)


def test_tag_paths_layout(tmp_path):
    from pytest_ditar.store.paths import TagPaths, tag_dirs

    t = TagPaths.of(tmp_path, ".autoresearch", "mytag")
    assert t.dir == tmp_path / ".autoresearch" / "mytag" and t.tag == "mytag"
    rel = {k: getattr(t, k).relative_to(t.dir).as_posix() for k in (
        "session_file", "ledger_jsonl", "results_tsv", "ledger_lock", "baseline", "champions", "runs",
        "phase_pointer", "report")}
    assert rel == {"session_file": "session.json", "ledger_jsonl": "ledger.jsonl", "results_tsv": "results.tsv",
                   "ledger_lock": ".ledger.lock", "baseline": "baseline", "champions": "champions", "runs": "runs",
                   "phase_pointer": "phase-quality.json", "report": "report"}
    assert t.champion("a" * 40) == t.champions / ("a" * 40)
    assert t.worktree("0123456789abcdef") == t.dir / "worktrees" / "0123456789ab"
    assert Ledger(t.dir).jsonl_path == t.ledger_jsonl and Ledger(t.dir).lock_path == t.ledger_lock
    first, second = t.new_run_dir("abcdef0123"), t.new_run_dir("abcdef0123")
    assert first.parent == t.runs and first.name.endswith("-abcdef0") and first.is_dir()
    assert second != first and second.is_dir()
    assert tag_dirs(tmp_path / ".autoresearch") == []  # no session file: not a tag yet
    t.session_file.write_text("{}")
    assert tag_dirs(tmp_path / ".autoresearch") == [t]


def test_a_ledger_written_before_a_later_column_still_verifies_and_grows(tmp_path):
    """A ledger from a release without the `sandbox` column: its rows (hashed as written) verify, its
    older results.tsv is repairable, and the next append writes the new column after them."""
    from pytest_ditar.store.ledger import LATER_COLUMNS

    assert "sandbox" in LATER_COLUMNS
    old_cols = [c for c in COLUMNS if c not in LATER_COLUMNS]
    lines, prev = [], GENESIS_HASH
    for i in (1, 2):
        row = {c: "" for c in old_cols}
        row.update(run=i, time="2026-01-01T00:00:00+00:00", commit=f"c{i}", status="DISCARD", prev_hash=prev)
        row["hash"] = prev = row_hash(row)
        lines.append(json.dumps(row))
    (tmp_path / "ledger.jsonl").write_text("".join(line + "\n" for line in lines))
    (tmp_path / "results.tsv").write_text("\t".join(old_cols) + "\n" + "".join(
        "\t".join(str(json.loads(line)[c]) for c in old_cols) + "\n" for line in lines))
    ledger = Ledger(tmp_path)
    report = ledger.verify()
    assert report.ok, report.problems
    assert any("older release" in r for r in report.repairable), report.repairable
    stored = ledger.append(sample(3, sandbox="on"))
    assert stored.run == 3 and stored.sandbox == "on"
    after = ledger.verify()
    assert after.ok and not after.repairable, (after.problems, after.repairable)
    header = (tmp_path / "results.tsv").read_text().splitlines()[0]
    assert header.endswith("\tsandbox\tpatch\tjudged\trerun_of\tunjudged\tnet")

    # a results.tsv of the release with `sandbox` but not the re-run columns is repairable as well
    mid = [c for c in COLUMNS if c not in ("patch", "judged", "rerun_of", "unjudged", "net")]
    rows = [json.loads(line) for line in ledger.jsonl_path.read_text().splitlines()]
    (tmp_path / "results.tsv").write_text("\t".join(mid) + "\n" + "".join(
        "\t".join(str(r.get(c, "")) for c in mid) + "\n" for r in rows))
    mid_report = ledger.verify()
    assert mid_report.ok and any("older release" in r for r in mid_report.repairable), mid_report

    # but a row with a key no release ever wrote is still tampering
    bad = json.loads(lines[0])
    bad["extra"] = 1
    bad["hash"] = row_hash(bad)
    (tmp_path / "ledger.jsonl").write_text(json.dumps(bad) + "\n")
    assert any("unexpected keys" in p for p in Ledger(tmp_path).verify().problems)


def test_file_lock_refuses_a_planted_symlink_naming_it(tmp_path):
    """A symlink where the lock lives would lock (and create) a file of the link's choosing: refused,
    and the target is neither created nor touched."""
    from pytest_ditar.store.atomic import LockTimeout, file_lock

    (tmp_path / "x").mkdir()
    target = tmp_path / "elsewhere"
    (tmp_path / "x" / ".lock").symlink_to(target)
    with pytest.raises(LockTimeout, match=r"lock file .*x/\.lock is a symbolic link"):
        with file_lock(tmp_path / "x" / ".lock", 0.1):
            pass
    assert not target.exists()
    target.write_text("keep")
    with pytest.raises(LockTimeout, match="symbolic link"):
        with file_lock(tmp_path / "x" / ".lock", 0.1):
            pass
    assert target.read_text() == "keep"
    os.mkfifo(tmp_path / "x" / ".fifo")  # not a regular file either (O_NONBLOCK: the open does not hang)
    with pytest.raises(LockTimeout, match="not a regular file"):
        with file_lock(tmp_path / "x" / ".fifo", 0.1):
            pass
