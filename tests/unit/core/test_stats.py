"""Unit tests for pytest_ditar.stats: the lane keep/discard statistics."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pytest_ditar.core import stats
from pytest_ditar.core.stats import (
    FASTER,
    NOT_FASTER,
    OK,
    REGRESSED,
    SLOWER,
    UNSTABLE,
    NoiseFloor,
    bootstrap_ratio_ci,
    calibrated_min_effect,
    compare,
    noise_floor,
    regression_check,
    summarize,
)


def lognormal(rng: np.random.Generator, median: float, cv: float, n: int) -> np.ndarray:
    """Timing-like samples: right-skewed, strictly positive, ~cv relative spread."""
    return median * rng.lognormal(mean=0.0, sigma=cv, size=n)


# --------------------------------------------------------------------------- compare


def test_aa_same_distribution_never_faster_across_50_seeds() -> None:
    verdicts = []
    for seed in range(50):
        rng = np.random.default_rng(1000 + seed)
        champ = lognormal(rng, 0.600, 0.02, 20)
        cand = lognormal(rng, 0.600, 0.02, 20)
        verdicts.append(compare(champ, cand, min_effect=0.01, n_boot=1000, seed=seed).verdict)
    assert FASTER not in verdicts
    # The same noise should not look like a regression either, at least almost always.
    assert verdicts.count(NOT_FASTER) >= 48


def test_true_ten_percent_speedup_is_faster() -> None:
    rng = np.random.default_rng(7)
    champ = lognormal(rng, 0.600, 0.02, 20)
    cand = lognormal(rng, 0.600 / 1.10, 0.02, 20)
    c = compare(champ, cand, min_effect=0.01)
    assert c.verdict == FASTER, c.reason
    assert c.is_faster
    assert c.ci_low > 1.0
    assert c.ci_low <= c.speedup <= c.ci_high
    assert 1.05 < c.speedup < 1.15
    assert c.p_value < 0.05
    assert c.n_cand == c.n_champ == 20
    assert "p=" in c.reason and "ci95=" in c.reason


def test_ten_percent_slowdown_is_slower() -> None:
    rng = np.random.default_rng(8)
    champ = lognormal(rng, 0.600, 0.02, 20)
    cand = lognormal(rng, 0.600 * 1.10, 0.02, 20)
    c = compare(champ, cand, min_effect=0.01)
    assert c.verdict == SLOWER, c.reason
    assert c.ci_high < 0.99
    assert c.p_slower < 0.05
    assert c.p_value > 0.5


def test_small_real_effect_below_min_effect_is_not_faster() -> None:
    rng = np.random.default_rng(9)
    champ = lognormal(rng, 0.600, 0.005, 30)
    cand = lognormal(rng, 0.600 / 1.02, 0.005, 30)
    # A real 2% gain, but the lane demands 5%: not good enough to keep.
    c = compare(champ, cand, min_effect=0.05)
    assert c.verdict == NOT_FASTER, c.reason
    assert compare(champ, cand, min_effect=0.005).verdict == FASTER


def test_bimodal_high_variance_is_unstable() -> None:
    rng = np.random.default_rng(10)
    champ = lognormal(rng, 0.600, 0.02, 20)
    # Two modes, every other run 50% slower (a lane flipping between fast and slow paths).
    cand = np.tile([0.40, 0.60], 10) * rng.lognormal(0.0, 0.01, size=20)
    c = compare(champ, cand, min_effect=0.01)
    assert c.verdict == UNSTABLE
    assert "too noisy" in c.reason and "candidate" in c.reason
    assert c.cand_cv > 0.10


def test_random_sleeps_make_the_champion_unstable() -> None:
    rng = np.random.default_rng(16)
    # Each run sleeps a random 0..40% of its work, like time.sleep(random()) in the timed region.
    champ = 0.500 * (1.0 + rng.uniform(0.0, 0.4, size=20))
    cand = lognormal(rng, 0.550, 0.02, 20)  # inside the champion jitter: no separation
    c = compare(champ, cand, min_effect=0.01)
    assert c.verdict == UNSTABLE, c.reason
    assert "champion" in c.reason


def test_single_outlier_does_not_make_lane_unstable() -> None:
    # Robust CV: one GC-pause-like hiccup must not block a clear decision.
    rng = np.random.default_rng(11)
    champ = lognormal(rng, 0.600, 0.02, 20)
    cand = lognormal(rng, 0.500, 0.02, 20)
    cand[3] = 5.0
    c = compare(champ, cand, min_effect=0.01)
    assert c.verdict == FASTER, c.reason
    assert summarize(cand).cv > 0.10  # the classic CV would have called it unstable


def test_compare_is_deterministic_by_seed() -> None:
    rng = np.random.default_rng(12)
    champ = lognormal(rng, 0.600, 0.03, 15)
    cand = lognormal(rng, 0.590, 0.03, 15)
    a = compare(champ, cand, min_effect=0.01, seed=3)
    b = compare(list(champ), list(cand), min_effect=0.01, seed=3)
    assert a == b
    c = compare(champ, cand, min_effect=0.01, seed=4)
    assert (c.ci_low, c.ci_high) != (a.ci_low, a.ci_high)


def test_comparison_is_frozen() -> None:
    c = compare([1.0, 1.01, 0.99], [1.0, 1.01, 0.99], min_effect=0.01)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.verdict = FASTER  # type: ignore[misc]


@pytest.mark.parametrize(
    ("champ", "cand", "match"),
    [
        ([1.0, 1.0], [1.0, 1.0, 1.0], "at least 3"),
        ([1.0, 1.0, 1.0], [1.0], "at least 3"),
        ([1.0, float("nan"), 1.0], [1.0, 1.0, 1.0], "finite"),
        ([1.0, 1.0, 1.0], [1.0, float("inf"), 1.0], "finite"),
        ([1.0, 0.0, 1.0], [1.0, 1.0, 1.0], "> 0"),
        ([1.0, 1.0, 1.0], [1.0, -2.0, 1.0], "> 0"),
        ([1.0, "x", 1.0], [1.0, 1.0, 1.0], "numbers"),
    ],
)
def test_compare_rejects_bad_samples(champ: list, cand: list, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        compare(champ, cand, min_effect=0.01)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_effect": -0.01},
        {"min_effect": float("nan")},
        {"min_effect": 0.01, "alpha": 0.0},
        {"min_effect": 0.01, "alpha": 1.5},
        {"min_effect": 0.01, "max_cv": 0.0},
        {"min_effect": 0.01, "n_boot": 10},
    ],
)
def test_compare_rejects_bad_parameters(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        compare([1.0, 1.1, 0.9], [1.0, 1.1, 0.9], **kwargs)


# --------------------------------------------------------------------------- bootstrap


def test_bootstrap_ci_deterministic_and_brackets_ratio() -> None:
    rng = np.random.default_rng(13)
    champ = lognormal(rng, 1.0, 0.02, 30)
    cand = lognormal(rng, 0.8, 0.02, 30)
    ci1 = bootstrap_ratio_ci(champ, cand, seed=5)
    ci2 = bootstrap_ratio_ci(champ, cand, seed=5)
    assert ci1 == ci2
    ratio = np.median(champ) / np.median(cand)
    assert ci1[0] < ratio < ci1[1]
    narrow = bootstrap_ratio_ci(champ, cand, seed=5, conf=0.5)
    assert ci1[0] <= narrow[0] <= narrow[1] <= ci1[1]
    with pytest.raises(ValueError, match="conf"):
        bootstrap_ratio_ci(champ, cand, conf=1.0)


# --------------------------------------------------------------------------- A/A calibration


def test_noise_floor_and_calibrated_min_effect() -> None:
    rng = np.random.default_rng(14)
    a = lognormal(rng, 0.600, 0.02, 20)
    b = lognormal(rng, 0.600, 0.02, 20) * 1.004  # a little back-to-back drift
    nf = noise_floor(a, b)
    assert isinstance(nf, NoiseFloor)
    assert 0.0 < nf.ci_half_width < 0.05
    assert nf.abs_shift == pytest.approx(abs(1.0 - nf.ratio))
    assert nf.ci_low <= nf.ratio <= nf.ci_high
    assert nf.n_a == nf.n_b == 20
    assert 0.0 < nf.cv_a < 0.05 and 0.0 < nf.cv_b < 0.05

    noise_term = max(nf.ci_half_width, nf.abs_shift)
    assert calibrated_min_effect(nf, floor=0.0, k=2.0) == pytest.approx(2.0 * noise_term)
    assert calibrated_min_effect(nf, floor=0.5, k=2.0) == 0.5  # the floor wins
    assert calibrated_min_effect(None, floor=0.01, k=3.0) == 0.01

    # The calibrated threshold must be larger on a noisier machine.
    noisy = noise_floor(lognormal(rng, 0.6, 0.08, 20), lognormal(rng, 0.6, 0.08, 20))
    assert calibrated_min_effect(noisy, 0.0, 2.0) > calibrated_min_effect(nf, 0.0, 2.0)


def test_paired_noise_floor_cancels_drift_that_the_unpaired_one_sees() -> None:
    # Slow drift shared by both arms of each round (a host that speeds up and slows down),
    # plus 1% per-call jitter: pairing should see only the jitter.
    rng = np.random.default_rng(3)
    drift = 0.6 * (1.0 + 0.15 * np.sin(np.linspace(0, 6, 20)))
    a = drift * rng.lognormal(0.0, 0.01, 20)
    b = drift * rng.lognormal(0.0, 0.01, 20)
    unpaired, paired = noise_floor(a, b), stats.paired_noise_floor(a, b)
    assert paired.ci_half_width < 0.02 < unpaired.ci_half_width
    assert paired.ci_low <= paired.ratio <= paired.ci_high
    with pytest.raises(ValueError, match="equal length"):
        stats.paired_noise_floor(a, b[:-1])


def test_calibrated_min_effect_from_shift_dominates() -> None:
    nf = NoiseFloor(
        ratio=1.044, ci_low=1.03, ci_high=1.05, ci_half_width=0.01, abs_shift=0.044,
        cv_a=0.065, cv_b=0.177, n_a=20, n_b=20,
    )
    assert calibrated_min_effect(nf, floor=0.01, k=1.5) == pytest.approx(0.066)
    with pytest.raises(ValueError):
        calibrated_min_effect(nf, floor=-0.1, k=1.0)
    with pytest.raises(ValueError):
        calibrated_min_effect(nf, floor=0.01, k=float("nan"))


# --------------------------------------------------------------------------- guard lanes


def test_regression_check() -> None:
    rng = np.random.default_rng(15)
    champ = lognormal(rng, 0.100, 0.02, 20)
    same = lognormal(rng, 0.100, 0.02, 20)
    slower = lognormal(rng, 0.100 * 1.15, 0.02, 20)
    slightly = lognormal(rng, 0.100 * 1.02, 0.005, 20)

    ok = regression_check(champ, same, tolerance=0.03)
    assert ok.verdict == OK and ok.ok
    bad = regression_check(champ, slower, tolerance=0.03)
    assert bad.verdict == REGRESSED and not bad.ok
    assert bad.ci_high < 0.97 and "tolerance" in bad.reason
    # A small slowdown inside tolerance is allowed.
    assert regression_check(champ, slightly, tolerance=0.05).verdict == OK
    with pytest.raises(ValueError, match="tolerance"):
        regression_check(champ, same, tolerance=1.5)


# --------------------------------------------------------------------------- summarize


def test_summarize() -> None:
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s.n == 5
    assert s.median == 3.0
    assert s.mean == 22.0
    assert s.min == 1.0 and s.max == 100.0
    assert s.stdev == pytest.approx(float(np.std([1, 2, 3, 4, 100], ddof=1)))
    assert s.cv == pytest.approx(s.stdev / s.mean)
    assert s.iqr == 2.0
    assert s.robust_cv == pytest.approx(2.0 / (1.349 * 3.0))
    one = summarize([0.5])
    assert one.n == 1 and one.stdev == 0.0 and one.cv == 0.0
    with pytest.raises(ValueError):
        summarize([])
    assert stats.robust_cv([2.0, 2.0, 2.0]) == 0.0


def test_noisy_lanes_decide_only_on_separated_distributions():
    """Spread above max_cv is UNSTABLE unless the candidate's slow quartile beats the champion's fast one."""
    rng = np.random.default_rng(7)
    champ = rng.normal(0.81, 0.03, 20)
    bimodal = np.concatenate([rng.normal(0.27, 0.005, 12), rng.normal(0.60, 0.01, 8)])  # jittery but always faster
    c = compare(champ, bimodal, min_effect=0.2, max_cv=0.2)
    assert c.cand_cv > 0.2 and c.verdict == FASTER and "75th percentile" in c.reason
    overlapping = np.concatenate([rng.normal(0.55, 0.01, 10), rng.normal(0.95, 0.01, 10)])
    assert compare(champ, overlapping, min_effect=0.2, max_cv=0.2).verdict == UNSTABLE


# --------------------------------------------------------------------------- paired (interleaved) rounds


def _drifting_rounds(rng: np.random.Generator, n: int, jitter: float, drift: float) -> np.ndarray:
    """A host whose speed wanders by `drift` between rounds; both sides of a round share it."""
    return 1.0 + drift * np.sin(np.linspace(0.0, 7.0, n) + rng.uniform(0, 6)) + rng.normal(0, jitter, n).clip(-0.5, 0.5)


def test_paired_compare_sees_a_small_real_speedup_that_drift_hides_from_the_unpaired_one() -> None:
    rng = np.random.default_rng(21)
    host = 0.6 * _drifting_rounds(rng, 20, 0.0, 0.15)
    champ = host * rng.lognormal(0, 0.01, 20)
    cand = host / 1.06 * rng.lognormal(0, 0.01, 20)  # 6% faster, every round
    unpaired = compare(champ, cand, min_effect=0.02, max_cv=0.20)
    paired = compare(champ, cand, min_effect=0.02, max_cv=0.20, paired=True)
    assert unpaired.verdict != FASTER
    assert paired.verdict == FASTER and paired.paired and 1.03 < paired.ci_low <= paired.speedup < 1.09
    assert paired.p_value < 0.01


def test_paired_compare_never_keeps_an_aa_run_under_drift() -> None:
    keeps = 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        host = 0.6 * _drifting_rounds(rng, 20, 0.0, 0.15)
        a, b = host * rng.lognormal(0, 0.03, 20), host * rng.lognormal(0, 0.03, 20)
        floor = stats.paired_noise_floor(a, b)  # calibrated on an independent A/A pair
        a2, b2 = host * rng.lognormal(0, 0.03, 20), host * rng.lognormal(0, 0.03, 20)
        c = compare(a2, b2, min_effect=calibrated_min_effect(floor, 0.02, 2.0), max_cv=0.20, paired=True)
        keeps += c.verdict == FASTER
    assert keeps <= 2  # a 1% false-KEEP budget, with margin for 200 draws


def test_paired_compare_is_unstable_when_the_per_round_ratios_spread() -> None:
    rng = np.random.default_rng(5)
    champ = 0.6 * rng.lognormal(0, 0.01, 20)
    cand = champ / rng.choice([0.7, 1.4], 20)  # bimodal per round: half the rounds much slower
    c = compare(champ, cand, min_effect=0.02, max_cv=0.20, paired=True)
    assert c.verdict == UNSTABLE and "per-round ratio" in c.reason
    with pytest.raises(ValueError, match="equal length"):
        compare(champ, cand[:-1], min_effect=0.02, paired=True)


def test_paired_regression_check_flags_a_consistent_slowdown() -> None:
    rng = np.random.default_rng(8)
    host = 0.6 * _drifting_rounds(rng, 20, 0.0, 0.15)
    champ = host * rng.lognormal(0, 0.01, 20)
    cand = host * 1.10 * rng.lognormal(0, 0.01, 20)
    assert regression_check(champ, cand, 0.05, paired=True).verdict == REGRESSED
    assert regression_check(champ, champ * 1.01, 0.05, paired=True).verdict == OK
