"""The KEEP / DISCARD / CRASH rule, as a pure function of what the gate observed.

No pytest, no git, no I/O: the plugin gathers guard results, quality and lane outcomes and run
errors, and this module turns them into one decision plus the greppable verdict line. Keeping it
pure means every rule and its precedence is unit-testable without a GPU or a repository.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pytest_ditar.core import vocabulary as v
from pytest_ditar.core.rerun import R
from pytest_ditar.core.vocabulary import (
    CLASSES,
    ERROR_KINDS,
    LANE_CAUSES,
    LANE_VERDICTS,
    STATUSES,
    Status,
)

__all__ = [
    "CLASS_ORDER",
    "ERROR_KINDS",
    "LANE_VERDICTS",
    "STATUSES",
    "Decision",
    "GuardResult",
    "LaneOutcome",
    "QualityOutcome",
    "RunError",
    "cumulative_class",
    "decide",
    "validate_class",
    "verdict_line",
]

# Loosest last: a branch's cumulative class is the loosest class any kept commit claimed.
CLASS_ORDER: tuple[str, ...] = CLASSES


@dataclass(frozen=True)
class GuardResult:
    """One pre/post-run guard (branch, clean_tree, mutable_only, fixed_paths, ...)."""

    name: str
    ok: bool
    reason: str = ""


@dataclass(frozen=True)
class QualityOutcome:
    """Aggregate of the per-item quality tests of one run.

    `failures` holds "item_id: metric x < threshold" lines, in corpus order. The class claim is
    the separate check that the candidate's declared classification is allowed (e.g. semantic
    metrics available for "approximate", zero regression for "quantization").
    """

    passed: int
    total: int
    failures: tuple[str, ...] = ()
    class_claim_ok: bool = True
    class_claim_reason: str = ""
    # "holdout seed N: ..." lines: contracts broken on fresh seeds drawn at run time.
    holdout_failures: tuple[str, ...] = ()


@dataclass(frozen=True)
class LaneOutcome:
    """Statistics verdict of one performance lane against the champion."""

    name: str
    objective: bool
    verdict: str
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    reason: str = ""
    peak_vram_gib: float | None = None
    # why a lane is what it is, where a rule reads it (rules read this, never the reason's words):
    # one of core.vocabulary.LANE_CAUSES (drift, not_kept_build, interference, shared_device)
    cause: str | None = None
    drift: float | None = None  # the champion's drift against the anchor taken off a win (core.anchor, upper bound)
    threshold: float | None = None  # the bar a win must clear: 1 + threshold (the lane's min effect)
    figure: str | None = None  # what a lane with no speedup measured, in words, for tables (loop.perf.lanekinds)
    # the speedup with the harness's round trip taken off (core.roundtrip): cited (core.cumulative), never deciding
    net: float | None = None

    def __post_init__(self) -> None:
        if self.verdict not in LANE_VERDICTS:
            raise ValueError(
                f"lane {self.name!r}: unknown verdict {self.verdict!r}; "
                f"valid: {', '.join(LANE_VERDICTS)}"
            )
        if self.cause is not None and self.cause not in LANE_CAUSES:
            raise ValueError(f"lane {self.name!r}: unknown cause {self.cause!r}; valid: {', '.join(LANE_CAUSES)}")


@dataclass(frozen=True)
class RunError:
    """A harness/candidate failure; any of these makes the run a CRASH.

    `item` and `seconds` are optional detail for non_finite/oom and timeout messages; `where` is
    the candidate's own frame that raised ("mutable/pipeline.py:57 in generate"), so the reason
    alone says where to look.
    """

    kind: str
    message: str
    item: str | None = None
    seconds: float | None = None
    where: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ERROR_KINDS:
            raise ValueError(
                f"unknown run error kind {self.kind!r}; valid: {', '.join(ERROR_KINDS)}"
            )

    def describe(self) -> str:
        """Human reason for the ledger and verdict line, ending with the candidate's frame if known."""
        return self._what() + (f" ({self.where})" if self.where else "")

    def _what(self) -> str:
        detail = f": {self.message}" if self.message else ""
        if self.kind == "exception":
            return f"candidate raised: {self.message or 'unknown error'}"
        if self.kind == "non_finite":
            where = f" in item {self.item}" if self.item else ""
            return f"non-finite output{where}{detail}"
        if self.kind == "oom":
            where = f" in item {self.item}" if self.item else ""
            return f"out of memory{where}{detail}"
        # timeout
        after = f" after {self.seconds:g}s" if self.seconds is not None else ""
        return f"timeout{after}{detail}"


