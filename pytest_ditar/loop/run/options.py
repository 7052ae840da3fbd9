"""What one run was asked to do, as plain data. The plugin builds it from pytest's options; the
loop reads it and never pytest itself (the layer rule: only pytest_ditar.plugin imports pytest)."""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path


class Exit(IntEnum):
    """A run's exit status, the one table of them (docs/statistics.md and program.md print it): pytest's own
    codes by value (0-6 as of pytest 9), then the verdicts'. A gated run exits by its decision, never by pytest's
    count of failed tests: a KEEP is 0 even where a guard lane's test failed because it could not
    be measured (the verdict line names it), so a script driven by `$?` reads the verdict."""

    OK = 0
    TESTS_FAILED = 1
    INTERRUPTED = 2
    INTERNAL_ERROR = 3
    USAGE_ERROR = 4
    NO_TESTS_COLLECTED = 5
    MAX_WARNINGS_ERROR = 6  # pytest 9's --max-warnings
    # Far from pytest's codes (it adds them one at a time): a crashed candidate is never taken for a
    # failed or broken pytest run.
    CRASH = 10
    # The verdicts' names for pytest's codes (aliases: Exit(1).name stays TESTS_FAILED).
    KEEP = 0
    DISCARD = 1
    REFUSED = 4  # DITAR REFUSED: nothing judged, recorded or reverted
    BOUND_REACHED = 2  # `dit-ar experiment` refused before pytest ran: the session's bound is reached

    @classmethod
    def of_verdict(cls, status: str) -> "Exit":
        """The exit status of a recorded decision: KEEP 0, DISCARD 1, CRASH 10."""
        return {"KEEP": cls.KEEP, "DISCARD": cls.DISCARD, "CRASH": cls.CRASH}[status]


@dataclass(frozen=True)
class RunOptions:
    config_path: Path | None = None
    tag: str | None = None
    device: str | None = None  # None: auto (an xdist worker's own GPU, else cuda when available)
    claimed_class: str | None = None  # the experiment class; None: the commit's trailer
    description: str | None = None  # None: the commit's subject
    no_revert: bool = False  # record the verdict but leave git alone
    gate_demanded: bool = False  # refuse instead of reporting when the run cannot be a full gate
    baseline: bool = False  # store the baseline instead of running tests
    force: bool = False  # with baseline: replace an existing one
    phase: str | None = None  # two-phase gate: phases.QUALITY or phases.DECIDE
    xdist_controller: bool = False  # this process only distributes tests; workers run the candidate
    try_only: bool = False  # `dit-ar try`: report the working tree against the champion; record nothing
    # `--ditar-guard`: its tolerance; like try, then failing on a lane slower beyond it or a failed contract
    guard: float | None = None
