"""Two checks on the timing itself, pure functions of samples:

- the caching probe (one request repeated against unique ones): an honest pipeline is no faster
  on a request it has already seen; a memoizing one is;
- champion drift: the champion's in-run samples must not be slower than its stored ones, else
  something slowed the champion's rounds: interference, a changed host, or a candidate that found
  a way to reach the champion.
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence

CACHING_TOLERANCE = 0.20  # repeats this much faster than new requests is caching


def caching(repeat_s: Sequence[float], unique_s: Sequence[float], min_effect: float) -> str | None:
    """The reason a candidate is caching, or None. `unique_s` are calls on requests new to the
    candidate, `repeat_s` calls on one it has already answered, alternating. Every repeat must beat
    every new request, and the medians must differ by more than the larger of CACHING_TOLERANCE and
    the lane's minimum effect, so host noise alone does not trigger it."""
    if len(repeat_s) < 2 or len(unique_s) < 2 or min(repeat_s) <= 0:
        return None
    unique, repeat = statistics.median(unique_s), statistics.median(repeat_s)
    tol = max(CACHING_TOLERANCE, min_effect)
    if max(repeat_s) < min(unique_s) and unique / repeat > 1.0 + tol:
        return (f"caching: a repeated request ran {unique / repeat:.2f}x faster than new ones (median "
                f"{repeat * 1e3:.1f} ms vs {unique * 1e3:.1f} ms; tolerance {tol * 100:.0f}%)")
    return None


def champion_drift(in_run: Sequence[float], stored: Sequence[float], tolerance: float,
                   alpha: float = 0.05) -> str | None:
    """The reason the champion's in-run rounds are slower than its stored samples, or None: the
    medians differ by more than `tolerance` AND a one-sided Mann-Whitney test says so. Only the
    slower side voids a lane: a champion that runs faster than it used to can hide a real win,
    never fake one, and a busier host between runs would otherwise discard honest work."""
    if len(in_run) < 3 or len(stored) < 3:
        return None
    now, then = statistics.median(in_run), statistics.median(stored)
    if then <= 0 or now / then <= 1.0 + tolerance:
        return None
    from scipy.stats import mannwhitneyu

    p = float(mannwhitneyu(list(in_run), list(stored), alternative="greater").pvalue)
    if p >= alpha:
        return None
    return (f"champion drift: its in-run median {now * 1e3:.2f} ms is {now / then:.2f}x slower than its stored "
            f"{then * 1e3:.2f} ms (tolerance {tolerance * 100:.0f}%, p={p:.2g}): something slowed the champion's "
            "rounds (interference, a changed host, or the candidate reaching it)")
