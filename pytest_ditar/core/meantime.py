"""A median can hide a loss in the mean: the checks that a lane's total time did not grow.

Every lane is judged on its median call (robust to a host's stalls). A candidate whose calls are
fast most of the time and very slow the rest has a median that wins and a throughput that loses:
40% of calls sleeping 8x their own time (the mean call 2.1x the champion's) was KEPT at 1.894x,
and the genuine lean loop with 10% of its calls sleeping 30x their own time (the mean call 1.5x
the champion's, the median 2.7x faster) was KEPT in 7 of 8 tries. What a user serves is the sum of
calls. Two rules, on a paired percentile bootstrap of sum(champion) / sum(candidate) over whole
rounds:

- `mean_loss`: a lane whose summed time is shown slower beyond the guard tolerance (the upper
  bound below 1 - tolerance) is no win, nor a guard lane within tolerance.
- `total_unproven`: a lane that wins by its median must also show its total within the tolerance
  (the lower bound at or above 1 - tolerance). A rare slow share lands in a few rounds, and the
  resamples that hold those rounds twice or more pull the lower bound down: one 30x call in 29
  rounds already does. A host's stall of a few times a call does not (it would have to cost the
  candidate its whole win across a quarter of the rounds).

Neither can see a slow share the rounds never hit: a share p is missed by n rounds with
probability (1 - p)^n, so the objective lane's first look is at `tail_rounds` rounds (29 at
alpha 0.05: a 10% share is hit at least once with 95%), where its config affords them.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

MIN_ROUNDS = 6  # fewer: the bootstrap's resamples repeat too few rounds to bound a sum
TAIL_SHARE = 0.10  # the share of slow calls a KEEP's rounds must hit at least once, with 1 - alpha
# A KEEP sees enough of the candidate's calls to meet a slow share of 5% at least once with 99%
# (issue 49): ceil(log 0.01 / log 0.95) = 90 (tail_calls()).
KEEP_SHARE = 0.05
KEEP_MISS = 0.01


def tail_rounds(alpha: float, share: float = TAIL_SHARE) -> int:
    """The rounds that hit a share `share` of slow calls at least once with probability 1 - alpha."""
    return math.ceil(math.log(alpha) / math.log(1.0 - share))


def tail_calls(share: float = KEEP_SHARE, miss: float = KEEP_MISS) -> int:
    """The calls that meet a slow share `share` at least once with probability 1 - miss."""
    return math.ceil(math.log(miss) / math.log(1.0 - share))


TAIL_CALLS = tail_calls()


def _tail_factor(phases: Sequence[Sequence[float]], n_boot: int, seed: int) -> tuple[float, float]:
    """The mean call over the median call of the candidate's calls, each phase (the paired rounds,
    the confirmation) scaled by its own median so a host that changed speed between phases does not
    read as a tail; and its upper 97.5% percentile-bootstrap bound."""
    scaled = np.concatenate([np.asarray(p, dtype=np.float64) / float(np.median(p)) for p in phases if len(p)])
    idx = np.random.default_rng(seed).integers(0, scaled.size, size=(int(n_boot), scaled.size))
    return float(scaled.mean()), float(np.percentile(scaled[idx].mean(axis=1), 97.5))


def confirmed_total(champion: Sequence[float], candidate: Sequence[float], confirm: Sequence[float],
                    speedup_low: float, tolerance: float, *, n_boot: int = 2000, seed: int = 0) -> str | None:
    """Why a win by the median call is not shown within `tolerance` of the champion's total time
    once the candidate's confirming calls (`confirm`, timed alone after the rounds) are counted, or
    None. The total ratio is the median ratio times the champion's mean-over-median over the
    candidate's: its lower bound is `speedup_low` (the win's) times the champion's factor over the
    upper bound of the candidate's (`_tail_factor`, over every call it made). A 10% share of calls
    30x slower makes the candidate's factor about 3.9: no median win covers that."""
    _check_tolerance(tolerance)
    champ = np.asarray(champion, dtype=np.float64)
    if champ.size < MIN_ROUNDS or len(candidate) < MIN_ROUNDS or not len(confirm) or speedup_low <= 0:
        return None
    ours, high = _tail_factor([candidate, confirm], n_boot, seed)
    theirs = float(champ.mean() / np.median(champ))
    low = speedup_low * theirs / high
    if low >= 1.0 - tolerance:
        return None
    calls = len(candidate) + len(confirm)
    slowest = float(max(np.max(np.asarray(candidate) / np.median(candidate)),
                        np.max(np.asarray(confirm) / np.median(confirm))))
    return (f"its total time is not shown within {tolerance * 100:.1f}%: over its {calls} timed calls "
            f"({len(confirm)} confirming) its mean call is {ours:.2f}x its median (upper bound {high:.2f}x; the "
            f"champion's {theirs:.2f}x), its slowest {slowest:.1f}x: the total's lower bound {low:.3f}x")


def total_ratio(champion: Sequence[float], candidate: Sequence[float], *, n_boot: int = 2000,
                seed: int = 0) -> tuple[float, float, float] | None:
    """sum(champion) / sum(candidate) and its 95% paired percentile bootstrap interval over whole
    rounds, or None for too few rounds or a non-finite one."""
    champ = np.asarray(champion, dtype=np.float64)
    cand = np.asarray(candidate, dtype=np.float64)
    if champ.shape != cand.shape:
        raise ValueError(f"paired rounds must match: {champ.size} champion and {cand.size} candidate")
    if cand.size < MIN_ROUNDS or not (np.all(np.isfinite(champ)) and np.all(np.isfinite(cand))):
        return None
    idx = np.random.default_rng(seed).integers(0, cand.size, size=(int(n_boot), cand.size))
    ratios = champ[idx].sum(axis=1) / cand[idx].sum(axis=1)
    low, high = np.percentile(ratios, [2.5, 97.5])
    return float(champ.sum() / cand.sum()), float(low), float(high)


def _check_tolerance(tolerance: float) -> None:
    if not (0.0 <= tolerance < 1.0):
        raise ValueError(f"tolerance must be a fraction in [0, 1), got {tolerance!r}")


def _total(ratio: float, low: float, high: float, cand: Sequence[float]) -> str:
    slowest = float(np.max(cand) / np.median(cand))
    return (f"total time {ratio:.3f}x the champion's ci95=[{low:.3f},{high:.3f}] over {len(cand)} rounds "
            f"(its slowest call {slowest:.1f}x its median)")


def mean_loss(champion: Sequence[float], candidate: Sequence[float], tolerance: float, *,
              n_boot: int = 2000, seed: int = 0) -> str | None:
    """Why the candidate's summed time is shown slower than the champion's beyond `tolerance`
    (paired rounds, 95% percentile bootstrap), or None."""
    _check_tolerance(tolerance)
    found = total_ratio(champion, candidate, n_boot=n_boot, seed=seed)
    if found is None or found[2] >= 1.0 - tolerance:
        return None
    return f"its mean call is slower: {_total(*found, candidate)}, below 1-{tolerance * 100:.1f}%"


def total_unproven(champion: Sequence[float], candidate: Sequence[float], tolerance: float, *,
                   n_boot: int = 2000, seed: int = 0) -> str | None:
    """Why a lane that wins by its median call is not shown within `tolerance` of the champion's
    summed time (the bootstrap's lower bound below 1 - tolerance), or None."""
    _check_tolerance(tolerance)
    found = total_ratio(champion, candidate, n_boot=n_boot, seed=seed)
    if found is None or found[1] >= 1.0 - tolerance:
        return None
    return f"its total time is not shown within {tolerance * 100:.1f}%: {_total(*found, candidate)}"
