"""Two checks on the timing itself, pure functions of samples:

- the caching probe (one request repeated against unique ones): an honest pipeline is no faster
  on a request it has already seen; a memoizing one is. A cheap screen, then a confirmation on
  fresh calls only when the screen trips;
- champion drift: the champion's in-run samples must not be slower than its stored ones, else
  something slowed the champion's rounds: interference, a changed host, or a candidate that found
  a way to reach the champion.
"""
from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_ditar.core.distributions import mannwhitneyu_p

CACHING_TOLERANCE = 0.20  # repeats this much faster than new requests is caching
CACHING_ALPHA = 0.01  # the confirmation's one-sided Mann-Whitney level
# A CPU host's own speed moves between runs minutes apart (a 2-core VM: the champion's in-run
# median 1.10-1.20x its stored one in 4 of 20 honest runs), so on a CPU lane champion drift only
# counts beyond this; on a GPU the configured perf.drift_tolerance stands (docs/trust.md).
CPU_DRIFT_FLOOR = 0.25
# The judge's host probe within this of its speed when the champion's samples were kept: a quiet
# run, where a champion timing outside its kept figure is a different build, not a busier host.
QUIET_HOST = 1.05


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


DRIFT = "champion drift"  # how every drift reason starts (text only: rules read LaneOutcome.cause)


@dataclass(frozen=True)
class Drift:
    """The champion's in-run rounds, shown slower than its stored (kept) samples."""
    ratio: float  # in-run median / stored median, > 1 + tolerance
    p: float
    now_s: float
    kept_s: float
    tolerance: float
    high: float = 0.0  # the ratio's upper 97.5% bootstrap bound: what a win has taken off (never below ratio)

    @property
    def taken_off(self) -> float:
        """The slowing a win must clear: the ratio's upper bound (a point estimate from a dozen
        rounds undershoots a sandbag often enough to let its win through)."""
        return max(self.ratio, self.high)

    def reason(self, host: float = 1.0, anchor: float | None = None) -> str:
        """What it says, naming only a cause that was measured: `anchor`, where given, is the
        baseline's code timed in the same rounds, now over then (as slow as the champion: the host;
        not: the champion's build); else `host`, the judge's probe now over then (slower: the host).
        With neither showing a slower host, it names both causes it could not tell apart: another
        process's work in the champion's rounds, or a build other than the one kept."""
        figures = (f"{self.kept_s * 1e3:.2f} ms kept, {self.now_s * 1e3:.2f} ms now ({self.ratio:.2f}x; "
                   f"tolerance {self.tolerance * 100:.0f}%, p={self.p:.2g})")
        if anchor is not None:
            if anchor * (1.0 + self.tolerance) >= self.ratio:
                return (f"{DRIFT}: {figures}: the host slower (the baseline's code in the same rounds {anchor:.2f}x "
                        "as slow as then)")
            return (f"{DRIFT}: {figures}: a build other than the one kept (the baseline's code in the same rounds "
                    f"{anchor:.2f}x as slow as then, the champion {self.ratio:.2f}x)")
        if host > QUIET_HOST:
            return (f"{DRIFT}: {figures}, the host itself {host:.2f}x as slow as then: the host slower, or "
                    "interference (another process, or the candidate reaching the champion)")
        return (f"{DRIFT}: {figures}, the judge's host probe as fast as then: interference in the champion's rounds "
                "(another process, or the candidate reaching it) or a build other than the one kept; "
                "`dit-ar doctor` times the champion beside the baseline's code")


def champion_drift(in_run: Sequence[float], stored: Sequence[float], tolerance: float,
                   alpha: float = 0.05) -> Drift | None:
    """The champion's in-run rounds shown slower than its stored samples, or None: the medians
    differ by more than `tolerance` AND a one-sided Mann-Whitney test says so. Only the slower side
    counts: a champion that runs faster than it used to can hide a real win, never fake one."""
    found = _slower(in_run, stored, tolerance, alpha)
    if found is None:
        return None
    ratio, p = found
    return Drift(ratio, p, statistics.median(in_run), statistics.median(stored), tolerance,
                 high=float(median_ratio_high(in_run, stored)))


def median_ratio_high(slow: Sequence[float], fast: Sequence[float], n_boot: int = 1000, seed: int = 0) -> float:
    """The upper 97.5% percentile-bootstrap bound of median(slow) / median(fast), each side
    resampled on its own (unpaired: the stored samples are another run's)."""
    rng = random.Random(seed)
    a, b = list(slow), list(fast)
    ratios = sorted(statistics.median(rng.choices(a, k=len(a))) / statistics.median(rng.choices(b, k=len(b)))
                    for _ in range(n_boot))
    return ratios[min(n_boot - 1, int(0.975 * n_boot))]
