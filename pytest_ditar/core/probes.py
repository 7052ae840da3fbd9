"""The caching probe, a pure function of samples: one request repeated against unique ones. An
honest pipeline is no faster on a request it has already seen; a memoizing one is. A cheap screen,
then a confirmation on fresh calls only when the screen trips. (Champion drift is judged against
the anchor: core.anchor.)
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence

from pytest_ditar.core.distributions import mannwhitneyu_p

CACHING_TOLERANCE = 0.20  # repeats this much faster than new requests is caching
CACHING_ALPHA = 0.01  # the confirmation's one-sided Mann-Whitney level


def caching_suspected(repeat_s: Sequence[float], unique_s: Sequence[float], min_effect: float) -> bool:
    """The probe's cheap screen: every repeat beat every new request and the medians are more than
    the larger of CACHING_TOLERANCE and the lane's minimum effect apart. With two calls a side an
    honest pipeline on a noisy host passes it about one time in ten, so it only decides whether to
    ask for confirmation, never the verdict."""
    if len(repeat_s) < 2 or len(unique_s) < 2 or min(repeat_s) <= 0:
        return False
    ratio = statistics.median(unique_s) / statistics.median(repeat_s)
    return max(repeat_s) < min(unique_s) and ratio > 1.0 + max(CACHING_TOLERANCE, min_effect)


def caching(repeat_s: Sequence[float], unique_s: Sequence[float], min_effect: float,
            alpha: float = CACHING_ALPHA) -> str | None:
    """The reason a candidate is caching, or None, judged on the confirmation samples (fresh calls
    taken after the screen tripped, so the screen's luck does not count twice): the repeated
    request's median is faster than the new ones' by more than the larger of CACHING_TOLERANCE and
    the lane's minimum effect AND a one-sided Mann-Whitney test at `alpha` says repeats are faster.
    A real cache answers a seen request in a fraction of the time and clears both easily."""
    tol = max(CACHING_TOLERANCE, min_effect)
    found = _slower(unique_s, repeat_s, tol, alpha)
    if found is None:
        return None
    ratio, p = found
    unique, repeat = statistics.median(unique_s), statistics.median(repeat_s)
    return (f"caching: a repeated request ran {ratio:.2f}x faster than new ones (median "
            f"{repeat * 1e3:.1f} ms vs {unique * 1e3:.1f} ms over {len(repeat_s)}+{len(unique_s)} confirming "
            f"calls, p={p:.2g}; tolerance {tol * 100:.0f}%)")


def _slower(slow: Sequence[float], fast: Sequence[float], tolerance: float, alpha: float) -> tuple[float, float] | None:
    """(median ratio slow/fast, p) when `slow`'s median exceeds `fast`'s by more than `tolerance`
    AND a one-sided Mann-Whitney test at `alpha` says `slow` is stochastically larger; else None."""
    if len(slow) < 3 or len(fast) < 3 or min(fast) <= 0:
        return None
    ratio = statistics.median(slow) / statistics.median(fast)
    if ratio <= 1.0 + tolerance:
        return None
    p = mannwhitneyu_p(list(slow), list(fast), "greater")
    return (ratio, p) if p < alpha else None
