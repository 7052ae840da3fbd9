"""The smallest win a lane can resolve before a run (issue 41): from the baseline's stored A/A
rounds and the lane's budget, so an agent knows what its host can tell apart before it spends a
run on an idea below that (`dit-ar suite`, `dit-ar status`, the next-step line after an undecided
verdict).

The same arithmetic the verdict uses after the fact (core.sequential.resolvable: the sign test at
a look's level, on rounds whose per-round log ratios spread as the A/A's did), fed with what the
lane will have: the rounds its budget affords at the A/A's pace (every side's call, and the
judge's time between calls, a round), capped at the plan's last look, less the share of rounds
the A/A would have voided, at the level of the look those rounds reach. A look rejects only when
the batch-means t test rejects too, so the level is that test's (t with B - 1 degrees of
freedom). With a twin, a KEEP needs both references' tests to reject (an intersection-union
test), so each is asked for the square root of the wanted power. Last, the A/A's own median
offset is added: two processes of one commit run apart by a share that more rounds do not average
away (a core, a cache, a neighbour's load on one of them), and a win must clear it against
whichever reference ran faster. An A/A of one process against itself (the baseline's) has no
such offset, so from it the figure is a lower bound.
Pure: numbers in, numbers out.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pytest_ditar.core import distributions as _dist, stats
from pytest_ditar.core.sequential import BATCH_MIN, MAX_BATCHES, Plan, resolvable, void_mask

POWER = 0.8


@dataclass(frozen=True)
class Reach:
    effect: float  # the smallest speedup resolved at `power`, as a fraction (0.05: 1.05x)
    spread: float  # the A/A's robust spread of per-round log ratios
    rounds: int  # the rounds the budget affords (capped at the plan's last look), less the A/A's void share
    round_s: float  # seconds a round of the gated lane, estimated from the A/A
    alpha: float  # the level of the look those rounds reach
    power: float
    sides: int
    offset: float = 0.0  # the A/A's |median log ratio|: two processes' speeds apart, which rounds do not average

    def text(self) -> str:
        apart = f", the two sides {self.offset * 100:.1f}% apart" if self.offset >= 0.0005 else ""
        return (f"resolves wins of about 1+{self.effect * 100:.1f}% and more ({self.power:.0%} power: A/A spread "
                f"{self.spread * 100:.1f}% a round{apart}, ~{self.rounds} rounds of {self.sides} calls in the budget)")


def t_isf(q: float, df: int) -> float:
    """Student's t quantile: the t whose upper tail is `q` (bisection on distributions.t_sf)."""
    lo, hi = 0.0, 1e3
    for _ in range(100):
        mid = (lo + hi) / 2
        if float(_dist.t_sf(mid, df)) > q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def smallest_win(aa_champion: Sequence[float], aa_candidate: Sequence[float], aa_round_s: float,
                 the_plan: Plan, threshold: float, budget_s: float, sides: int,
                 power: float = POWER) -> Reach | None:
    """The lane's Reach from its stored A/A rounds (seconds per call of each side, and the seconds
    an A/A round of two calls took on the judge's clock, warm-up left out); None with fewer than 3
    A/A rounds."""
    if len(aa_champion) < 3 or len(aa_champion) != len(aa_candidate) or sides < 2:
        return None
    spread = stats.log_spread(stats.log_ratios(aa_champion, aa_candidate))
    round_s = aa_round_s * sides / 2.0
    affordable = int(budget_s / round_s) if round_s > 0 else the_plan.looks[-1]
    # the first look is always taken; a budget that ends between looks takes its last one there
    rounds = max(the_plan.looks[0], min(affordable, the_plan.looks[-1]))
    k = sum(1 for n in the_plan.looks if n < rounds)
    alpha = the_plan.alphas[min(k, len(the_plan.alphas) - 1)]
    # rounds a reference's stall voids are re-timed only within the budget: the A/A's share of them
    # (either side as a reference) is lost from the count
    void = float(void_mask([np.log(np.asarray(aa_champion)), np.log(np.asarray(aa_candidate))]).mean())
    counted = max(1, int(rounds * (1.0 - void)))
    # the look also needs the batch-means t test (B - 1 degrees of freedom) to reject: its level, as
    # the normal level the sign test's power formula takes
    batches = min(MAX_BATCHES, counted // BATCH_MIN)
    level = _dist.normal_sf(t_isf(alpha, batches - 1)) if batches >= 2 else alpha
    per_test = math.sqrt(power) if sides > 2 else power  # champion and twin: both must reject
    # two processes of the same code ran this far apart over the A/A: a win must clear that too
    offset = abs(float(np.median(stats.log_ratios(aa_champion, aa_candidate))))
    effect = (1.0 + resolvable(spread, counted, level, threshold, per_test)) * math.exp(offset) - 1.0
    return Reach(effect, spread, counted, round_s, alpha, power, sides, offset)
