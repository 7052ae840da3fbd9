"""What one run was asked to do, as plain data. The plugin builds it from pytest's options; the
loop reads it and never pytest itself (the layer rule: only pytest_ditar.plugin imports pytest)."""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path


class Exit(IntEnum):
    """pytest's exit codes by value: the gate returns one, the plugin hands it to pytest."""

    OK = 0
    TESTS_FAILED = 1
    INTERRUPTED = 2
    INTERNAL_ERROR = 3
    USAGE_ERROR = 4
    NO_TESTS_COLLECTED = 5


@dataclass(frozen=True)
class RunOptions:
    config_path: Path | None = None
    tag: str | None = None
    device: str | None = None  # None: auto (an xdist worker's own GPU, else cuda when available)
    cls: str | None = None  # the experiment class; None: the commit's trailer
    description: str | None = None  # None: the commit's subject
    no_revert: bool = False  # record the verdict but leave git alone
    gate_demanded: bool = False  # refuse instead of reporting when the run cannot be a full gate
    baseline: bool = False  # store the baseline instead of running tests
    force: bool = False  # with baseline: replace an existing one
    phase: str | None = None  # two-phase gate: phases.QUALITY or phases.DECIDE
    xdist_controller: bool = False  # this process only distributes tests; workers run the candidate
