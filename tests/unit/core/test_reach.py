"""core.reach (issue 41): the smallest win a lane can resolve, planned from A/A rounds and a
budget, checked against the sequential rule itself (core.sequential.simulate, the gate's `decide`)
on simulated lanes: at the planned effect about 80% of lanes KEEP, fewer at two thirds of it, more
at 1.5x. On the tiny suite against benchmarks/power.py: docs/benchmarks.md, "Issue 41"."""
from __future__ import annotations

import numpy as np
import pytest

from pytest_ditar.core.reach import smallest_win, t_isf
from pytest_ditar.core.sequential import FASTER, plan, simulate

PLAN = plan(20, 384, 0.05)  # the objective lane's default plan for the tiny suite's latency_b1


def _aa(sigma: float, n: int = 400, seed: int = 1) -> tuple[list[float], list[float]]:
    rng = np.random.default_rng(seed)
    return list(np.exp(rng.normal(np.log(0.05), sigma, n))), list(np.exp(rng.normal(np.log(0.05), sigma, n)))


def test_t_quantile_inverts_the_t_tail():
    assert t_isf(0.01, 9) == pytest.approx(2.821, abs=1e-3)  # tables: t(0.99, 9)
    assert t_isf(0.05, 1000) == pytest.approx(1.646, abs=2e-3)


def test_a_noisier_host_or_a_smaller_budget_resolves_only_larger_wins():
    quiet, noisy = _aa(0.02), _aa(0.08)
    r = smallest_win(*quiet, aa_round_s=0.1, the_plan=PLAN, threshold=0.01, budget_s=10, sides=3)
    assert r is not None and r.rounds <= 100 and r.round_s == pytest.approx(0.15)
    assert smallest_win(*noisy, 0.1, PLAN, 0.01, 10, 3).effect > r.effect
    assert smallest_win(*quiet, 0.1, PLAN, 0.01, 60, 3).effect < r.effect
    assert smallest_win(*quiet, 0.1, PLAN, 0.01, 10, 2).effect < r.effect  # no twin: one test to pass
    cap = smallest_win(*quiet, 0.001, PLAN, 0.01, 1e6, 3)
    assert cap.rounds <= PLAN.looks[-1] and smallest_win(*quiet, 10.0, PLAN, 0.01, 1, 3).rounds >= PLAN.looks[0]
    assert smallest_win([0.1, 0.1], [0.1, 0.1], 0.1, PLAN, 0.01, 10, 3) is None  # fewer than 3 A/A rounds


@pytest.mark.parametrize("sigma", [0.03, 0.06])
def test_the_planned_effect_is_what_the_sequential_rule_keeps_80_percent_of_the_time(sigma):
    aa = _aa(sigma)
    budget_rounds = 80
    r = smallest_win(*aa, aa_round_s=0.1, the_plan=PLAN, threshold=0.01, budget_s=budget_rounds * 0.15, sides=3)
    rng = np.random.default_rng(7)
    lanes = 1000

    def keep_rate(effect: float) -> float:
        sides = {k: rng.normal(0.0, sigma, (lanes, budget_rounds)) for k in ("candidate", "champion", "twin")}
        sides["candidate"] -= np.log1p(effect)
        decision, _ = simulate(sides, 0.01, PLAN, budget_rounds=budget_rounds)
        return float(np.mean(decision == FASTER))

    at, below, above = keep_rate(r.effect), keep_rate(r.effect / 1.5), keep_rate(r.effect * 1.5)
    assert below < 0.8 < above, (r, below, at, above)  # the 80% point lies within 1.5x of the plan
    assert 0.6 <= at <= 0.97, (r, at)
