"""A lane's verdict, composed once: its evidence in, its LaneOutcome out (issue 51).

loop.perf.lanes and loop.perf.lanekinds gather what a lane measured and what its checks found (loop.perf.lanechecks:
the total time, the tail's calls; core.anchor's drift; core.interference's slowed reference; the
GPU's exclusivity) into one frozen LaneEvidence, and `compose` is the one place an outcome is made
from it: nothing rewrites it afterwards (tests/integration/repo/test_one_outcome_site.py).

The rules, in their order of precedence:
1. A failed audit of a timed output or a caching candidate voids the timing: REJECTED. Fewer than
   MIN_ROUNDS rounds a side: MISSING. Foreign GPU work at the start of timed calls in
   core.interference.REPEATED rounds: UNSTABLE, cause interference.
2. Else the statistics' verdict (core.stats, core.sequential, core.guard's looks), then
   - the total time a median may hide (core.meantime: TotalCheck),
   - the tail rule's calls before a KEEP (TailCheck),
   - the champion's drift against the anchor (core.anchor),
   - the speed-up net of the harness's round trip and the throttled rounds, named,
   - a reference slowed right after the candidate's calls (core.interference.AfterCandidate).
3. A GPU another process used during the lane makes any of these UNSTABLE, cause shared_device.
A memory lane is judged on its peaks (MemoryPeaks) in place of rules 1 and 2.
Rules read the checks' `cause` fields, never their words.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from pytest_ditar.core import anchor, interference, stats
from pytest_ditar.core.decision import LaneOutcome
from pytest_ditar.core.roundtrip import Net
from pytest_ditar.core.vocabulary import DRIFT, INTERFERENCE, SHARED_DEVICE

MIN_ROUNDS = 3  # fewer rounds a side: nothing to compare (MISSING)
MEMORY_FLOOR_GIB = 1 / 64  # 16 MiB: a difference below it is the allocator's and the host's own, never a regression

# TotalCheck.cause: what the summed time of the paired rounds showed (core.meantime)
TOTAL_SLOWER = "total_slower"  # shown slower beyond the tolerance (meantime.mean_loss)
TOTAL_UNPROVEN = "total_unproven"  # not shown within the tolerance (meantime.total_unproven)
ONE_ROUND = "one_round"  # not shown within it only through the candidate's slowest round
# TailCheck.cause: the tail rule's calls (core.meantime.TAIL_CALLS)
FEW_CALLS = "few_calls"  # fewer timed calls than the rule asks
TAIL_UNPROVEN = "tail_unproven"  # the confirming calls counted, the total is not shown within the tolerance
TAIL_SHOWN = "tail_shown"  # the confirming calls counted, the total is within it


@dataclass(frozen=True)
class Statistic:
    """What the lane's statistics said of its rounds: a verdict, its speed-up and CI, in words."""

    verdict: str
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    said: str


@dataclass(frozen=True)
class TotalCheck:
    """The paired rounds' summed time against the champion's (loop.perf.lanechecks.total)."""

    cause: str | None  # TOTAL_SLOWER, TOTAL_UNPROVEN, ONE_ROUND or None: nothing found
    said: str = ""
    reads_slower: bool = False  # the total's own ratio below 1 - tolerance (named on a loss by the median)


@dataclass(frozen=True)
class TailCheck:
    """The candidate's timed calls against the tail rule's (loop.perf.lanechecks.tail)."""

    cause: str | None  # FEW_CALLS, TAIL_UNPROVEN, TAIL_SHOWN or None: enough calls, none confirming
    calls: int  # the calls the rule asks for
    made: int  # the candidate's timed calls: its rounds and its confirming calls
    confirming: int
    said: str = ""


@dataclass(frozen=True)
class MemoryPeaks:
    """A memory lane's peaks per call, by side, in GiB (None: unreadable), and its tolerance."""

    candidate: tuple[float | None, ...]
    champion: tuple[float | None, ...]
    tolerance: float


