"""core.anchor: the champion's drift against the baseline's code timed in the same rounds (issue 49),
on synthetic paired rounds. Pure: no worker, no timing."""
import numpy as np
import pytest

from pytest_ditar.core import anchor


def _rounds(champion_s: float, anchor_s: float, n: int = 30, seed: int = 1, load: float = 1.0,
            spread: float = 0.03) -> tuple[list[float], list[float]]:
    """Paired rounds: each round's host load (bursty, around `load`) slows both sides alike."""
    rng = np.random.default_rng(seed)
    host = load * np.exp(0.4 * rng.standard_normal(n))
    champ = champion_s * host * np.exp(spread * rng.standard_normal(n))
    anch = anchor_s * host * np.exp(spread * rng.standard_normal(n))
    return list(champ), list(anch)


def test_a_host_twice_as_slow_in_bursts_is_no_drift():
    champ, anch = _rounds(0.05, 0.10, load=2.0)
    found = anchor.drift(champ, anch, kept=0.5)
    assert found is not None and not found.shown, found
    assert found.now == pytest.approx(0.5, rel=0.03)
    quiet_c, quiet_a = _rounds(0.05, 0.10, load=1.0, seed=2)
    assert anchor.ratio(quiet_c, quiet_a) == pytest.approx(anchor.ratio(champ, anch), rel=0.03)


def test_a_champion_that_slows_itself_ten_percent_drifts():
    champ, anch = _rounds(0.055, 0.10, load=1.7)
    found = anchor.drift(champ, anch, kept=0.5)
    assert found is not None and found.shown and found.p < 0.05, found
    assert 1.05 < found.factor < 1.15 and found.taken_off >= found.factor
    assert found.reason().startswith("champion drift against the anchor: kept at 0.500x the anchor's time, now 0.55")
    # against a 1.1x win the drift's upper bound leaves nothing: void; a 2x win stands
    assert anchor.charge(1.08, 1.01, found)[0]
    voided, said = anchor.charge(1.9, 1.01, found)
    assert not voided and "still clears" in said


def test_only_a_worse_ratio_counts_and_small_drifts_are_not_called():
    faster, anch = _rounds(0.045, 0.10)  # a champion faster relative to the stock code than kept
    assert not anchor.drift(faster, anch, kept=0.5).shown
    slight, anch = _rounds(0.0515, 0.10, spread=0.005)  # 3%: shown by the test, under the 5% minimum
    found = anchor.drift(slight, anch, kept=0.5)
    assert found.p < 0.05 and not found.shown


def test_twice_as_slow_as_kept_is_not_the_kept_champion_and_too_few_rounds_say_nothing():
    champ, anch = _rounds(0.10, 0.10)
    found = anchor.drift(champ, anch, kept=0.5)
    voided, said = anchor.charge(40.0, 1.01, found)
    assert voided and "not the champion that was kept" in said
    assert anchor.drift(champ[:5], anch[:5], kept=0.5) is None
    assert anchor.ratio(champ[:5], anch[:5]) is None
    assert anchor.drift(champ, anch, kept=float("nan")) is None
    with pytest.raises(ValueError):
        anchor.drift(champ[:-1], anch, kept=0.5)  # fewer champion rounds than anchor rounds: no pairing


def test_the_anchor_timed_in_the_first_rounds_pairs_with_the_first_rounds():
    """The anchor runs in a lane's first ROUNDS rounds (and BUDGET_S of its calls): the champion's
    later rounds are not paired."""
    champ, anch = _rounds(0.055, 0.10, n=60)
    found = anchor.drift(champ, anch[:anchor.ROUNDS], kept=0.5)
    assert found.rounds == anchor.ROUNDS and found.shown
    assert anchor.ratio(champ, anch[:20]) == anchor.ratio(champ[:20], anch[:20])
