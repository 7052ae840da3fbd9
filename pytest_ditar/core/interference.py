"""Interference from the side that is not being timed, seen directly and in the numbers.

Pausing a worker (SIGSTOP) stops its host threads, not the device work it queued: a candidate
that leaves kernels running after its own device sync slows whichever side is timed next, and
on the H200 an unchanged candidate doing so looked 1.6x faster than its champion. Two signals:

- Direct: before every timed call the worker launches one tiny kernel and times it (its "idle
  probe", judge code in the worker process). On an idle GPU that takes tens of microseconds; with
  another process's work queued the device time-slices between contexts and it waits for the
  other context's slice (milliseconds). A probe over the limit voids its round, and names the
  side whose call ran just before it.
- In the numbers: a reference side's calls made right after a candidate call, against its calls
  made right after a reference call (the round order is random, so both kinds exist). An honest
  candidate leaves nothing behind; one that does shows as a reference slowed only after it.

Pure functions over per-round records; runtime.lanes records, loop.perf.lanes applies.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pytest_ditar.core import stats
from pytest_ditar.core.distributions import mannwhitneyu_p

PROBE_FLOOR_S = 1e-3  # an idle probe above this (and PROBE_RATIO x the side's idle level) saw foreign work
PROBE_RATIO = 20.0
REPEATED = 2  # rounds with foreign work before the lane is UNSTABLE, not only re-timed


@dataclass(frozen=True)
class Foreign:
    round: int
    side: str  # whose call started on a busy device
    before: str  # whose call ran just before it (the likely source)
    probe_s: float


def call_sequence(orders: Sequence[str]) -> list[tuple[int, str]]:
    """(round, side) of every timed call in the order they ran; `orders` holds each round's
    order as side initials (c candidate, h champion, t twin, a anchor: core.anchor)."""
    names = {"c": "candidate", "h": "champion", "t": "twin", "a": "anchor"}
    return [(i, names[ch]) for i, o in enumerate(orders) for ch in o]


def foreign_work(probes: Mapping[str, Sequence[float]], orders: Sequence[str],
                 floor_s: float = PROBE_FLOOR_S, ratio: float = PROBE_RATIO) -> list[Foreign]:
    """Calls whose idle probe says another context had work queued on the device."""
    seq = call_sequence(orders)
    seen: dict[str, int] = {}
    # the side's idle level: a low quantile, since a candidate that leaves work behind after every
    # call makes most of a reference's probes busy (its median would hide them)
    idle = {side: float(np.percentile(v, 10)) for side, v in probes.items() if len(v)}
    out = []
    prev = ""
    for rnd, side in seq:
        k = seen.get(side, 0)
        seen[side] = k + 1
        vals = probes.get(side, ())
        if k < len(vals):
            p = float(vals[k])
            if p > max(floor_s, ratio * idle.get(side, 0.0)):
                out.append(Foreign(rnd, side, prev or "nothing", p))
        prev = side
    return out


def describe(found: Sequence[Foreign], pids: Mapping[str, int]) -> str:
    """The UNSTABLE reason, naming the worker that ran just before each busy start (a busy start
    of the candidate's own call may also be its own earlier work: its probe waits for that too)."""
    refs = [f for f in found if f.side != "candidate"] or list(found)
    who = sorted({f.before for f in refs})
    first = refs[0]
    named = ", ".join(f"the {w}'s worker (pid {pids[w]})" if w in pids else f"the {w}" for w in who)
    own = " (or its own earlier work)" if first.side == "candidate" else ""
    return (f"interference: GPU work was still queued when a timed call started in {len(found)} call(s) "
            f"(first: round {first.round + 1}, the {first.side}'s call, idle probe {first.probe_s * 1e3:.1f} ms); "
            f"it ran just after {named}{own}")


@dataclass(frozen=True)
class AfterCandidate:
    side: str
    slowdown: float  # median after the candidate / median after a reference, minus 1
    p: float
    after: int
    other: int
    high: float = math.inf  # the slowdown's 97.5% percentile-bootstrap upper bound

    def reason(self) -> str:
        return (f"interference: the {self.side} ran {self.slowdown * 100:.1f}% slower in the {self.after} calls right "
                f"after the candidate's than in the {self.other} after another side's (p={self.p:.2g}): the "
                f"candidate's work outlives its timed call")

    def floor(self, low: float) -> float:
        """A speedup's lower bound `low` with this slowdown's upper bound charged to the candidate.
        Work the candidate left behind costs the champion up to `high` of its own call, so the
        candidate's real call is its timed one plus that; and the champion's median may itself be
        inflated by up to `high`: the true speedup is at least 1 / ((1 + high) / low + high)."""
        if low <= 0 or not math.isfinite(self.high):
            return 0.0
        return 1.0 / ((1.0 + self.high) / low + self.high)


def after_candidate(samples: Mapping[str, Sequence[float]], orders: Sequence[str], side: str,
                    void: Sequence[bool] = ()) -> AfterCandidate | None:
    """A reference side's calls right after a candidate call against its calls right after a
    reference call (one-sided Mann-Whitney: slower after the candidate). None with fewer than
    3 calls of either kind."""
    seq = call_sequence(orders)
    vals = list(samples.get(side, ()))
    after: list[float] = []
    other: list[float] = []
    k, prev = 0, ""
    for rnd, s in seq:
        if s == side:
            if k < len(vals) and prev and not (rnd < len(void) and void[rnd]):
                (after if prev == "candidate" else other).append(vals[k])
            k += 1
        prev = s
    if len(after) < 3 or len(other) < 3:
        return None
    p = mannwhitneyu_p(after, other, "greater")
    slow = float(np.median(after) / np.median(other) - 1.0)
    high = stats.bootstrap_ratio_ci(after, other, n_boot=1000)[1] - 1.0  # two-sided 95%: its 97.5% bound
    return AfterCandidate(side, slow, p, len(after), len(other), high)


def slowed_side(samples: Mapping[str, Sequence[float]], orders: Sequence[str], threshold: float,
                alpha: float, void: Sequence[bool] = ()) -> AfterCandidate | None:
    """The champion's or the twin's slowdown right after the candidate's calls where it is shown
    (beyond the lane's threshold, at `alpha`), else None."""
    for side in ("champion", "twin"):
        r = after_candidate(samples, orders, side, void)
        if r is not None and r.p < alpha and r.slowdown > max(threshold, 0.0) and math.isfinite(r.slowdown):
            return r
    return None