@dataclass(frozen=True)
class LaneEvidence:
    """Everything a lane's verdict is made of. Checks that did not run are None (or empty)."""

    name: str
    objective: bool
    peak_vram_gib: float | None = None
    audit_failure: str | None = None  # the first timed output that failed its audit
    caching: str | None = None  # core.probes.caching's finding
    champion_rounds: int = 0
    candidate_rounds: int = 0
    foreign: tuple[interference.Foreign, ...] = ()  # timed calls that started on a busy device
    pids: Mapping[str, int] = field(default_factory=dict)  # each side's worker, to name the busy one
    statistic: Statistic | None = None
    threshold: float | None = None  # the lane's min effect: a win must clear 1 + threshold
    total: TotalCheck | None = None
    strict: bool = False  # `--ditar-guard`: a guard lane's total not shown fails, one round or not
    tail: TailCheck | None = None
    drift: anchor.AnchorDrift | None = None
    net: Net | None = None
    throttled: str | None = None  # the throttled rounds, voided and re-timed (core.devstate.throttle_note)
    slowed: interference.AfterCandidate | None = None
    tolerance: float = 0.05  # the guard tolerance: the bar of a guard lane's pass under interference
    shared_device: str | None = None  # hardware.exclusivity's report where another process used the GPU
    memory: MemoryPeaks | None = None


@dataclass(frozen=True)
class _Draft:
    """The outcome while its rules apply, in the order `compose` gives them."""

    verdict: str
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    reason: str = ""
    cause: str | None = None
    drift: float | None = None
    figure: str | None = None


def compose(ev: LaneEvidence) -> LaneOutcome:
    """The lane's outcome from its evidence: the only place one is made."""
    d = _memory(ev.memory) if ev.memory is not None else _timed(ev)
    if ev.shared_device is not None:
        d = replace(d, verdict=stats.UNSTABLE, reason=ev.shared_device, cause=SHARED_DEVICE)
    judged = ev.statistic is not None and voided(ev) is None
    return LaneOutcome(ev.name, ev.objective, d.verdict, d.speedup, d.ci_low, d.ci_high, d.reason, ev.peak_vram_gib,
                       cause=d.cause, drift=d.drift, threshold=ev.threshold if judged else None, figure=d.figure,
                       net=_net(d.speedup, ev.net))


def _net(speedup: float | None, net: Net | None) -> float | None:
    """The decided speedup scaled by what taking the round trip off does to the medians' ratio."""
    if speedup is None or net is None or not net.gross > 0:
        return None
    return speedup * net.net / net.gross


def voided(ev: LaneEvidence) -> str | None:
    """The verdict that voids the lane's timing before its statistics (rule 1), or None: its
    statistics are worth computing (loop.perf.lanes asks before it does)."""
    d = _void(ev)
    return None if d is None else d.verdict


def _void(ev: LaneEvidence) -> _Draft | None:
    if ev.audit_failure:
        return _Draft("REJECTED", reason=ev.audit_failure)
    if ev.caching:
        return _Draft("REJECTED", reason=ev.caching)
    if min(ev.champion_rounds, ev.candidate_rounds) < MIN_ROUNDS:
        return _Draft("MISSING", reason="no champion samples to compare with")
    if len(ev.foreign) >= interference.REPEATED:
        return _Draft(stats.UNSTABLE, reason=interference.describe(ev.foreign, ev.pids), cause=INTERFERENCE)
    return None


def _timed(ev: LaneEvidence) -> _Draft:
    void = _void(ev)
    if void is not None:
        return void
    if ev.statistic is None:
        raise ValueError(f"lane {ev.name!r}: its timing stands but no statistic was computed")
    s = ev.statistic
    d = _Draft(s.verdict, s.speedup, s.ci_low, s.ci_high, s.said)
    if ev.total is not None:
        d = _total(d, ev.total, strict=ev.strict)
    if ev.tail is not None and ev.objective:
        d = _tail(d, ev.tail)
    d = _drift(d, ev.drift, ev.objective, ev.threshold)
    if ev.net is not None and d.speedup is not None:
        d = replace(d, reason=f"{d.reason}; {ev.net.describe()}")
    if ev.throttled:
        d = replace(d, reason=f"{d.reason}; {ev.throttled}")
    if ev.slowed is not None:
        d = _interference(d, ev.slowed, ev.objective, ev.threshold, ev.tolerance)
    return d


