"""Lane statistics: is a candidate faster than the champion beyond the machine's noise?

Pure functions over timing samples (seconds or any positive unit): no pytest, git, I/O or
torch, so the keep/discard rule built on top can be unit-tested as plain code. Over 400 lines
on purpose: the paired and unpaired comparisons, the noise floor and the bootstrap they share are
one statistical argument, and splitting it would scatter the conventions below.

Conventions
- ``speedup`` = champion median / candidate median, so >1 means the candidate is faster.
- Spread is measured with a robust CV, IQR / (1.349 * median) (the scaled IQR equals the
  standard deviation for normal data). Its 25% breakdown point is the point: a rare hiccup
  (a GC pause, one clock ramp) does not make a lane UNSTABLE, but a stall that recurs in more
  than about one run in four (bimodal lanes, intermittent recompiles) does. A MAD-based CV
  (50% breakdown) was rejected because it hides a 40% slow mode entirely. The classic
  stdev/mean CV is reported in ``SampleSummary.cv`` for humans.
- The effect test is a percentile bootstrap of the ratio of medians (size of the effect) AND a
  one-sided Mann-Whitney U test (is there an effect at all). When champion and candidate were
  timed interleaved in the same rounds, the paired forms replace both: the median per-round
  ratio with rounds resampled, and a Wilcoxon signed-rank test on the log ratios. Both must agree before FASTER:
  a CI alone can be fooled by a lucky resampling grid at small n, a p-value alone says nothing
  about size.

Over 400 lines on purpose: the unpaired and paired forms of the one rule share validation,
bootstrap and wording here, and read side by side.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np

from pytest_ditar.core import distributions as _dist

__all__ = [
    "FASTER",
    "NOT_FASTER",
    "SLOWER",
    "UNSTABLE",
    "OK",
    "REGRESSED",
    "Verdict",
    "RegressionVerdict",
    "SampleSummary",
    "Comparison",
    "NoiseFloor",
    "RegressionCheck",
    "summarize",
    "robust_cv",
    "bootstrap_ratio_ci",
    "noise_floor",
    "paired_noise_floor",
    "calibrated_min_effect",
    "compare",
    "regression_check",
]

Verdict = Literal["FASTER", "NOT_FASTER", "SLOWER", "UNSTABLE"]
RegressionVerdict = Literal["OK", "REGRESSED"]

FASTER: Final = "FASTER"
NOT_FASTER: Final = "NOT_FASTER"
SLOWER: Final = "SLOWER"
UNSTABLE: Final = "UNSTABLE"
OK: Final = "OK"
REGRESSED: Final = "REGRESSED"

# IQR of a normal distribution is 1.349 sigma; dividing by it makes the robust CV comparable
# to a classic CV on well-behaved data.
_IQR_TO_SIGMA: Final = 1.349
# Below this the bootstrap percentiles are too coarse to mean anything.
_MIN_N_BOOT: Final = 100
MIN_SAMPLES: Final = 3

Samples = Sequence[float] | np.ndarray


# --------------------------------------------------------------------------- validation


def _as_samples(x: Samples, name: str, min_n: int = MIN_SAMPLES) -> np.ndarray:
    """Float64 1-D copy; refuses what would make a ratio of medians meaningless."""
    try:
        arr = np.asarray(x, dtype=np.float64).ravel()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: samples must be numbers ({exc})") from None
    if arr.size < min_n:
        raise ValueError(
            f"{name}: need at least {min_n} samples to compare, got {arr.size}"
        )
    if not np.all(np.isfinite(arr)):
        bad = arr[~np.isfinite(arr)][:3].tolist()
        raise ValueError(f"{name}: samples must be finite, got {bad}")
    if np.any(arr <= 0):
        bad = arr[arr <= 0][:3].tolist()
        raise ValueError(f"{name}: timing samples must be > 0, got {bad}")
    return arr


def _check_fraction(value: float, name: str, *, lo_open: bool = True) -> None:
    ok = math.isfinite(value) and (0.0 < value < 1.0 if lo_open else 0.0 <= value < 1.0)
    if not ok:
        interval = "(0, 1)" if lo_open else "[0, 1)"
        raise ValueError(f"{name} must be in {interval}, got {value!r}")


def _check_n_boot(n_boot: int) -> None:
    if int(n_boot) != n_boot or n_boot < _MIN_N_BOOT:
        raise ValueError(f"n_boot must be an integer >= {_MIN_N_BOOT}, got {n_boot!r}")


# --------------------------------------------------------------------------- summaries


@dataclass(frozen=True)
class SampleSummary:
    n: int
    median: float
    mean: float
    min: float
    max: float
    stdev: float  # sample standard deviation (ddof=1); 0.0 when n == 1
    cv: float  # stdev / mean (classic, outlier-sensitive)
    iqr: float  # q75 - q25
    robust_cv: float  # IQR / (1.349 * median) (what the UNSTABLE gate uses)


def robust_cv(samples: Samples) -> float:
    """IQR / (1.349 * median): a CV that rare outliers cannot inflate but a recurring mode can."""
    arr = _as_samples(samples, "samples", min_n=1)
    q25, q75 = np.percentile(arr, [25.0, 75.0])
    return float((q75 - q25) / (_IQR_TO_SIGMA * np.median(arr)))


def summarize(samples: Samples) -> SampleSummary:
    arr = _as_samples(samples, "samples", min_n=1)
    mean = float(arr.mean())
    stdev = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
    q25, q75 = np.percentile(arr, [25.0, 75.0])
    return SampleSummary(
        n=int(arr.size),
        median=float(np.median(arr)),
        mean=mean,
        min=float(arr.min()),
        max=float(arr.max()),
        stdev=stdev,
        cv=stdev / mean,
        iqr=float(q75 - q25),
        robust_cv=robust_cv(arr),
    )


# --------------------------------------------------------------------------- bootstrap


def _bootstrap_ratio_ci(
    champ: np.ndarray, cand: np.ndarray, n_boot: int, seed: int, conf: float
) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    # Independent resampling of each group (unpaired design: runs are not matched 1:1).
    # Champion first, then candidate, so a given seed always draws the same indices.
    champ_idx = rng.integers(0, champ.size, size=(n_boot, champ.size))
    cand_idx = rng.integers(0, cand.size, size=(n_boot, cand.size))
    ratios = np.median(champ[champ_idx], axis=1) / np.median(cand[cand_idx], axis=1)
    tail = (1.0 - conf) / 2.0 * 100.0
    low, high = np.percentile(ratios, [tail, 100.0 - tail])
    return float(low), float(high)


def bootstrap_ratio_ci(
    champ: Samples,
    cand: Samples,
    n_boot: int = 2000,
    seed: int = 0,
    conf: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap CI of median(champ) / median(cand). Deterministic for a seed."""
    _check_n_boot(n_boot)
    _check_fraction(conf, "conf")
    return _bootstrap_ratio_ci(
        _as_samples(champ, "champion"), _as_samples(cand, "candidate"), int(n_boot), seed, conf
    )


