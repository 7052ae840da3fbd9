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


def tail_rounds(alpha: float, share: float = TAIL_SHARE) -> int:
    """The rounds that hit a share `share` of slow calls at least once with probability 1 - alpha."""
    return math.ceil(math.log(alpha) / math.log(1.0 - share))


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
