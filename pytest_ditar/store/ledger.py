"""Append-only, hash-chained experiment ledger: `ledger.jsonl` (truth) + `results.tsv` (view).

Each JSONL row carries `prev_hash` (the previous row's `hash`, or 64 zeros for the first) and
`hash` = sha256 of the row's canonical JSON without `hash`, so an edited, reordered or deleted
row breaks the chain. `results.tsv` is regenerated from the JSONL on every append, for people
and agents to read; `verify` checks it agrees.

Crash safety: every write is store.atomic's (temp file in the same directory, fsynced, then
`os.replace`d over the target), so a kill -9 leaves each file either old or new, never torn.
The JSONL is replaced first, the TSV second; a crash in between leaves a TSV that is a strict
prefix of the JSONL. `verify` reports that as repairable (not as tampering) and `repair()` (or
the next `append`) regenerates the TSV. Stale temp files from a crash are ignored by readers
and removed by the next writer. Writers serialize on an flock of `.ledger.lock`.

Limit: deleting the last row from both files consistently is not detectable without an
external anchor (e.g. the git log); every other single edit is.

No pytest, no git here.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from pytest_ditar.core.vocabulary import SCHEMA_VERSION
from pytest_ditar.store.atomic import LockTimeout, file_lock, remove_stale_temps, write_text_atomic
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.store.records import LedgerRow, RecordVersionError

__all__ = [
    "COLUMNS",
    "GENESIS_HASH",
    "ChainReport",
    "Ledger",
    "LedgerError",
    "LedgerLockTimeout",
    "row_hash",
]

COLUMNS: tuple[str, ...] = (
    "run",
    "time",
    "commit",
    "parent",
    "class",
    "description",
    "lane",
    "metric",
    "ci_low",
    "ci_high",
    "quality_pass",
    "quality_total",
    "peak_vram_gib",
    "status",
    "reason",
    "cumulative_class",
    "device",
    "off_target",
    "sandbox",  # on | off: whether the run's workers ran in the sandbox (config "sandbox")
    "patch",  # the change's identity, its diff against the champion (core.rerun.patch_key)
    "judged",  # 1, or 0 where the gate could not judge the change (an UNSTABLE objective lane: core.rerun)
    "rerun_of",  # the run that first tried this change on this champion unjudged, or ""
    "unjudged",  # why it was not judged (core.rerun: host, candidate, champion), "" where it was
    "net",  # the objective lane's speedup net of the harness's round trip (core.roundtrip), cited chained
)
CHAIN_KEYS: tuple[str, ...] = ("prev_hash", "hash")
# Columns added after the first release: a row written before one existed lacks it (its hash covers
# the row as written) and reads as "" in results.tsv; a TSV with the older header is regenerated.
LATER_COLUMNS: tuple[str, ...] = ("sandbox", "patch", "judged", "rerun_of", "unjudged", "net")
GENESIS_HASH = "0" * 64
# Keys the ledger assigns itself; a caller supplying them would forge sequence or chain.
_ASSIGNED = ("run", "prev_hash", "hash", "schema_version")


class LedgerError(RuntimeError):
    """The ledger cannot be read or written safely."""


class LedgerLockTimeout(LedgerError, LockTimeout):
    """Another process held the ledger lock for longer than the timeout."""


@dataclass(frozen=True)
class ChainReport:
    """Result of `Ledger.verify`.

    `ok` is False when anything looks tampered or corrupt (`problems`). `repairable` lists
    benign leftovers of an interrupted write (a lagging results.tsv); they do not clear `ok`
    and `Ledger.repair()` fixes them.
    """

    ok: bool
    problems: tuple[str, ...]
    n_rows: int
    repairable: tuple[str, ...] = ()


def _canonical(row: Mapping[str, object]) -> bytes:
    return json.dumps(
        row, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def row_hash(row: Mapping[str, object]) -> str:
    """sha256 of the row's canonical JSON, excluding its own `hash`."""
    return hashlib.sha256(_canonical({k: v for k, v in row.items() if k != "hash"})).hexdigest()


def _normalize(key: str, value: object) -> object:
    # Keep JSON scalars as they are (numbers stay numbers for report code); NaN/inf are not
    # valid JSON, so they are stored as their string spelling rather than lost.
    if value is None:
        return ""
    if isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    raise ValueError(
        f"ledger column {key!r}: value of type {type(value).__name__} is not a "
        "str/int/float/bool/None"
    )


def _tsv_cell(value: object) -> str:
    if isinstance(value, bool):
        text = "1" if value else "0"
    elif value is None:
        text = ""
    else:
        text = str(value)
    # Escape so one row stays one line with exactly len(COLUMNS) cells.
    return (
        text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    )


def _tsv_line(row: Mapping[str, object]) -> str:
    return "\t".join(_tsv_cell(row.get(c, "")) for c in COLUMNS)


