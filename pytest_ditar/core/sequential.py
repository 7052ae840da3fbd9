"""Sequential paired lanes: add randomized rounds until a comparison is decidable.

Pure functions over per-round timings, like core.stats. The objective lane starts with its
minimum rounds and is looked at; while the evidence neither clears the threshold nor rules it
out, more rounds are timed, up to the plan's last look or the lane's time budget.

What the design assumes, and what it guarantees
-----------------------------------------------
A round times every side once on the same fresh request, in an order drawn from the judge's
entropy: the candidate, the champion and (by default) the champion's twin, a second build of
the champion's commit in a process of its own. Real hosts do not disturb rounds independently:
a noisy core, a clock change or a neighbour slows ONE process for tens of rounds, and a test
that treats rounds as independent reads that as an effect (on the H200 an unchanged candidate
was called 1.036x faster in 20 rounds). Three defences, each for what the others miss:

- Two references. A KEEP needs the candidate to beat the champion AND the twin, each by its
  own test at the look's full level (an intersection-union test: its false-KEEP rate is at most
  the level of either test, so nothing is split). A disturbance that slows one reference process
  cannot make a KEEP alone: it has to slow both references and not the candidate at once. The
  twin also carries whatever a freshly built process gains over the long-lived champion (its
  "seat"), so that gain is never read as the candidate's.
- Batch means. Each test is the exact sign test of median(d) > theta on the rounds, where
  d = log(reference / candidate) and theta = log(1 + threshold), AND the same claim tested on
  batches of >= BATCH_MIN consecutive rounds (at most MAX_BATCHES batches: the share of rounds
  above theta in each batch, a t test over the batches). The sign test is exact for independent
  rounds; the batch test's variance comes from the batches' own spread, so runs of disturbed
  rounds widen it instead of looking like evidence. A look rejects only when both do. A look at
  fewer than two batches' worth of rounds uses the sign test alone, against theta plus
  EARLY_MARGIN (5%): a short window decides a 2x win at once, and a 2% one only later.
- Voids. A round in which a REFERENCE's call took more than `void_ratio` times that side's
  median so far (a stall, a burst of load), or started on a device busy with another process's
  work (core.interference), is void: it counts for neither side and more rounds are timed. A
  slow candidate call is never voided: it counts against the candidate, so a candidate cannot
  have its own slow calls thrown out. A lane whose voided share stays above `max_void` at its
  end is UNSTABLE.

Looks happen at planned round counts n_1 < ... < n_K (doubling from the minimum), look k at level
alpha_k with alpha_1 + ... + alpha_K = alpha (Bonferroni): by the union bound the false-KEEP
rate holds under any stopping rule, early stops for futility and the time budget included.
Futility (either reference's sign test rules the win out at alpha_k) ends a lane NOT_FASTER early.
An undecided lane is NOT_FASTER, or UNSTABLE when its spread is over `max_cv` (too noisy to decide
within its budget); a decided lane is never thrown away for its spread. tests/unit/core/test_sequential.py
checks the false-KEEP rate at the boundary by simulation: Gaussian, heavy-tailed, one-sided
bursts of 20-60 rounds, Markov switching, AR(1) up to phi 0.9, H200 rounds resampled in blocks.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from pytest_ditar.core import distributions as _dist, stats

CONTINUE: Final = "CONTINUE"
FASTER: Final = "FASTER"  # a look's decision, the same word as core.stats' verdict
FUTILE: Final = "FUTILE"
CANDIDATE: Final = "candidate"
CHAMPION: Final = "champion"
TWIN: Final = "twin"
BATCH_MIN: Final = 8  # rounds per batch at least: AR(1) noise of phi 0.9 held alpha at 8, not at 4
MAX_BATCHES: Final = 10
# Below two batches a look can only say FASTER for a win this much beyond the threshold: a window
# that short cannot tell a small effect from a disturbance lasting as long as the window.
EARLY_MARGIN: Final = 0.05
VOID_RATIO: Final = 1.5  # a call this much slower than its side's median voids its round
MAX_VOID: Final = 0.25  # more voided rounds than this share at the lane's end: UNSTABLE


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
    rounds: int  # rounds timed so far, void ones included
    index: int
    alpha: float  # the level this look spends
    p_faster: float  # the largest over the references: every one must reject
    p_futile: float  # the smallest over the references: one ruling the win out is enough
    decision: str  # FASTER | FUTILE | CONTINUE
    voided: int = 0  # rounds not counted (a side's call over void_ratio x its median, or foreign work)


def _check_threshold(threshold: float) -> None:
    if not (math.isfinite(threshold) and threshold >= 0.0):
        raise ValueError(f"threshold must be a finite fraction >= 0, got {threshold!r}")


def _sign_p(x: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact one-sided sign tests per row over the valid nonzero entries of x, both ways: it
    needs no symmetry (skewed host noise moves a signed-rank test's pseudo-median; in the
    simulation that kept 48% at the boundary on H200 graph-replay noise)."""
    above = np.sum((x > 0) & valid, axis=-1)
    below = np.sum((x < 0) & valid, axis=-1)
    m = above + below
    p_up = np.where(m > 0, _dist.binom_half_sf(above - 1, m), 1.0)
    p_down = np.where(m > 0, _dist.binom_half_sf(below - 1, m), 1.0)
    return p_up, p_down


