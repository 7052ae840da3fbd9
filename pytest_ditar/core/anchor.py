"""Champion drift against an anchor the agent never wrote (issue 49).

The objective lane times the baseline's own code (the anchor: built from the baseline commit's git
objects, as the holdout's reference is) in the same randomized rounds as the champion. A busier
host slows both, so the champion's time over the anchor's, paired by round, does not move with the
host; a champion that slows itself after its KEEP (a file under $HOME, the date, a marker in a
cache) moves it. Drift is that paired ratio now against the same ratio recorded when the champion
was kept (the baseline's own is 1): shown when an exact one-sided sign test at the gate's alpha
says the rounds' ratios lie above the recorded one AND their median is more than `minimum` (5%)
above it. Whenever the ratio reads worse at all, its upper bound comes off a win (`charge`): the
recorded ratio is another run's, and between runs it moved 4-7% on a loaded 2-core box, so a 10%
self-slowing read 4.7% (p=0.055) once and its A/A-like successor was KEPT at 1.116x when only a
shown drift was charged.

Pure: per-round seconds in, a ratio or a drift out. It replaces the comparison of the champion's
in-run times with its stored samples, which could not tell a busier host from a slower champion
(an honest 1.2x voided in 6 of 7 runs under load) and let a 10% self-slowdown under its 25% CPU
floor through.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pytest_ditar.core import distributions as _dist
from pytest_ditar.core.vocabulary import NOT_THE_KEPT_BUILD

MIN_ROUNDS = 6  # fewer paired rounds say nothing about a ratio
MIN_DRIFT = 0.05  # a ratio worse by less than this is not called drift (perf.drift_tolerance)
# The anchor is timed in a lane's first ROUNDS rounds, and only while its calls have cost under
# BUDGET_S: 32 rounds showed a 10% self-slowing at p < 0.001 on a loaded 2-core box, and cost 2-3 s
# there (the stock code is the slowest side once a KEEP made the champion faster); about 16 rounds
# of dit-xl-2-256's 0.9 s eager batch-1 call on an H200 (issue 49's bound: 15 s a run).
ROUNDS = 32
BUDGET_S = 15.0
DRIFT = "champion drift against the anchor"  # how every anchor drift reason starts (rules read the cause)


def _logs(champion: Sequence[float], anchor: Sequence[float]) -> np.ndarray | None:
    a, b = np.asarray(champion, dtype=np.float64), np.asarray(anchor, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired rounds must match: {a.size} champion and {b.size} anchor")
    if a.size < MIN_ROUNDS or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))) \
            or np.any(a <= 0) or np.any(b <= 0):
        return None
    out: np.ndarray = np.log(a) - np.log(b)
    return out


def ratio(side: Sequence[float], anchor: Sequence[float]) -> float | None:
    """A side's time over the anchor's, the median of the per-round ratios (what a KEEP records
    for its candidate; None for too few rounds). The anchor is timed in the first rounds only
    (BUDGET_S): `side`'s rounds are paired with its first."""
    logs = _logs(side[:len(anchor)], anchor)
    return None if logs is None else float(np.exp(np.median(logs)))


@dataclass(frozen=True)
class AnchorDrift:
    """The champion's speed relative to the anchor, now against when it was kept."""

    kept: float  # champion / anchor time when it was kept (1 for the baseline)
    now: float  # the same, in this run (median of the paired rounds)
    high: float  # the upper (1 - alpha) bootstrap bound of now / kept: what a win has taken off
    p: float  # one-sided exact sign test that the rounds' ratios lie above `kept`
    rounds: int
    minimum: float
    shown: bool  # p < alpha and now / kept > 1 + minimum

    @property
    def factor(self) -> float:
        """How much slower relative to the stock code the champion is now than when kept."""
        return self.now / self.kept

    @property
    def taken_off(self) -> float:
        return max(self.factor, self.high)

    @property
    def worse(self) -> bool:
        """The ratio reads worse than kept at all: its upper bound is charged to a win (`charge`)."""
        return self.factor > 1.0

    def reason(self) -> str:
        return (f"{DRIFT}: kept at {self.kept:.3f}x the anchor's time, now {self.now:.3f}x "
                f"({self.factor:.3f}x, upper bound {self.high:.3f}x, p={self.p:.2g} over {self.rounds} paired rounds; "
                f"minimum {self.minimum * 100:.0f}%)")


def drift(champion: Sequence[float], anchor: Sequence[float], kept: float, *, alpha: float = 0.05,
          minimum: float = MIN_DRIFT, n_boot: int = 2000, seed: int = 0) -> AnchorDrift | None:
    """The champion's paired ratio to the anchor in this run against `kept`, or None for too few
    rounds or no recorded ratio. Only a worse ratio counts: a champion faster relative to the stock
    code than when kept can hide a win, never fake one."""
    logs = _logs(champion[:len(anchor)], anchor)
    if logs is None or not (math.isfinite(kept) and kept > 0):
        return None
    d = logs - math.log(kept)
    above, below = int(np.sum(d > 0)), int(np.sum(d < 0))
    p = float(np.ravel(_dist.binom_half_sf(above - 1, above + below))[0]) if above + below else 1.0
    idx = np.random.default_rng(seed).integers(0, d.size, size=(int(n_boot), d.size))
    high = float(np.exp(np.percentile(np.median(d[idx], axis=1), 100.0 * (1.0 - alpha))))
    now = float(np.exp(np.median(logs)))
    shown = p < alpha and now / kept > 1.0 + minimum
    return AnchorDrift(kept, now, max(high, now / kept), p, int(d.size), minimum, shown)


def charge(ci_low: float, bar: float, found: AnchorDrift) -> tuple[bool, str]:
    """Whether a win with lower bound `ci_low` is void against a champion that drifted: the drift's
    upper bound comes off the lower bound, and a win that no longer clears `bar` (1 + the lane's
    threshold) is one the drift could explain; a champion twice as slow relative to the stock code as
    kept is not the champion that was kept, whatever the win. (voided, what was said)."""
    off = found.taken_off
    low = ci_low / off
    if off >= NOT_THE_KEPT_BUILD:
        return True, f"a champion {off:.2f}x as slow relative to the anchor as kept is not the champion that was kept"
    if low <= bar:
        return True, (f"the win's lower bound over the drift's upper bound {off:.3f}x is {low:.3f}x, "
                      f"which does not clear the bar {bar:.3f}x")
    return False, (f"the drift's upper bound {off:.3f}x taken off, the win's lower bound {low:.3f}x "
                   f"still clears {bar:.3f}x")
