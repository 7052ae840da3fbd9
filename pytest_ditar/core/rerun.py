"""One judgment per change: a change judged on a champion is not run again; one the gate could not
judge runs once more, linked to the first.

A change is its diff against the champion it sits on: the `git format-patch` body without the
commit's header (message, author, date) or the judge's git version, so a new message does not make
a new idea. A run is *not judged* when the gate could not judge the change itself: a DISCARD whose
only objection is an UNSTABLE objective lane, or a CRASH of the judge ("internal: ..."). Its ledger
row says why in `unjudged` (read from the lane's cause, never a reason's words):

- `host`: the host's noise or load, another process on the device, or the judge itself. Such a run
  never counts toward leaving the idea: it may run again as it is, as often as the host allows.
- `candidate`: work the candidate left running slowed a reference (interference);
- `champion`: the champion drifted against the anchor (core.anchor).

RULE (the one wording `status`, `experiment` and program.md give): a judged change is not run again
on its champion; a change not judged because of the host may always run again; one not judged
twice for the candidate's or the champion's doing (interference, champion drift) is left on this
champion. A new baseline (`dit-ar baseline --force`) lifts that; so does a new champion. Pure:
ledger rows in, a key, a link or a refusal out.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime
from typing import Protocol, TypeVar

from pytest_ditar.core.vocabulary import DRIFT, INTERFERENCE, INTERNAL, NOT_KEPT_BUILD, OBJECTIVE_UNSTABLE

KEY_CHARS = 16  # of the sha256: enough to tell a ledger's changes apart, short in a TSV cell


def patch_key(patch: str) -> str:
    """The change's identity: sha256 of its diff (from the first `diff --git` line to the end,
    without format-patch's `-- ` version trailer); "" for an empty patch."""
    start = patch.find("diff --git ")
    if start < 0:
        return ""
    body = patch[start:]
    trailer = body.rfind("\n-- \n")
    if trailer >= 0:
        body = body[:trailer + 1]
    return hashlib.sha256(body.encode("utf-8", "surrogateescape")).hexdigest()[:KEY_CHARS]


def judged(status: str, causes: Iterable[str]) -> bool:
    """Whether a run judged its change, from what its objections are (Decision.causes): False for a
    DISCARD whose every objection is its UNSTABLE objective lane, and for a CRASH of the judge itself."""
    causes = list(causes)
    if status == "CRASH":
        return not (causes and all(c == INTERNAL for c in causes))
    if status == "DISCARD":
        return not (causes and all(c == OBJECTIVE_UNSTABLE for c in causes))
    return True


HOST, CANDIDATE, CHAMPION = "host", "candidate", "champion"  # why a run was not judged (ledger `unjudged`)
UNJUDGED_CAUSES: tuple[str, ...] = (HOST, CANDIDATE, CHAMPION)
# the objective lane's cause (LaneOutcome.cause) -> whose doing an UNSTABLE lane was; none named: the host
class RunRow(Protocol):
    """What core reads of a ledger row (store.records.LedgerRow is the one that exists); number
    cells as stored: "" where none."""

    @property
    def run(self) -> int: ...
    @property
    def time(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def parent(self) -> str: ...
    @property
    def patch(self) -> str: ...
    @property
    def judged(self) -> str | int | float: ...
    @property
    def unjudged(self) -> str: ...
    @property
    def metric(self) -> str | int | float: ...
    @property
    def ci_low(self) -> str | int | float: ...
    @property
    def ci_high(self) -> str | int | float: ...
    @property
    def net(self) -> str | int | float: ...


R = TypeVar("R", bound=RunRow)

_LANE_TO_UNJUDGED = {INTERFERENCE: CANDIDATE, DRIFT: CHAMPION, NOT_KEPT_BUILD: CHAMPION}
RULE = ("a judged change is not run again on its champion; a change not judged because of the host may always run "
        "again; one not judged twice for the candidate's or the champion's doing (interference, champion drift) is "
        "left on this champion; a new baseline or a new champion lifts that")


def unjudged_cause(status: str, causes: Iterable[str], lane_cause: str | None) -> str:
    """Why a run did not judge its change ("" where it did): the objective lane's cause
    (`lane_cause`, LaneOutcome.cause) names the candidate's or the champion's doing; any other
    UNSTABLE lane (too noisy, a shared device, too few calls) and the judge's own CRASH are the host's."""
    causes = list(causes)
    if judged(status, causes):
        return ""
    if status == "CRASH":
        return HOST
    return _LANE_TO_UNJUDGED.get(lane_cause or "", HOST)


def row_unjudged(row: RunRow) -> str:
    """A ledger row's `unjudged` ("" where judged); a row not judged from before the field: the host's."""
    if row_judged(row):
        return ""
    cause = row.unjudged
    return cause if cause in UNJUDGED_CAUSES else HOST


def _when(text: object) -> datetime | None:
    try:
        when = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def _same(rows: Iterable[R], key: str, parent: str) -> list[R]:
    return [r for r in rows if key and r.patch == key and r.parent == parent]


def rerun_of(rows: Iterable[RunRow], key: str, parent: str) -> int | None:
    """The run that first tried this change on this champion and was not judged, if any."""
    first = next((r for r in _same(rows, key, parent) if str(r.judged) == "0"), None)
    return first.run if first is not None else None


def refusal(rows: Iterable[RunRow], key: str, parent: str, since: str | None = None) -> str | None:
    """Why this change must not run on this champion again; None when it may (RULE). `since`: when
    the current baseline was taken (its manifest's `created`): unjudged runs before it do not count."""
    same = _same(rows, key, parent)
    done = [r for r in same if row_judged(r)]
    if done:
        r = done[-1]
        return (f"this change was already judged on this champion (run {r.run}: {r.status}); "
                "it is not run again (program.md section 2): commit a different hypothesis")
    start = _when(since) if since else None
    counted = [r for r in same if row_unjudged(r) != HOST
               and (start is None or (_when(r.time) or start) >= start)]
    if len(counted) >= 2:
        runs = ", ".join(f"{r.run} ({row_unjudged(r)})" for r in counted)
        return (f"this change was not judged twice for the candidate's or the champion's doing (runs {runs}: "
                "interference from work the candidate left running, or the champion's drift against the anchor): "
                "leave it on this champion; a run not judged because of the host never counts")
    return None


def row_judged(row: RunRow) -> bool:
    """Whether a ledger row's run judged its change (its `judged` field; rows from before it: yes)."""
    return str(row.judged).strip() not in ("0", "False", "false")


NOT_JUDGED = "not judged"  # how status and the report name a run that judged nothing (never a verdict word)


def counts(rows: Iterable[RunRow]) -> dict[str, int]:
    """KEEP, DISCARD, CRASH and NOT_JUDGED counts of experiment rows: a run that judged nothing is
    counted as not judged, not as the DISCARD (or CRASH) its verdict line says."""
    out = {"KEEP": 0, "DISCARD": 0, "CRASH": 0, NOT_JUDGED: 0}
    for r in rows:
        status = r.status
        if status in out:
            out[status if row_judged(r) else NOT_JUDGED] += 1
    return out