@dataclass(frozen=True)
class Decision:
    status: Status
    reason: str  # the deciding (first) reason
    reasons: tuple[str, ...]  # every objection found, in rule order (a KEEP's: its own, then its notes)
    unmeasured: tuple[str, ...] = ()  # a KEEP's guard lanes that could not be measured (UNSTABLE, MISSING)
    judged: bool = True  # False: the gate could not judge the change itself (core.rerun.judged)
    rerun_of: int | None = None  # the run that first tried this change on this champion, unjudged
    # why it was not judged (core.rerun.unjudged_cause: host, candidate, champion), "" where it was
    unjudged: str = ""
    lane_cause: str | None = None  # the objective lane's cause (LaneOutcome.cause), which core.rerun reads
    # what each reason is, beside `reasons` (core.vocabulary.OBJECTION_CAUSES): rules read these
    causes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.causes and len(self.causes) != len(self.reasons):
            raise ValueError(f"decision: {len(self.causes)} causes for {len(self.reasons)} reasons")
        unknown = [c for c in self.causes if c not in v.OBJECTION_CAUSES]
        if unknown:
            raise ValueError(f"decision: unknown cause {unknown[0]!r}; valid: {', '.join(v.OBJECTION_CAUSES)}")

    @classmethod
    def crash(cls, reason: str, cause: str, also: Sequence[tuple[str, str]] = ()) -> Decision:
        """A CRASH for `reason` of `cause`, then (reason, cause) pairs `also` found."""
        return cls("CRASH", reason, (reason, *(r for r, _ in also)), causes=(cause, *(c for _, c in also)))

    def objections(self) -> tuple[tuple[str, str], ...]:
        """(reason, cause) of every objection: none for a KEEP."""
        return () if self.status == "KEEP" else tuple(zip(self.reasons, self.causes, strict=True))


def validate_class(name: str) -> str:
    """Return the canonical class name, or raise ValueError listing the valid ones."""
    canon = name.strip().lower() if isinstance(name, str) else name
    if canon not in CLASS_ORDER:
        raise ValueError(
            f"unknown classification {name!r}; valid: {', '.join(CLASS_ORDER)}"
        )
    return canon


def cumulative_class(classes: Iterable[str]) -> str:
    """The loosest class among `classes` ("exact" when there are none)."""
    rank = max((CLASS_ORDER.index(validate_class(c)) for c in classes), default=0)
    return CLASS_ORDER[rank]


def _fmt(x: float | None, digits: int = 3) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:.{digits}f}"


def _speed_text(lane: LaneOutcome) -> str:
    speed = "n/a" if _fmt(lane.speedup) == "n/a" else f"{_fmt(lane.speedup)}x"
    return f"speedup {speed} ci95 [{_fmt(lane.ci_low)},{_fmt(lane.ci_high)}]"


def _with_reason(text: str, reason: str) -> str:
    return f"{text}: {reason}" if reason else text