# --------------------------------------------------------------------------- A/A noise


@dataclass(frozen=True)
class NoiseFloor:
    """What an A/A run (same code, timed twice back to back) looks like on this machine."""

    ratio: float  # median(a) / median(b); 1.0 on a perfectly quiet machine
    ci_low: float
    ci_high: float
    ci_half_width: float  # (ci_high - ci_low) / 2, as a fraction of 1.0
    abs_shift: float  # |1 - ratio|: drift between the two sets
    cv_a: float  # robust CVs, as in compare()
    cv_b: float
    n_a: int
    n_b: int


def noise_floor(
    a: Samples, b: Samples, *, n_boot: int = 2000, seed: int = 0, conf: float = 0.95
) -> NoiseFloor:
    arr_a = _as_samples(a, "A/A first set")
    arr_b = _as_samples(b, "A/A second set")
    _check_n_boot(n_boot)
    _check_fraction(conf, "conf")
    ratio = float(np.median(arr_a) / np.median(arr_b))
    low, high = _bootstrap_ratio_ci(arr_a, arr_b, int(n_boot), seed, conf)
    return NoiseFloor(
        ratio=ratio,
        ci_low=low,
        ci_high=high,
        ci_half_width=(high - low) / 2.0,
        abs_shift=abs(1.0 - ratio),
        cv_a=robust_cv(arr_a),
        cv_b=robust_cv(arr_b),
        n_a=int(arr_a.size),
        n_b=int(arr_b.size),
    )


