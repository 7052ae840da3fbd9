"""`dit-ar try`'s outcome (pytest --ditar-try): one word from the run's own values, its last line
`DITAR TRY: <outcome> lane=... speedup=...x ci95=[...] quality=p/t class=...`, its exit status, and
its note in tried.jsonl (store.tried) so a later session sees the idea in `dit-ar status`.

The outcome is no verdict: nothing is recorded in the ledger and git is not touched. The words are
the objective lane's (core.stats: FASTER, NOT_FASTER, SLOWER, UNSTABLE; REJECTED for a voided
timing), or QUALITY_FAILED, CRASH (the candidate did not run) and NOT_TIMED (no objective lane ran).
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pytest_ditar.core.quality import aggregate
from pytest_ditar.core.verdict_json import TryFigures
from pytest_ditar.loop.run.results import RunResults
from pytest_ditar.loop.run.session import DitarSession
from pytest_ditar.store import tried
from pytest_ditar.store.paths import TagPaths

PREFIX = "DITAR TRY: "
# exit status by outcome: 0 worth a commit; 1 not (not faster, slower, voided, quality failed);
# 10 the candidate crashed (as a gated run's CRASH); 11 undecided (the host's noise, no lane timed)
EXIT = {"FASTER": 0, "NOT_FASTER": 1, "SLOWER": 1, "REJECTED": 1, "QUALITY_FAILED": 1, "CRASH": 10,
        "UNSTABLE": 11, "NOT_TIMED": 11}


@dataclass(frozen=True)
class TryOutcome(TryFigures):
    """The outcome's figures (core.verdict_json.TryFigures: what `try --json` shows), its status and line."""

    @property
    def exit_status(self) -> int:
        return EXIT.get(self.outcome, 11)

    def line(self) -> str:
        """The verdict line's fields and format, under a prefix of its own (never a verdict's)."""
        speed = _fmt(self.speedup)
        quality = "n/a" if self.passed is None or self.total is None else f"{self.passed}/{self.total}"
        return (f"{PREFIX}{self.outcome} lane={self.lane} speedup={speed}{'' if speed == 'n/a' else 'x'} "
                f"ci95=[{_fmt(self.ci_low)},{_fmt(self.ci_high)}] quality={quality} class={self.judged_class or 'n/a'}")


def _fmt(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.3f}"


def outcome_of(s: DitarSession, made: RunResults) -> TryOutcome:
    results = list(made.quality.values())
    passed, total, _ = aggregate(results) if results else (None, None, [])
    lane = next((oc for oc in made.outcomes() if oc.objective), None)
    if made.errors and not results and lane is None:
        word = "CRASH"
    elif total and passed is not None and passed < total:
        word = "QUALITY_FAILED"
    elif lane is None or lane.verdict == "MISSING":
        word = "CRASH" if made.errors else "NOT_TIMED"
    else:
        word = lane.verdict
    return TryOutcome(word, s.cfg.objective_lane, lane.speedup if lane else None, lane.ci_low if lane else None,
                      lane.ci_high if lane else None, passed, total, s.judged_class)


def note(state_dir: Path, out: TryOutcome, head: str | None, description: str | None) -> None:
    """Add the try to tried.jsonl: when, on which commit, what it claimed, how it came out."""
    row: dict[str, Any] = {**asdict(out), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           "head": str(head or "")[:7], "description": description or ""}
    tried.append(TagPaths(state_dir), row)