def _total(d: _Draft, found: TotalCheck, *, strict: bool) -> _Draft:
    """What the user pays is the sum of calls (core.meantime). A win, or a guard lane within
    tolerance, whose summed time is shown slower beyond the guard tolerance is neither; nor is an
    objective lane too noisy to decide by its median (one not faster by it has the loss named). A
    lane that wins by its median (the objective lane FASTER, a guard lane whose median is shown
    faster) must also show its total within the tolerance: else the objective lane is NOT_FASTER
    and a guard lane REGRESSED. Where the candidate's slowest round alone makes the difference (a
    host's stall, or a slow share the rounds hit once), the objective lane is UNSTABLE (not judged:
    it runs once more) and a guard lane of a gated run stays as it was; `strict` (--ditar-guard)
    fails it."""
    if d.verdict not in (stats.FASTER, stats.OK, stats.UNSTABLE, stats.NOT_FASTER) or found.cause is None:
        return d
    if found.cause == TOTAL_SLOWER:
        if d.verdict == stats.OK:
            return replace(d, verdict=stats.REGRESSED, reason=f"{found.said}; {d.reason}")
        by_median = {stats.FASTER: "faster by its median call", stats.NOT_FASTER: "not faster by its median call"
                     }.get(d.verdict, "undecided by its median call")
        return replace(d, verdict=stats.NOT_FASTER, reason=f"{by_median}, but {found.said}; {d.reason}")
    if d.verdict == stats.NOT_FASTER:  # named where the total itself reads slower, not for an A/A's noise
        if found.reads_slower:
            return replace(d, reason=f"not faster by its median call, and {found.said}; {d.reason}")
        return d
    wins = d.verdict == stats.FASTER or (d.verdict == stats.OK and (d.ci_low or 0.0) > 1.0)
    if not wins:
        return d
    single = found.cause == ONE_ROUND
    if d.verdict == stats.FASTER:
        if single:
            return replace(d, verdict=stats.UNSTABLE, reason=f"faster by its median call, but {found.said}, from one "
                                                             f"round (a stall, or a slow share hit once); {d.reason}")
        return replace(d, verdict=stats.NOT_FASTER, reason=f"faster by its median call, but {found.said}; {d.reason}")
    if single and not strict:
        return d
    return replace(d, verdict=stats.REGRESSED, reason=f"faster by its median call, but {found.said}; {d.reason}")


def _tail(d: _Draft, found: TailCheck) -> _Draft:
    """No KEEP before the candidate's timed calls would have met a slow share of 5% with 99%
    (core.meantime.TAIL_CALLS): its rounds and its confirming calls are counted, and the total-time
    rule judges them (core.meantime.confirmed_total). Too few calls (the budget or a failure ended
    the confirmation) is UNSTABLE: not judged. So is a total the confirming calls alone fail: they
    are timed unpaired, after the rounds, and a busier host in those seconds reads as a tail (an
    honest 1.2x under torch bursts was a judged loss 2 times in 5); never a KEEP, it runs again, and
    a real tail met again in the paired rounds is judged there (TotalCheck)."""
    if d.verdict != stats.FASTER:
        return d
    if found.cause == FEW_CALLS:
        return replace(d, verdict=stats.UNSTABLE,
                       reason=f"faster by its median call over {found.made} timed calls, fewer than the {found.calls} "
                              f"that meet a 5% share of slow calls with 99%; {d.reason}")
    if found.cause == TAIL_SHOWN:
        return replace(d, reason=f"{d.reason}; {found.confirming} confirming calls of the candidate alone, "
                                 f"its total time within the tolerance")
    if found.cause == TAIL_UNPROVEN:
        return replace(d, verdict=stats.UNSTABLE, cause=None,
                       reason=f"faster by its median call, but {found.said}, shown only with its confirming calls "
                              f"timed alone (unpaired: the host's load then cannot be told from a tail): not judged; "
                              f"{d.reason}")
    return d


