"""A median can hide a loss in the mean: the check that a lane's total time did not grow.

Every lane is judged on its median call (robust to a host's stalls). A candidate whose calls are
fast most of the time and very slow the rest has a median that wins and a throughput that loses:
in tests/adversarial/test_noisy_guard.py, 40% of calls sleeping 8x their own time (the mean call
2.1x the champion's) was KEPT at 1.894x. What a user serves is the sum of calls, so a lane whose
summed time is shown slower than the champion's beyond the guard tolerance is not a win, nor a
guard lane within tolerance.

"Shown": the upper bound of a paired percentile bootstrap of sum(champion) / sum(candidate) over
whole rounds lies below 1 - tolerance. A single stall on the candidate's side widens that interval
instead of deciding it (resamples without the round clear the bar), so a host's rare stalls do not
turn a real win into a loss; a share of slow calls that recurs in every resample does.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MIN_ROUNDS = 6  # fewer: the bootstrap's resamples repeat too few rounds to bound a sum


def mean_loss(champion: Sequence[float], candidate: Sequence[float], tolerance: float, *,
              n_boot: int = 2000, seed: int = 0) -> str | None:
    """Why the candidate's summed time is shown slower than the champion's beyond `tolerance`
    (paired rounds, 95% percentile bootstrap), or None."""
    champ = np.asarray(champion, dtype=np.float64)
    cand = np.asarray(candidate, dtype=np.float64)
    if champ.shape != cand.shape:
        raise ValueError(f"paired rounds must match: {champ.size} champion and {cand.size} candidate")
    if not (0.0 <= tolerance < 1.0):
        raise ValueError(f"tolerance must be a fraction in [0, 1), got {tolerance!r}")
    if cand.size < MIN_ROUNDS or not (np.all(np.isfinite(champ)) and np.all(np.isfinite(cand))):
        return None
    idx = np.random.default_rng(seed).integers(0, cand.size, size=(int(n_boot), cand.size))
    ratios = champ[idx].sum(axis=1) / cand[idx].sum(axis=1)
    low, high = np.percentile(ratios, [2.5, 97.5])
    ratio = float(champ.sum() / cand.sum())
    if high >= 1.0 - tolerance:
        return None
    slowest = float(np.max(cand) / np.median(cand))
    return (f"its mean call is slower: total time {ratio:.3f}x the champion's ci95=[{low:.3f},{high:.3f}] over "
            f"{cand.size} rounds, below 1-{tolerance * 100:.1f}% (its slowest call {slowest:.1f}x its median)")