def decide(
    *,
    guards: Sequence[GuardResult],
    quality: QualityOutcome | None,
    lanes: Sequence[LaneOutcome],
    errors: Sequence[RunError],
    vram_budget_gib: float | None,
    expected_items: int,
) -> Decision:
    """Apply the gate rules in order. Status comes from the first category that objects
    (errors -> CRASH, everything else -> DISCARD); every objection is collected so the ledger
    shows the full picture, not just the first failure."""
    crash: list[tuple[str, str]] = [(e.describe(), v.CANDIDATE_ERROR) for e in errors]
    discard: list[tuple[str, str]] = []

    discard += [(_with_reason(f"guard {g.name}", g.reason or "failed"), v.GUARD) for g in guards if not g.ok]
    discard += _quality_objections(quality, expected_items)
    objective = next((lane for lane in lanes if lane.objective), None)
    discard += _objective_objections(objective)
    discard += _guard_lane_objections([lane for lane in lanes if not lane.objective])
    discard += _vram_objections(lanes, vram_budget_gib)

    found = crash + discard
    reasons, causes = tuple(r for r, _ in found), tuple(c for _, c in found)
    lane_cause = objective.cause if objective is not None else None
    if crash:
        return Decision("CRASH", reasons[0], reasons, causes=causes, lane_cause=lane_cause)
    if discard:
        return Decision("DISCARD", reasons[0], reasons, causes=causes, lane_cause=lane_cause)
    assert objective is not None  # no objection implies a FASTER objective lane
    keep = f"lane {objective.name} faster: {_speed_text(objective)}"
    # A KEEP stands on its objective lane. Guard lanes guard against regressions: one that could not
    # be measured (a shared GPU, no champion samples) shows none, so it blocks nothing, but it is
    # said on the verdict line and in the reasons, never hidden. (A champion's drift against the
    # anchor voids the objective lane's win before this: core.laneoutcome, core.anchor.)
    unmeasured = [lane for lane in lanes if not lane.objective and lane.verdict in UNMEASURED]
    notes = tuple(_with_reason(f"guard lane {lane.name} not measured ({lane.verdict})", lane.reason)
                  for lane in unmeasured)
    return Decision("KEEP", keep, (keep, *notes), tuple(lane.name for lane in unmeasured),
                    causes=(v.FASTER, *(v.UNMEASURED for _ in notes)))


def _quality_objections(quality: QualityOutcome | None, expected_items: int) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    if quality is None or quality.total < expected_items:
        got = 0 if quality is None else quality.total
        found.append((f"incomplete quality run: {got}/{expected_items} items", v.QUALITY))
    if quality is None:
        return found
    # Checked even on an incomplete run: a failure among the items that ran is still news.
    if quality.passed < quality.total:
        failed = quality.total - quality.passed
        first = quality.failures[0] if quality.failures else ""
        found.append((_with_reason(f"quality {failed}/{quality.total} failed", first), v.QUALITY))
    if not quality.class_claim_ok:
        found.append((f"class claim: {quality.class_claim_reason or 'not allowed'}", v.CLASS_CLAIM))
    return found + [(h, v.HOLDOUT) for h in quality.holdout_failures]


def _objective_objections(objective: LaneOutcome | None) -> list[tuple[str, str]]:
    if objective is None:
        return [("no objective lane ran", v.OBJECTIVE_MISSING)]
    if objective.verdict == "MISSING":
        return [(_with_reason(f"objective lane {objective.name} missing", objective.reason), v.OBJECTIVE_MISSING)]
    if objective.verdict == "REJECTED":
        return [(f"lane {objective.name} rejected: {objective.reason}", v.OBJECTIVE_REJECTED)]
    if objective.verdict == "UNSTABLE":
        return [(f"lane {objective.name} unstable: {objective.reason or _speed_text(objective)}",
                 v.OBJECTIVE_UNSTABLE)]
    if objective.verdict != "FASTER":
        return [(_with_reason(f"lane {objective.name} not faster than champion: {_speed_text(objective)}",
                              objective.reason), v.NOT_FASTER)]
    return []


def _guard_lane_objections(guard_lanes: Sequence[LaneOutcome]) -> list[tuple[str, str]]:
    found = [(_with_reason(f"guard lane {lane.name} regressed", lane.reason), v.GUARD_LANE)
             for lane in guard_lanes if lane.verdict == "REGRESSED"]
    found += [(f"guard lane {lane.name} rejected: {lane.reason}", v.GUARD_LANE)
              for lane in guard_lanes if lane.verdict == "REJECTED"]
    # Work that outlives the candidate's timed calls voids a guard lane too: left as "unstable" it
    # would hide a regression there behind a champion it slowed (core.interference).
    return found + [(f"guard lane {lane.name} unstable: {lane.reason}", v.GUARD_LANE) for lane in guard_lanes
                    if lane.verdict == "UNSTABLE" and lane.cause == v.INTERFERENCE]