def _drift(d: _Draft, drift: anchor.AnchorDrift | None, objective: bool, threshold: float | None) -> _Draft:
    """The objective lane whose champion reads slower against the anchor than when kept (core.anchor):
    a win the drift's upper bound could explain is UNSTABLE: cause drift (the champion's doing) where
    the drift is shown, no cause (the host's noise: run again) where it only reads worse; a win that
    clears it stands, the drift named; any other verdict stands, a shown drift named (a loss against
    a slowed champion is a loss)."""
    if drift is None or not (drift.shown or drift.worse):
        return d
    if not (objective and d.verdict == stats.FASTER):
        return replace(d, drift=drift.taken_off, reason=f"{d.reason}; {drift.reason()}") if drift.shown else d
    void, said = anchor.charge(d.ci_low or 0.0, 1.0 + (threshold or 0.0), drift)
    if void:
        what = drift.reason() if drift.shown else f"{drift.reason()}, not shown to drift"
        return replace(d, verdict=stats.UNSTABLE, cause=DRIFT if drift.shown else None, drift=drift.taken_off,
                       reason=f"{what}; {said} ({d.reason})")
    return replace(d, drift=drift.taken_off, reason=f"{d.reason}; {said}; {drift.reason()}")


def _interference(d: _Draft, slowed: interference.AfterCandidate, objective: bool, threshold: float | None,
                  tolerance: float) -> _Draft:
    """A reference slowed right after the candidate's calls flatters the candidate, so a verdict
    against it (a loss, a regression, a total time not shown) stands, the interference named. A win
    (a guard lane's pass) stands only where its lower bound still clears the bar with the slowdown's
    upper bound charged to the candidate (AfterCandidate.floor): an honest 2x win is not voided by a
    cold cache after another process's call; work the candidate left behind is counted as its own.
    Else the lane is UNSTABLE, cause interference (not judged: run once more)."""
    why = slowed.reason()
    if d.verdict not in (stats.FASTER, stats.OK):
        return replace(d, reason=f"{d.reason}; {why}")
    bar = 1.0 + (threshold or 0.0) if objective else 1.0 - tolerance
    floor = slowed.floor(d.ci_low or 0.0)
    charged = f"charged with up to {slowed.high * 100:.1f}% of the {slowed.side}'s call, its lower bound {floor:.3f}x"
    if floor > bar:
        return replace(d, reason=f"{d.reason}; {why}; {charged} still clears {bar:.3f}x")
    return replace(d, verdict=stats.UNSTABLE, cause=INTERFERENCE, reason=f"{why}; {charged} does not clear {bar:.3f}x")


def _memory(peaks: MemoryPeaks) -> _Draft:
    """REGRESSED where the candidate's median peak exceeds the champion's by more than the tolerance
    (and MEMORY_FLOOR_GIB) with every call of it above every call of the champion's; OK otherwise;
    MISSING where the candidate's peaks are unreadable or no champion was measured beside it."""
    cand = [x for x in peaks.candidate if x is not None]
    champ = [x for x in peaks.champion if x is not None]
    tol = peaks.tolerance
    if not cand:
        return _Draft("MISSING", reason="the candidate's peak memory could not be read in its worker")
    c = statistics.median(cand)
    if not champ:
        return _Draft("MISSING", reason=f"peak {c:.3f} GiB; no champion measured beside it to compare with",
                      figure=f"{c:.3f} GiB")
    h = statistics.median(champ)
    grown = c / h - 1.0 if h > 0 else math.inf
    figure = f"{c:.3f} GiB ({grown * 100:+.1f}%)"
    said = f"peak {c:.3f} GiB against the champion's {h:.3f} GiB ({grown * 100:+.1f}%, median of {len(cand)} calls)"
    if grown > tol and c - h > MEMORY_FLOOR_GIB and min(cand) > max(champ):
        return _Draft(stats.REGRESSED, reason=f"{said}: more than the tolerance of {tol:.0%}", figure=figure)
    return _Draft(stats.OK, reason=f"{said}: within the tolerance of {tol:.0%}", figure=figure)


def memory_peaks(peaks: Mapping[str, Sequence[float | None]], tolerance: float) -> MemoryPeaks:
    """A memory lane's MemoryPeaks from runtime.peaks' per-side lists."""
    return MemoryPeaks(tuple(peaks.get("candidate", ())), tuple(peaks.get("champion", ())), tolerance)