_TSV_HEADER = "\t".join(COLUMNS)
# every earlier release's header: the columns without the later ones added after it
_OLD_TSV_HEADERS = frozenset("\t".join(c for c in COLUMNS if c not in LATER_COLUMNS[i:])
                             for i in range(len(LATER_COLUMNS)))


class Ledger:
    """The experiment ledger in `state_dir` (typically `.autoresearch/<tag>/`)."""

    def __init__(self, state_dir: Path | str, *, lock_timeout_s: float = 30.0) -> None:
        self.state_dir = Path(state_dir)
        self.lock_timeout_s = lock_timeout_s

    @property
    def jsonl_path(self) -> Path:
        return TagPaths(self.state_dir).ledger_jsonl

    @property
    def tsv_path(self) -> Path:
        return TagPaths(self.state_dir).results_tsv

    @property
    def lock_path(self) -> Path:
        return TagPaths(self.state_dir).ledger_lock

    # ---- writing -------------------------------------------------------------------------

    def append(self, row: Mapping[str, object]) -> LedgerRow:
        """Append one experiment row; returns the stored row (with run, time and hashes).

        Unknown keys raise ValueError; missing columns become "". `run` is assigned (1-based,
        sequential); `time` is assigned (UTC ISO-8601) unless the caller provides one.
        """
        for key in row:
            if key in _ASSIGNED:
                raise ValueError(f"ledger key {key!r} is assigned by the ledger, not the caller")
            if key not in COLUMNS:
                raise ValueError(
                    f"unknown ledger column {key!r}; valid columns: {', '.join(COLUMNS)}"
                )
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with self._locked():
            self._clean_temps()
            lines = self._read_jsonl_lines()
            rows = self._parse_all(lines)  # fail closed: never extend a corrupt file
            prev = rows[-1] if rows else None
            stored: dict[str, object] = {c: _normalize(c, row.get(c)) for c in COLUMNS}
            stored["run"] = (int(prev["run"]) + 1) if prev else 1  # type: ignore[call-overload]
            if not stored["time"]:
                stored["time"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
            stored["schema_version"] = SCHEMA_VERSION  # hashed with the row; rows written before it have none
            stored["prev_hash"] = str(prev["hash"]) if prev else GENESIS_HASH
            stored["hash"] = row_hash(stored)
            new_line = json.dumps(stored, ensure_ascii=False, allow_nan=False)
            # Existing lines are copied byte-for-byte so earlier tampering stays detectable.
            write_text_atomic(self.jsonl_path, "".join(line + "\n" for line in lines + [new_line]))
            self._write_tsv(rows + [stored])
            return LedgerRow.from_json(stored)

    def repair(self, *, force: bool = False) -> ChainReport:
        """Remove stale temp files and regenerate results.tsv from ledger.jsonl.

        Refuses (LedgerError) when `verify` finds real problems, since regenerating would
        erase the TSV's evidence of an edited JSONL; `force=True` regenerates anyway.
        """
        with self._locked():
            self._clean_temps()
            report = self.verify()
            if report.problems and not force:
                raise LedgerError(
                    "ledger has integrity problems; not repairing (force=True overrides): "
                    + "; ".join(report.problems)
                )
            if self.jsonl_path.exists():
                self._write_tsv(self._parse_all(self._read_jsonl_lines()))
        return self.verify()

    # ---- reading -------------------------------------------------------------------------

    def rows(self) -> list[LedgerRow]:
        """All rows, oldest first (raises LedgerError on malformed JSON or a newer release's row)."""
        try:
            return [LedgerRow.from_json(r) for r in self._parse_all(self._read_jsonl_lines())]
        except RecordVersionError as exc:
            raise LedgerError(f"{self.jsonl_path}: {exc}") from exc

    def lenient_rows(self) -> list[LedgerRow]:
        """The rows that parse, the rest skipped: a broken chain is shown (status, the report), never refused."""
        if not self.jsonl_path.exists():
            return []
        rows = []
        for line in self.jsonl_path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
                if isinstance(row, dict):
                    rows.append(LedgerRow.from_json(row))
            except ValueError:  # malformed JSON, or a newer release's row
                continue
        return rows

    def last(self, n: int) -> list[LedgerRow]:
        return self.rows()[-n:] if n > 0 else []

    def verify(self) -> ChainReport:
        """Check the hash chain, run sequence, and that results.tsv matches ledger.jsonl.

        Lock-free: the TSV is read before the JSONL and writers replace the JSONL before the
        TSV, so a concurrent append can only make the TSV look lagging, never ahead.
        """
        tsv_lines = self._read_lines(self.tsv_path)
        jsonl_lines = self._read_jsonl_lines()
        problems, parsed = _chain_problems(jsonl_lines)
        tsv_problems, repairable = _tsv_problems(tsv_lines, parsed)
        problems += tsv_problems
        return ChainReport(
            ok=not problems, problems=tuple(problems), n_rows=len(jsonl_lines), repairable=tuple(repairable)
        )

    # ---- internals -----------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with file_lock(self.lock_path, self.lock_timeout_s, error=LedgerLockTimeout,
                       holder="another process is writing the ledger (or hung holding the lock)"):
            yield

    @staticmethod
    def _read_lines(path: Path) -> list[str]:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        lines = text.split("\n")
        # A complete file ends with a newline; drop the empty piece after it.
        return lines[:-1] if lines[-1] == "" else lines

    def _read_jsonl_lines(self) -> list[str]:
        return self._read_lines(self.jsonl_path)

    def _parse_all(self, lines: list[str]) -> list[dict[str, object]]:
        rows = []
        for i, line in enumerate(lines, start=1):
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise LedgerError(f"{self.jsonl_path} row {i}: malformed JSON ({exc})") from exc
            if not isinstance(row, dict):
                raise LedgerError(f"{self.jsonl_path} row {i}: not a JSON object")
            rows.append(row)
        return rows

    def _write_tsv(self, rows: list[dict[str, object]]) -> None:
        body = "".join(_tsv_line(r) + "\n" for r in rows)
        write_text_atomic(self.tsv_path, _TSV_HEADER + "\n" + body)

    def _clean_temps(self) -> None:
        """Remove temp files a killed writer left behind (only ever called under the lock)."""
        remove_stale_temps(self.jsonl_path)
        remove_stale_temps(self.tsv_path)