def _log_ratios(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-round log(a_i / b_i) of two interleaved sample sets."""
    if a.size != b.size:
        raise ValueError(f"paired samples must have equal length, got {a.size} and {b.size}")
    ratios: np.ndarray = np.log(a) - np.log(b)
    return ratios


def log_ratios(champ: Samples, cand: Samples) -> np.ndarray:
    """Per-round log(champ_i / cand_i) of one interleaved lane (> 0: the candidate was faster)."""
    return _log_ratios(_as_samples(champ, "champ", min_n=1), _as_samples(cand, "cand", min_n=1))


def log_spread(logs: np.ndarray) -> float:
    """The robust spread of per-round log ratios, IQR / 1.349: what a paired lane's UNSTABLE gate reads."""
    return float(np.subtract(*np.percentile(logs, [75.0, 25.0])) / _IQR_TO_SIGMA)


def _paired_ratio_ci(logs: np.ndarray, n_boot: int, seed: int, conf: float) -> tuple[float, float, float]:
    """exp(median log ratio) and its percentile CI, resampling whole rounds."""
    idx = np.random.default_rng(seed).integers(0, logs.size, size=(int(n_boot), logs.size))
    tail = (1.0 - conf) / 2.0 * 100.0
    low, high = np.exp(np.percentile(np.median(logs[idx], axis=1), [tail, 100.0 - tail]))
    return float(np.exp(np.median(logs))), float(low), float(high)


def paired_noise_floor(
    a: Samples, b: Samples, *, n_boot: int = 2000, seed: int = 0, conf: float = 0.95
) -> NoiseFloor:
    """The A/A noise when the two sets were timed interleaved (a[i] next to b[i]).

    The ratio is exp(median(log a_i - log b_i)) and the bootstrap resamples whole pairs, so
    drift slower than one round (clocks, thermals, a neighbour's load) cancels within a pair.
    """
    arr_a = _as_samples(a, "A/A first set")
    arr_b = _as_samples(b, "A/A second set")
    logs = _log_ratios(arr_a, arr_b)
    _check_n_boot(n_boot)
    _check_fraction(conf, "conf")
    ratio, low, high = _paired_ratio_ci(logs, n_boot, seed, conf)
    return NoiseFloor(ratio=ratio, ci_low=low, ci_high=high, ci_half_width=(high - low) / 2.0,
                      abs_shift=abs(1.0 - ratio), cv_a=robust_cv(arr_a), cv_b=robust_cv(arr_b),
                      n_a=int(arr_a.size), n_b=int(arr_b.size))


def calibrated_min_effect(noise: NoiseFloor | None, floor: float, k: float) -> float:
    """Smallest effect worth believing: k times the A/A noise, never below the configured floor.

    Both the CI half-width and the observed A/A shift count, because back-to-back drift
    (thermal, clocks) is noise that a tight CI of one set does not show.
    """
    if not (math.isfinite(floor) and floor >= 0.0):
        raise ValueError(f"floor must be a finite fraction >= 0, got {floor!r}")
    if not (math.isfinite(k) and k >= 0.0):
        raise ValueError(f"k must be finite and >= 0, got {k!r}")
    if noise is None:
        return float(floor)
    return float(max(floor, k * max(noise.ci_half_width, noise.abs_shift)))


# --------------------------------------------------------------------------- comparison


@dataclass(frozen=True)
class Comparison:
    speedup: float  # champ_median / cand_median; > 1 means the candidate is faster
    ci_low: float
    ci_high: float
    p_value: float  # one-sided: MWU (unpaired) or Wilcoxon signed-rank (paired); small = faster
    p_slower: float  # the other side: candidate stochastically larger (slower)
    cand_median: float
    champ_median: float
    cand_cv: float  # robust CV, IQR / (1.349 * median)
    champ_cv: float
    n_cand: int
    n_champ: int
    min_effect: float
    verdict: Verdict
    reason: str  # "<speedup>x ci95=[..]: <why>", or just <why> when it names the numbers itself
    paired: bool = False  # judged on per-round ratios of an interleaved run
    # The reason without its "<speedup>x ci95=[..]: " prefix, for lines that print those numbers
    # already. A FASTER whose CI clears the bar keeps them: they are the reason.
    why: str = ""

    @property
    def is_faster(self) -> bool:
        return self.verdict == FASTER


def _ratio_of_medians(champ: np.ndarray, cand: np.ndarray, n_boot: int, seed: int) -> tuple[float, ...]:
    """champion median, candidate median, speedup (champ/cand) and its bootstrap 95% CI."""
    champ_med = float(np.median(champ))
    cand_med = float(np.median(cand))
    low, high = _bootstrap_ratio_ci(champ, cand, int(n_boot), seed, 0.95)
    return champ_med, cand_med, champ_med / cand_med, low, high


def _paired_effect(champ: np.ndarray, cand: np.ndarray, n_boot: int, seed: int) -> tuple[np.ndarray, tuple[float, ...]]:
    """Interleaved rounds: the per-round log ratios, and champion median, candidate median,
    speedup = exp(median log ratio) with its 95% CI from resampling rounds."""
    logs = _log_ratios(champ, cand)
    speedup, low, high = _paired_ratio_ci(logs, n_boot, seed, 0.95)
    return logs, (float(np.median(champ)), float(np.median(cand)), speedup, low, high)


def _paired_p(logs: np.ndarray, alternative: str) -> float:
    """One-sided Wilcoxon signed-rank on per-round log ratios ("greater": the candidate is faster)."""
    if not np.any(logs):
        return 1.0
    return _dist.wilcoxon_p(logs, alternative)


def _fmt_pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def fmt_ci(low: float, high: float) -> str:
    return f"ci95=[{low:.3f},{high:.3f}]"


def compare(
    champ: Samples,
    cand: Samples,
    *,
    min_effect: float,
    alpha: float = 0.05,
    max_cv: float = 0.10,
    n_boot: int = 2000,
    seed: int = 0,
    paired: bool = False,
) -> Comparison:
    """Judge a candidate lane against the champion lane.

    Order of rules: UNSTABLE (either lane's robust CV > max_cv) beats everything, because no
    verdict from a lane that noisy is trustworthy; then FASTER (ci_low > 1 + min_effect and
    p < alpha); then SLOWER (ci_high < 1 - min_effect); else NOT_FASTER.

    `paired`: champ[i] and cand[i] were timed in the same interleaved round. The effect is then
    the median per-round ratio with rounds resampled, the test a one-sided Wilcoxon signed-rank
    on log ratios, and the spread that of the per-round ratios: host drift shared by both sides
    of a round cancels (on the H200, eager A/A half-widths of 1.3-2.6% against 2.7-4.8% unpaired).
    """
    champ_arr = _as_samples(champ, "champion")
    cand_arr = _as_samples(cand, "candidate")
    if not (math.isfinite(min_effect) and min_effect >= 0.0):
        raise ValueError(f"min_effect must be a finite fraction >= 0, got {min_effect!r}")
    _check_fraction(alpha, "alpha")
    if not (math.isfinite(max_cv) and max_cv > 0.0):
        raise ValueError(f"max_cv must be finite and > 0, got {max_cv!r}")
    _check_n_boot(n_boot)

    cand_cv = robust_cv(cand_arr)
    champ_cv = robust_cv(champ_arr)
    # A NaN p (degenerate input) fails `p < alpha`, so the rule fails closed to NOT_FASTER.
    if paired:
        logs, (champ_med, cand_med, speedup, low, high) = _paired_effect(champ_arr, cand_arr, n_boot, seed)
        p_faster, p_slower = _paired_p(logs, "greater"), _paired_p(logs, "less")
        spread, which = log_spread(logs), "per-round ratio"
        # Separation for a paired design: three rounds in four beat the champion by the min effect.
        dominates = float(np.quantile(logs, 0.25)) > math.log1p(min_effect)
        sep_text = "three in four rounds beat the champion"
    else:
        champ_med, cand_med, speedup, low, high = _ratio_of_medians(champ_arr, cand_arr, n_boot, seed)
        p_faster = _dist.mannwhitneyu_p(cand_arr, champ_arr, "less")
        p_slower = _dist.mannwhitneyu_p(cand_arr, champ_arr, "greater")
        spread = max(cand_cv, champ_cv)
        which = "candidate" if cand_cv >= champ_cv else "champion"
        # Under too much spread the median's CI is not trusted; only a separation of whole
        # distributions decides: the candidate's slow quartile must beat the champion's fast one.
        dominates = float(np.quantile(cand_arr, 0.75)) * (1.0 + min_effect) < float(np.quantile(champ_arr, 0.25))
        sep_text = "the candidate's 75th percentile beats the champion's 25th"

    head = f"{speedup:.3f}x {fmt_ci(low, high)}"
    verdict: Verdict
    noisy = spread > max_cv
    # The reason is "<head>: <why>", except where why stands alone: an UNSTABLE lane's numbers
    # are not trusted, and a clean FASTER's why is a sentence about them.
    bare = False
    if noisy and not (dominates and p_faster < alpha):
        verdict, bare = UNSTABLE, True
        why = f"lane spread {_fmt_pct(spread)} > {_fmt_pct(max_cv)} ({which}): too noisy to decide"
    elif noisy:
        verdict = FASTER
        why = (
            f"spread {_fmt_pct(spread)} > {_fmt_pct(max_cv)}, but {sep_text} "
            f"by more than {_fmt_pct(min_effect)} (p={p_faster:.3g})"
        )
    elif low > 1.0 + min_effect and p_faster < alpha:
        verdict, bare = FASTER, True
        why = f"{head} clears 1+{_fmt_pct(min_effect)} and p={p_faster:.3g} < {alpha:g}"
    elif high < 1.0 - min_effect:
        verdict = SLOWER
        why = f"slower, upper bound below 1-{_fmt_pct(min_effect)} (p={p_slower:.3g})"
    else:
        verdict = NOT_FASTER
        if low > 1.0 + min_effect:
            detail = f"CI clears 1+{_fmt_pct(min_effect)} but p={p_faster:.3g} >= {alpha:g}"
        else:
            detail = f"lower bound does not clear 1+{_fmt_pct(min_effect)} (p={p_faster:.3g})"
        why = f"not faster beyond noise, {detail}"
    reason = why if bare else f"{head}: {why}"

    return Comparison(
        speedup=speedup,
        ci_low=low,
        ci_high=high,
        p_value=p_faster,
        p_slower=p_slower,
        cand_median=cand_med,
        champ_median=champ_med,
        cand_cv=cand_cv,
        champ_cv=champ_cv,
        n_cand=int(cand_arr.size),
        n_champ=int(champ_arr.size),
        min_effect=float(min_effect),
        verdict=verdict,
        reason=reason,
        paired=paired,
        why=why,
    )


# --------------------------------------------------------------------------- guard lanes


@dataclass(frozen=True)
class RegressionCheck:
    """Guard-lane result: only a confident slowdown beyond tolerance fails."""

    speedup: float
    ci_low: float
    ci_high: float
    p_slower: float  # one-sided MWU: candidate stochastically larger (slower); informative
    cand_median: float
    champ_median: float
    cand_cv: float
    champ_cv: float
    n_cand: int
    n_champ: int
    tolerance: float
    verdict: RegressionVerdict
    reason: str  # "<speedup>x ci95=[..]: <why>"
    why: str  # the reason without the numbers prefix

    @property
    def ok(self) -> bool:
        return self.verdict == OK


def regression_check(
    champ: Samples,
    cand: Samples,
    tolerance: float,
    *,
    n_boot: int = 2000,
    seed: int = 0,
    paired: bool = False,
) -> RegressionCheck:
    """REGRESSED iff the whole 95% CI of the speedup lies below 1 - tolerance.

    One-sided in the candidate's favour: noise cannot prove a regression. That stands only where
    the lane could not grow (its champion's stored samples, no interleaved champion); a guard lane
    timed beside its champion grows until it is settled, and in a gated run one that never settles
    with its median below 1 - tolerance is REGRESSED (core.guard: a candidate can make its own noise).
    """
    champ_arr = _as_samples(champ, "champion")
    cand_arr = _as_samples(cand, "candidate")
    if not (math.isfinite(tolerance) and 0.0 <= tolerance < 1.0):
        raise ValueError(f"tolerance must be a fraction in [0, 1), got {tolerance!r}")
    _check_n_boot(n_boot)

    if paired:  # interleaved rounds: the same per-round ratios as compare(paired=True)
        logs, (champ_med, cand_med, speedup, low, high) = _paired_effect(champ_arr, cand_arr, n_boot, seed)
        p_slower = _paired_p(logs, "less")
    else:
        champ_med, cand_med, speedup, low, high = _ratio_of_medians(champ_arr, cand_arr, n_boot, seed)
        p_slower = _dist.mannwhitneyu_p(cand_arr, champ_arr, "greater")
    head = f"{speedup:.3f}x {fmt_ci(low, high)}"
    verdict: RegressionVerdict
    if high < 1.0 - tolerance:
        verdict = REGRESSED
        why = f"slower beyond tolerance {_fmt_pct(tolerance)} (p={p_slower:.3g})"
    else:
        verdict = OK
        why = f"within tolerance {_fmt_pct(tolerance)}"
    return RegressionCheck(
        speedup=speedup,
        ci_low=low,
        ci_high=high,
        p_slower=p_slower,
        cand_median=cand_med,
        champ_median=champ_med,
        cand_cv=robust_cv(cand_arr),
        champ_cv=robust_cv(champ_arr),
        n_cand=int(cand_arr.size),
        n_champ=int(champ_arr.size),
        tolerance=float(tolerance),
        verdict=verdict,
        reason=f"{head}: {why}",
        why=why,
    )
