"""A session's bound: how many experiments a person allows, or until when (`dit-ar init
--max-experiments N --until TIME`, kept in session.json). `dit-ar experiment` refuses to start a run
once it is reached, and a gated run's next-step line says to stop."""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from pytest_ditar.core.errors import ConfigError
from pytest_ditar.core.vocabulary import STATUSES
from pytest_ditar.store.atomic import write_json_atomic
from pytest_ditar.store.ledger import Ledger
from pytest_ditar.store.paths import TagPaths


@dataclass(frozen=True)
class SessionBound:
    """A person's limit on a session; none by default (the loop runs until a person stops it)."""

    max_experiments: int | None = None  # experiments allowed from when the bound was set
    counted_from: int = 0  # experiments already in the ledger then
    until: str | None = None  # ISO 8601 with its UTC offset

    def describe(self, done: int) -> str:
        parts = []
        if self.max_experiments is not None:
            parts.append(f"{done - self.counted_from} of {self.max_experiments} experiments run")
        if self.until:
            parts.append(f"until {self.until}")
        return ", ".join(parts) or "none (runs until a person stops it)"

    def reached(self, done: int, now: datetime | None = None) -> str | None:
        """What ended the session, or None while it may go on."""
        if self.max_experiments is not None and done - self.counted_from >= self.max_experiments:
            return f"{done - self.counted_from} of {self.max_experiments} experiments run"
        if self.until and (now or datetime.now(timezone.utc)) >= datetime.fromisoformat(self.until):
            return f"the deadline {self.until} has passed"
        return None


def parse_deadline(text: str) -> str:
    """`--until`: ISO 8601; a time without an offset is this machine's local time."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"--until '{text}': not an ISO 8601 time (e.g. 2030-01-31T06:00 or 2030-01-31T06:00+00:00)") \
            from None
    if when.tzinfo is None:
        when = when.astimezone()  # a time without an offset is this machine's local time
    if when <= datetime.now(timezone.utc):
        raise ConfigError(f"--until {when.isoformat()}: already passed (give a time in the future)")
    return when.isoformat(timespec="minutes")


def experiments_run(state_dir: Path) -> int:
    """KEEP, DISCARD and CRASH rows in the tag's ledger (0 when there is none or it cannot be read:
    the gate itself refuses a broken ledger)."""
    ledger = Ledger(state_dir)
    try:
        return sum(1 for r in ledger.rows() if r.status in STATUSES)
    except Exception:  # noqa: BLE001
        return 0


def read_bound(state_dir: Path) -> SessionBound:
    f = TagPaths(state_dir).session_file
    try:
        data = json.loads(f.read_text()) if f.is_file() else {}
    except (OSError, json.JSONDecodeError):
        data = {}
    b = data.get("bound") or {}
    return SessionBound(b.get("max_experiments"), int(b.get("counted_from", 0)), b.get("until"))


def check_bound_args(max_experiments: int | None, until: str | None) -> None:
    """A one-line ConfigError for a bound that makes no sense, before init creates anything."""
    if max_experiments is not None and max_experiments < 1:
        raise ConfigError(f"--max-experiments {max_experiments}: give at least 1")
    if until:
        parse_deadline(until)


def write_bound(state_dir: Path, max_experiments: int | None, until: str | None) -> SessionBound:
    """Set (or replace) the session's bound in session.json; experiments count from now."""
    check_bound_args(max_experiments, until)
    f = TagPaths(state_dir).session_file
    data = json.loads(f.read_text()) if f.is_file() else {}
    bound = SessionBound(max_experiments, experiments_run(state_dir), parse_deadline(until) if until else None)
    data["bound"] = {"max_experiments": bound.max_experiments, "counted_from": bound.counted_from, "until": bound.until}
    write_json_atomic(f, data)
    return bound


def bound_refusal(state_dir: Path, now: datetime | None = None) -> str | None:
    """The refusal `dit-ar experiment` prints once the session's bound is reached, else None."""
    why = read_bound(state_dir).reached(experiments_run(state_dir), now)
    if why is None:
        return None
    return (f"session bound reached: {why} (set by the person who started the session, in "
            f"{TagPaths(state_dir).session_file.name}): stop; report with `dit-ar status` and `dit-ar report`")