def _vram_objections(lanes: Sequence[LaneOutcome], vram_budget_gib: float | None) -> list[tuple[str, str]]:
    if vram_budget_gib is None:
        return []
    # A non-finite peak cannot prove it fits, so it fails closed.
    return [(f"peak VRAM {_fmt(lane.peak_vram_gib, 2)} GiB > budget {vram_budget_gib:.2f} GiB (lane {lane.name})",
             v.VRAM) for lane in lanes if lane.peak_vram_gib is not None
            and not (math.isfinite(lane.peak_vram_gib) and lane.peak_vram_gib <= vram_budget_gib)]


# Guard-lane verdicts that measured nothing: on a KEEP, the lane is named (verdict_line `unmeasured=`).
# (An UNSTABLE guard lane whose cause is interference is a DISCARD before this; see decide.)
UNMEASURED: tuple[str, ...] = ("UNSTABLE", "MISSING")


_TOKEN_WS = re.compile(r"\s+")


def _token(value: object) -> str:
    """A key=value field must stay one whitespace-free token so the line splits cleanly."""
    text = "" if value is None else str(value).strip()
    return _TOKEN_WS.sub("_", text) or "n/a"


def verdict_line(
    decision: Decision,
    *,
    lane: str | None,
    speedup: float | None,
    ci_low: float | None,
    ci_high: float | None,
    quality_pass: int | None,
    quality_total: int | None,
    judged_class: str | None,
    commit: str | None,
    off_target: bool,
    sandbox_off: bool = False,
) -> str:
    """The last line of every gated run, e.g.
    `DITAR VERDICT: KEEP lane=latency_b1 speedup=1.183x ci95=[1.171,1.195] quality=32/32
    class=exact commit=abc1234` (one line), plus ` reason="..."` unless KEEP,
    ` unmeasured=throughput_b8` (comma-separated) for a KEEP's guard lanes that could not be measured,
    ` off_target=1` for off-target hardware and ` sandbox=off` where the project owner turned the
    workers' sandbox off."""
    speed = _fmt(speedup)
    quality = (
        "n/a"
        if quality_pass is None or quality_total is None
        else f"{quality_pass}/{quality_total}"
    )
    parts = [
        f"DITAR VERDICT: {decision.status}",
        f"lane={_token(lane)}",
        f"speedup={speed if speed == 'n/a' else speed + 'x'}",
        f"ci95=[{_fmt(ci_low)},{_fmt(ci_high)}]",
        f"quality={quality}",
        f"class={_token(judged_class)}",
        f"commit={_token(commit)}",
    ]
    if decision.status != "KEEP":
        one_line = re.sub(r"[\r\n]+", " ", decision.reason).strip()
        escaped = one_line.replace("\\", "\\\\").replace('"', '\\"')
        parts.append(f'reason="{escaped}"')
    if decision.status == "KEEP" and decision.unmeasured:
        parts.append(f"unmeasured={_token(','.join(decision.unmeasured))}")
    if off_target:
        parts.append("off_target=1")
    if sandbox_off:
        parts.append("sandbox=off")
    return " ".join(parts)


def kept_rows(rows: Iterable[R]) -> list[R]:
    """The KEEP rows of a ledger, oldest first: the last one is the champion (champion_row)."""
    return [r for r in rows if r.status == "KEEP"]


def champion_row(rows: Iterable[R]) -> R | None:
    """The champion's ledger row, the last KEEP; None before any (then the baseline is the
    champion: loop.run.champion.commit). Every reader of the champion asks here."""
    kept = kept_rows(rows)
    return kept[-1] if kept else None

