"""core.effect: the one threshold rule of the gate and `dit-ar compare`; core.cumulative.cite: the one
figure status, compare and the report give for the champion."""
import pytest

from pytest_ditar.core.cumulative import cite
from pytest_ditar.core.effect import noise_floor, threshold
from pytest_ditar.store.records import LedgerRow as Row

FLOOR = dict(ratio=1.02, ci_low=0.95, ci_high=1.09, ci_half_width=0.07, abs_shift=0.02, cv_a=0.05, cv_b=0.05,
             n_a=20, n_b=20)
NOISE = {**FLOOR, "paired": {**FLOOR, "ci_half_width": 0.01, "abs_shift": 0.005}}


def test_a_grown_lane_is_judged_at_min_speedup_whatever_the_noise():
    assert threshold(NOISE, paired=True, grown=True, min_speedup=0.03, noise_k=2.0) == 0.03


def test_other_lanes_at_k_times_the_baseline_noise_paired_where_paired_never_below_min_speedup():
    assert threshold(NOISE, paired=False, grown=False, min_speedup=0.03, noise_k=2.0) == pytest.approx(0.14)
    assert threshold(NOISE, paired=True, grown=False, min_speedup=0.01, noise_k=2.0) == pytest.approx(0.02)
    assert threshold(NOISE, paired=True, grown=False, min_speedup=0.03, noise_k=2.0) == 0.03
    assert threshold(None, paired=True, grown=False, min_speedup=0.03, noise_k=2.0) == 0.03
    # a baseline stored without a paired A/A: the unpaired one stands in
    assert noise_floor(FLOOR, paired=True).ci_half_width == 0.07 and noise_floor({}, paired=False) is None


def test_cite_chains_the_kept_rows_and_says_so():
    assert cite([]) is None
    one = cite([Row(1, metric=2.0, ci_low=1.9, ci_high=2.1)])
    assert one.text() == "2.000x ci95=[1.900,2.100] chained over 1 KEEP(s)"
    two = cite([Row(1, metric=2.0, ci_low=1.9, ci_high=2.1), Row(2, metric="1.5", ci_low="", ci_high="")])
    assert two.speedup == pytest.approx(3.0) and two.ci_low is None and two.text() == "3.000x chained over 2 KEEP(s)"
    assert cite([Row(1, metric="")]) is None  # a kept row without a speedup: nothing to cite


def test_cite_chains_the_net_figures_where_every_kept_row_has_one_and_states_the_gross_beside():
    """Issue 49: the round trip in every call shrinks each gross ratio; the net ones are chained, each
    interval scaled with its figure, and a ledger with one row lacking it stays gross throughout."""
    rows = [Row(1, metric=1.5, ci_low=1.4, ci_high=1.6, net=1.6), Row(2, metric=2.0, ci_low=1.8, ci_high=2.2, net=2.5)]
    c = cite(rows)
    assert c.net and c.speedup == pytest.approx(4.0) and c.gross == pytest.approx(3.0)
    single = cite(rows[1:])
    assert (single.ci_low, single.ci_high) == (pytest.approx(1.8 * 1.25), pytest.approx(2.2 * 1.25))
    assert c.text().startswith("4.000x ci95=") and c.text().endswith("chained over 2 KEEP(s)")
    assert c.basis().startswith("net of the harness's round trip") and "through the harness 3.000x" in c.basis()
    mixed = cite([rows[0], Row(2, metric=2.0, ci_low=1.8, ci_high=2.2, net="")])
    assert not mixed.net and mixed.speedup == pytest.approx(3.0) and mixed.basis() == ""