def _chain_problems(jsonl_lines: list[str]) -> tuple[list[str], list[dict[str, object] | None]]:
    """What is wrong with ledger.jsonl's rows and their hash chain, and each row parsed (None where
    it is not a JSON object)."""
    problems: list[str] = []
    parsed: list[dict[str, object] | None] = []
    expected_prev: str | None = GENESIS_HASH
    for i, line in enumerate(jsonl_lines, start=1):
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            problems.append(f"row {i}: malformed JSON ({exc})")
            parsed.append(None)
            expected_prev = None  # the next link cannot be checked
            continue
        parsed.append(row)
        problems += _row_problems(i, row, expected_prev)
        expected_prev = str(row.get("hash"))
    return problems, parsed


def _row_problems(i: int, row: dict[str, object], expected_prev: str | None) -> list[str]:
    """Row `i`'s keys, its own hash, its link to the row before (unless that one was unreadable) and
    its run number."""
    problems = []
    want_keys = set(COLUMNS) | set(CHAIN_KEYS) | {"schema_version"}
    if not (want_keys - set(LATER_COLUMNS) - {"schema_version"} <= set(row) <= want_keys):
        missing = sorted(want_keys - set(row))
        extra = sorted(set(row) - want_keys)
        problems.append(f"row {i}: unexpected keys (missing {missing}, extra {extra})")
    try:
        actual = row_hash(row)
    except ValueError as exc:
        actual = f"<unhashable: {exc}>"
    if row.get("hash") != actual:
        problems.append(f"row {i}: hash mismatch (edited?)")
    if expected_prev is not None and row.get("prev_hash") != expected_prev:
        if i == 1:
            problems.append("row 1: prev_hash is not the genesis hash (row deleted?)")
        else:
            problems.append(f"row {i}: prev_hash does not match row {i - 1}")
    if row.get("run") != i:
        problems.append(f"row {i}: run number {row.get('run')!r} != {i} (row deleted?)")
    return problems


def _tsv_problems(tsv_lines: list[str], parsed: list[dict[str, object] | None]) -> tuple[list[str], list[str]]:
    """results.tsv against ledger.jsonl's parsed rows: (problems, repairable leftovers of an
    interrupted write or an older release)."""
    problems: list[str] = []
    repairable: list[str] = []
    n = len(parsed)
    if not tsv_lines:
        if n:
            repairable.append(f"results.tsv missing; ledger.jsonl has {n} row(s)")
    elif tsv_lines[0] in _OLD_TSV_HEADERS and n:
        repairable.append("results.tsv has an older release's columns; "
                          "repair() (or the next append) regenerates it")
    else:
        if tsv_lines[0] != _TSV_HEADER:
            problems.append("results.tsv header differs from the ledger columns")
        body = tsv_lines[1:]
        problems += _tsv_body_problems(body, parsed)
        if len(body) < n:
            repairable.append(
                f"results.tsv lags ledger.jsonl by {n - len(body)} row(s) "
                "(interrupted write); repair() regenerates it"
            )
    return problems, repairable


def _tsv_body_problems(body: list[str], parsed: list[dict[str, object] | None]) -> list[str]:
    """results.tsv's rows each the line its ledger.jsonl row makes, and none more."""
    problems = []
    n = len(parsed)
    for i, line in enumerate(body, start=1):
        if i > n:
            problems.append(f"results.tsv has {len(body)} rows but ledger.jsonl has {n}: "
                            "rows deleted from ledger.jsonl?")
            break
        row = parsed[i - 1]
        if row is not None and line != _tsv_line(row):
            problems.append(f"results.tsv row {i} differs from ledger.jsonl: edited?")
    return problems