def _batch_p(x: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """One-sided batch-means test that more than half the rounds lie above 0: the rounds cut
    into B consecutive batches of >= BATCH_MIN (B <= MAX_BATCHES), each batch's mean of
    sign(x)/2, a t test with B - 1 degrees of freedom. Fewer than 2 batches: p = 1 (decide()
    then asks the sign test for a win beyond EARLY_MARGIN instead)."""
    n = x.shape[-1]
    b = min(MAX_BATCHES, n // BATCH_MIN)
    if b < 2:
        return np.ones(x.shape[0])
    edges = np.linspace(0, n, b + 1).astype(int)
    s = np.where(valid, np.sign(x) / 2.0, 0.0)
    means = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        cnt = valid[:, lo:hi].sum(axis=1)
        means.append(np.where(cnt > 0, s[:, lo:hi].sum(axis=1) / np.maximum(cnt, 1), 0.0))
    fr = np.stack(means, axis=1)
    mean, sd = fr.mean(axis=1), fr.std(axis=1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(sd > 0, mean / (sd / math.sqrt(b)), np.where(mean > 0, np.inf, np.where(mean < 0, -np.inf, 0.0)))
    p: np.ndarray = _dist.t_sf(t, b - 1)
    return p


def void_mask(refs: Sequence[np.ndarray], void_ratio: float = VOID_RATIO) -> np.ndarray:
    """Rounds (last axis) in which a reference's log time exceeds its own median by
    log(void_ratio). Only references: voiding a round in which the candidate was slow would
    throw out evidence against the candidate."""
    bad = np.zeros(np.shape(refs[0]), dtype=bool)
    for s in refs:
        bad |= (s - np.median(s, axis=-1, keepdims=True)) > math.log(void_ratio)
    return bad


def decide(refs: Sequence[np.ndarray], cand: np.ndarray, threshold: float, alpha: float, last: bool,
           void: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One look on log times, rows independent lanes, rounds on the last axis (the simulation and
    the gate run this same code): (decisions, p_faster, p_futile). FASTER when, for every
    reference, both the sign test and the batch test of median(log(ref / cand)) > theta reject at
    `alpha` (below 2 * BATCH_MIN rounds: the sign test beyond threshold + EARLY_MARGIN); FUTILE when
    any reference's sign test rules it out at `alpha`, or `last`."""
    _check_threshold(threshold)
    c = np.atleast_2d(np.asarray(cand, dtype=np.float64))
    valid = ~np.atleast_2d(void) if void is not None else np.ones(c.shape, dtype=bool)
    p_fast = np.zeros(c.shape[0])
    p_futile = np.ones(c.shape[0])
    short = c.shape[-1] < 2 * BATCH_MIN  # too few rounds for two batches: only a decisive win can decide
    for r in refs:
        x = np.atleast_2d(np.asarray(r, dtype=np.float64)) - c - math.log1p(threshold)
        up, down = _sign_p(x, valid)
        if short:
            up, _ = _sign_p(x - math.log1p(EARLY_MARGIN), valid)
        p_fast = np.maximum(p_fast, up if short else np.maximum(up, _batch_p(x, valid)))
        p_futile = np.minimum(p_futile, down)
    out = np.where(p_fast < alpha, FASTER, np.where((p_futile < alpha) | last, FUTILE, CONTINUE))
    return out, p_fast, p_futile


def _logs(samples: Sequence[float]) -> np.ndarray:
    a = np.asarray(samples, dtype=np.float64)
    if a.size == 0 or not (np.all(np.isfinite(a)) and np.all(a > 0)):
        raise ValueError("timing samples must be non-empty, finite and > 0")
    return np.log(a)


def look(sides: Mapping[str, Sequence[float]], threshold: float, the_plan: Plan, index: int,
         foreign: Sequence[int] = (), void_ratio: float = VOID_RATIO) -> Look:
    """Look `index` of the plan at the rounds so far. `sides` maps candidate, champion and
    optionally twin to per-round seconds; `foreign` lists rounds voided because another process
    worked on the device while a side was timed. The last look never continues: an undecided
    lane ends FUTILE, i.e. NOT_FASTER."""
    cand = _logs(sides[CANDIDATE])
    refs = [_logs(sides[k]) for k in (CHAMPION, TWIN) if sides.get(k)]
    if not refs or any(r.shape != cand.shape for r in refs):
        raise ValueError("every side needs one sample per round")
    void = void_mask(refs, void_ratio)
    for i in foreign:
        if 0 <= i < void.size:
            void[i] = True
    a = the_plan.alphas[index]
    out, p_fast, p_futile = decide(refs, cand, threshold, a, index == len(the_plan.looks) - 1, void)
    return Look(int(cand.size), index, a, float(p_fast[0]), float(p_futile[0]), str(out[0]), int(void.sum()))


def simulate(sides: Mapping[str, np.ndarray], threshold: float, the_plan: Plan, budget_rounds: int | None = None,
             void_ratio: float = VOID_RATIO) -> tuple[np.ndarray, np.ndarray]:
    """The sequential rule on many simulated lanes at once: `sides` maps candidate, champion and
    optionally twin to (lanes, rounds) LOG times, at least as many rounds as the plan (or the
    budget) can use. Looks at the plan's counts; a budget that ends before a look takes that look
    where the budget ends, as the gate does. Returns each lane's final decision and rounds used."""
    cand = np.asarray(sides[CANDIDATE], dtype=np.float64)
    refs = [np.asarray(sides[k], dtype=np.float64) for k in (CHAMPION, TWIN) if k in sides]
    lanes = cand.shape[0]
    decision = np.full(lanes, CONTINUE, dtype=object)
    rounds = np.zeros(lanes, dtype=int)
    for k, n in enumerate(the_plan.looks):
        final = k == len(the_plan.looks) - 1 or (budget_rounds is not None and n >= budget_rounds)
        n = min(n, budget_rounds) if budget_rounds is not None else n
        open_ = decision == CONTINUE
        if not np.any(open_):
            break
        c = cand[open_, :n]
        rs = [r[open_, :n] for r in refs]
        out, _, _ = decide(rs, c, threshold, the_plan.alphas[k], last=False, void=void_mask(rs, void_ratio))
        decision[open_] = out
        rounds[open_] = n
        if final:
            break
    decision[decision == CONTINUE] = FUTILE  # undecided when the rounds ran out: never a KEEP
    return decision, rounds


def resolvable(spread: float, rounds: int, alpha: float, threshold: float, power: float = 0.8) -> float:
    """The smallest speedup an undecided lane's rounds could have resolved (at `power`), as a
    fraction: the sign test at `alpha` on `rounds` rounds whose log ratios spread `spread`
    (robust sd, taken as Gaussian: the density at the median is 1 / (spread * sqrt(2 pi))), beyond
    1 + threshold. Said beside "undecided", it tells a user whether the budget or the host was short."""
    if rounds < 1 or not (spread > 0.0 and math.isfinite(spread)):
        return threshold
    z = _dist.normal_isf(alpha) + _dist.normal_ppf(power)
    shift = z * spread * math.sqrt(math.pi / 2.0) / math.sqrt(rounds)
    return (1.0 + threshold) * math.exp(shift) - 1.0


def verdict(sides: Mapping[str, Sequence[float]], threshold: float, looks: Sequence[Look], the_plan: Plan, *,
            undecided: str | None, max_cv: float, max_void: float = MAX_VOID, n_boot: int = 2000) -> Any:
    """The lane's core.stats.Comparison after its last look: speedup, 95% CI and spread against
    the champion over the counted rounds (as compare(paired=True) reports them), the verdict from
    the sequential rule. FASTER only from a look that rejected; an undecided lane is UNSTABLE when
    too many rounds were void or its spread is over `max_cv` (too noisy to decide within its
    budget), else NOT_FASTER."""
    from dataclasses import replace

    last = looks[-1]
    champ, cand = list(sides[CHAMPION]), list(sides[CANDIDATE])
    c = stats.compare(champ, cand, min_effect=threshold, alpha=the_plan.alpha, max_cv=max(max_cv, 1e9),
                      n_boot=n_boot, paired=True)
    head = f"{c.speedup:.3f}x {stats.fmt_ci(c.ci_low, c.ci_high)}"
    at = f"look {last.index + 1} of {len(the_plan.looks)}, {last.rounds} rounds"
    if last.voided:
        at += f" ({last.voided} void)"
    refs = "champion and twin" if sides.get(TWIN) else "champion"
    bar = f"1+{threshold * 100:.1f}%"
    spread = stats.log_spread(stats.log_ratios(champ, cand))  # as compare(paired=True) measures it
    ended = undecided or "the plan's last look"
    counted = last.rounds - last.voided
    reach = (f"; at a spread of {spread * 100:.1f}% a round, {counted} rounds resolve wins of about "
             f"1+{resolvable(spread, counted, last.alpha, threshold) * 100:.1f}% and more")

    def out(verdict_: stats.Verdict, why: str) -> Any:
        return replace(c, verdict=verdict_, reason=f"{head}: {why}" if verdict_ != stats.FASTER else why, why=why)

    if last.decision == FASTER:
        return out(stats.FASTER, f"{head} beats {bar} against the {refs}: sign and batch tests p={last.p_faster:.2g} "
                                 f"< {last.alpha:.2g} at {at} (alpha {the_plan.alpha:g} spent over "
                                 f"{len(the_plan.looks)} looks)")
    if c.ci_high < 1.0 - threshold:
        return out(stats.SLOWER, f"slower, upper bound below 1-{threshold * 100:.1f}% ({at})")
    if last.decision == FUTILE and last.p_futile < last.alpha:
        return out(stats.NOT_FASTER, f"not faster beyond {bar}: ruled out at {at} (p={last.p_futile:.2g})")
    if last.rounds and last.voided > max_void * last.rounds:
        return out(stats.UNSTABLE, f"{last.voided} of {last.rounds} rounds void (a reference's call over "
                                   f"{VOID_RATIO:g}x its median, on a busy device or a throttled one) at {at}, "
                                   f"{ended}: too noisy to decide")
    if spread > max_cv:
        return out(stats.UNSTABLE, f"undecided at {at}, {ended}, with a lane spread of {spread * 100:.1f}% > "
                                   f"{max_cv * 100:.1f}%: too noisy to decide within the budget{reach}")
    return out(stats.NOT_FASTER, f"not faster beyond {bar}: undecided at {at}, {ended} (p={last.p_faster:.2g}){reach}")
