"""Sequential paired lanes: add interleaved rounds until a comparison is decidable.

Pure functions over per-round timings, like core.stats. The objective lane starts with its
minimum rounds and is looked at; while the evidence neither clears the threshold nor rules it
out, another block of rounds is timed, up to the plan's last look or the lane's time budget.

The design, and why its false-KEEP rate holds under optional stopping
---------------------------------------------------------------------
- Per round i, d_i = log(champion_i / candidate_i) (the two sides of a round share its drift).
- The claim a KEEP makes: the median of d exceeds theta = log(1 + threshold), where threshold is
  the larger of the user's ``min_speedup`` and the champion's measured build bias (see
  ``bias_floor``). The null hypothesis is median(d) <= theta.
- Looks happen at planned round counts n_1 < n_2 < ... < n_K (doubling from the minimum); look k
  tests the null with an exact one-sided sign test on d_i - theta at level alpha_k, with
  alpha_1 + ... + alpha_K = alpha (equal shares: Bonferroni alpha spending).
- P(any look rejects a true null) <= sum over k of P(look k rejects) <= sum of alpha_k = alpha, by the
  union bound, whatever the correlation between looks: the false-KEEP rate holds for every
  stopping rule, early stops for futility and the time budget included (stopping without a
  rejection can only lower it). The price is a stricter level per look (alpha/K); doubling keeps
  K small (6 looks from 12 to 384 rounds).
- Futility: look k also tests median(d) >= theta the other way at alpha_k; rejecting it ends the
  lane NOT_FASTER early. That can cost a true win at most alpha_k of its power at that look.
- An undecided lane (budget or last look reached) is NOT_FASTER, never a KEEP.
The sign test assumes only independent rounds (no symmetry: skewed host noise moves a signed-rank
test's pseudo-median off the median). Interleaving (ABBA) puts drift on both sides of a round;
load that comes in runs of rounds breaks independence, so a lane whose per-round spread is over
`max_cv` is UNSTABLE whatever its looks said (verdict). tests/test_sequential.py checks the rate
by simulation with heavy-tailed, bursty, drifting and H200-resampled noise.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from scipy import stats as _sps

CONTINUE: Final = "CONTINUE"
FASTER: Final = "FASTER"
FUTILE: Final = "FUTILE"


@dataclass(frozen=True)
class Plan:
    """Round counts at which a lane is looked at, and the level each look spends."""

    looks: tuple[int, ...]
    alphas: tuple[float, ...]

    @property
    def alpha(self) -> float:
        return float(sum(self.alphas))


def plan(min_rounds: int, max_rounds: int, alpha: float, growth: float = 2.0) -> Plan:
    """Looks at min_rounds, then growing by `growth` (rounded, at least +1), the last at max_rounds;
    alpha split equally among them."""
    if min_rounds < 3:
        raise ValueError(f"min_rounds must be >= 3, got {min_rounds}")
    if max_rounds < min_rounds:
        raise ValueError(f"max_rounds ({max_rounds}) must be >= min_rounds ({min_rounds})")
    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if growth <= 1.0:
        raise ValueError(f"growth must be > 1, got {growth!r}")
    looks = [min_rounds]
    while looks[-1] < max_rounds:
        looks.append(min(max_rounds, max(looks[-1] + 1, int(round(looks[-1] * growth)))))
    return Plan(tuple(looks), tuple(alpha / len(looks) for _ in looks))


@dataclass(frozen=True)
class Look:
    rounds: int
    index: int
    alpha: float  # the level this look spends
    p_faster: float  # one-sided: median log ratio > theta
    p_futile: float  # one-sided: median log ratio < theta
    decision: str  # FASTER | FUTILE | CONTINUE


def _sign_p(x: np.ndarray, alternative: str) -> np.ndarray:
    """One-sided exact sign test per row: of the nonzero entries, how many lie above 0, against
    Binomial(m, 1/2). It needs no symmetry, only independent rounds, so it holds for the skewed,
    heavy-tailed noise a host gives (a signed-rank test tests the pseudo-median, which skew moves:
    it kept 48% at the boundary on the H200's graph-replay noise in the simulation)."""
    above = np.sum(x > 0, axis=-1)
    m = np.sum(x != 0, axis=-1)
    if alternative == "greater":
        return np.where(m > 0, _sps.binom.sf(above - 1, m, 0.5), 1.0)
    return np.where(m > 0, _sps.binom.cdf(above, m, 0.5), 1.0)


def log_ratios(champ: Sequence[float], cand: Sequence[float]) -> np.ndarray:
    a = np.asarray(champ, dtype=np.float64)
    b = np.asarray(cand, dtype=np.float64)
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"paired samples must be non-empty and of equal length, got {a.size} and {b.size}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b)) and np.all(a > 0) and np.all(b > 0)):
        raise ValueError("timing samples must be finite and > 0")
    return np.log(a) - np.log(b)


def _check_threshold(threshold: float) -> None:
    if not (math.isfinite(threshold) and threshold >= 0.0):
        raise ValueError(f"threshold must be a finite fraction >= 0, got {threshold!r}")


def decide(d: np.ndarray, threshold: float, alpha: float, last: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One look on the last axis of `d` (log ratios; rows are independent lanes, so the simulation
    and the gate run this same code): (decisions, p_faster, p_futile). FASTER when the sign test
    of median(d) > log(1 + threshold) rejects at `alpha`, FUTILE when the opposite test does or
    `last` is set, else CONTINUE."""
    _check_threshold(threshold)
    x = np.atleast_2d(np.asarray(d, dtype=np.float64)) - math.log1p(threshold)
    p_fast, p_futile = _sign_p(x, "greater"), _sign_p(x, "less")  # an all-zero row: p = 1 both ways
    out = np.where(p_fast < alpha, FASTER, np.where((p_futile < alpha) | last, FUTILE, CONTINUE))
    return out, p_fast, p_futile


def look(champ: Sequence[float], cand: Sequence[float], threshold: float, the_plan: Plan, index: int) -> Look:
    """Look `index` of the plan at the rounds so far (the last look never continues: an undecided
    lane ends FUTILE, i.e. NOT_FASTER)."""
    d = log_ratios(champ, cand)
    a = the_plan.alphas[index]
    out, p_fast, p_futile = decide(d, threshold, a, index == len(the_plan.looks) - 1)
    return Look(int(d.size), index, a, float(p_fast[0]), float(p_futile[0]), str(out[0]))


def simulate(d: np.ndarray, threshold: float, the_plan: Plan, budget_rounds: int | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
    """Run the sequential rule on many simulated lanes at once: `d` is (lanes, rounds) of per-round
    log ratios, at least as many rounds as the plan (or the budget) can use. Looks at the plan's
    counts; a budget that ends before a look takes that look where the budget ends, as the gate
    does. Returns each lane's final decision and the rounds it used."""
    lanes = d.shape[0]
    decision = np.full(lanes, CONTINUE, dtype=object)
    rounds = np.zeros(lanes, dtype=int)
    for k, n in enumerate(the_plan.looks):
        final = k == len(the_plan.looks) - 1 or (budget_rounds is not None and n >= budget_rounds)
        n = min(n, budget_rounds) if budget_rounds is not None else n
        open_ = decision == CONTINUE
        if not np.any(open_):
            break
        out, _, _ = decide(d[open_, :n], threshold, the_plan.alphas[k], last=False)
        decision[open_] = out
        rounds[open_] = n
        if final:
            break
    decision[decision == CONTINUE] = FUTILE  # undecided when the rounds ran out: never a KEEP
    return decision, rounds


@dataclass(frozen=True)
class Bias:
    """The champion against itself built a second time, interleaved as the gate runs a candidate:
    how much the candidate's seat alone is worth (> 0: the second build ran faster)."""

    ratio: float  # exp(median log(champion / twin))
    ci_low: float
    ci_high: float
    rounds: int

    @property
    def floor(self) -> float:
        """The part of a speedup the seat can explain: the CI's upper bound above 1 when the whole
        CI is above 1 (a bias the data show), else 0. A seat slower than the champion's only
        hides wins, so it is not subtracted."""
        return max(0.0, self.ci_high - 1.0) if self.ci_low > 1.0 else 0.0


def bias(champ: Sequence[float], twin: Sequence[float], n_boot: int = 2000, seed: int = 0) -> Bias:
    """The build bias from an interleaved champion-vs-twin run (median per-round ratio and its 95%
    bootstrap CI, whole rounds resampled)."""
    d = log_ratios(champ, twin)
    idx = np.random.default_rng(seed).integers(0, d.size, size=(int(n_boot), d.size))
    low, high = np.exp(np.percentile(np.median(d[idx], axis=1), [2.5, 97.5]))
    return Bias(float(np.exp(np.median(d))), float(low), float(high), int(d.size))


def threshold(min_speedup: float, champion_bias: Bias | None) -> float:
    """What a KEEP must beat: the user's worth-keeping threshold or the seat's bias, the larger."""
    return max(float(min_speedup), champion_bias.floor if champion_bias is not None else 0.0)


def verdict(champ: Sequence[float], cand: Sequence[float], threshold: float, looks: Sequence[Look],
            the_plan: Plan, *, undecided: str | None, max_cv: float, n_boot: int = 2000) -> Any:
    """The lane's core.stats.Comparison after its last look: the numbers (speedup, 95% CI, spread)
    as compare(paired=True) reports them, the verdict from the sequential rule. A per-round spread
    over `max_cv` is UNSTABLE whatever the looks said; else FASTER only from a look that rejected,
    and a lane that ran out undecided is NOT_FASTER."""
    from dataclasses import replace

    from pytest_ditar.core import stats

    last = looks[-1]
    c = stats.compare(champ, cand, min_effect=threshold, alpha=the_plan.alpha, max_cv=max_cv, n_boot=n_boot,
                      paired=True)
    head = f"{c.speedup:.3f}x ci95=[{c.ci_low:.3f},{c.ci_high:.3f}]"
    at = f"look {last.index + 1} of {len(the_plan.looks)}, {last.rounds} rounds"
    bar = f"1+{threshold * 100:.1f}%"
    logs = log_ratios(champ, cand)
    spread = float(np.subtract(*np.percentile(logs, [75.0, 25.0])) / 1.349)
    ended = undecided or "the plan's last look"
    if spread > max_cv:
        # A look's level holds for independent rounds; rounds this spread on a host's bursts are
        # not (a 2-core box under load ran one side 2x slower for seven rounds in a row and a
        # look said FASTER at p=0.013 in an A/A run). Noise that large decides nothing.
        why = (f"lane spread {spread * 100:.1f}% > {max_cv * 100:.1f}% at {at}"
               f"{', ' + undecided if undecided else ''}: too noisy to decide")
        return replace(c, verdict=stats.UNSTABLE, reason=why, why=why)
    if last.decision == FASTER:
        why = (f"{head} beats {bar}: sign test p={last.p_faster:.2g} < {last.alpha:.2g} at {at} "
               f"(alpha {the_plan.alpha:g} spent over {len(the_plan.looks)} looks)")
        return replace(c, verdict=stats.FASTER, reason=why, why=why)
    if c.ci_high < 1.0 - threshold:
        why = f"slower, upper bound below 1-{threshold * 100:.1f}% ({at})"
        verdict_ = stats.SLOWER
    elif last.decision == FUTILE and last.p_futile < last.alpha:
        why = f"not faster beyond {bar}: ruled out at {at} (p={last.p_futile:.2g})"
        verdict_ = stats.NOT_FASTER
    else:
        why = f"not faster beyond {bar}: undecided at {at}, {ended} (p={last.p_faster:.2g})"
        verdict_ = stats.NOT_FASTER
    return replace(c, verdict=verdict_, reason=f"{head}: {why}", why=why)
