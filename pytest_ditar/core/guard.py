"""`pytest --ditar-guard`: an ordinary CI's regression gate, outside any research session.

The working tree is timed against the stored champion (or the baseline) with the gate's own lanes
and checked against the quality contracts, as `dit-ar try` does; the guard then fails where a
contract failed, the candidate raised, a lane never ran, or a lane is slower beyond the tolerance:
its median ratio below 1 - tolerance with its whole CI below 1 (a slowdown the rounds show, not
one noise could make). It records nothing and acts on nothing, like pytest-benchmark's
`--benchmark-compare-fail`.

A guard's lane is grown (runtime.lanes) until it is settled: the slowdown shown, or ruled out by
the CI's lower bound at 1 - tolerance or above. Each look spends its share of the plan's alpha
(core.sequential.plan) on a CI exact for independent rounds (median_ci). A fixed dozen rounds on a
loaded CI host once read a planted 1.3x slowdown as 0.938x and passed it; more rounds narrow the
CI instead of letting noise pass a regression. A lane still unsettled when its rounds run out
passes (noise cannot prove a regression), and the PASS line names it.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from pytest_ditar.core import distributions as _dist, stats
from pytest_ditar.core.decision import LaneOutcome

CONTINUE: Final = "CONTINUE"  # core.sequential's word: time more rounds
SLOWER: Final = "SLOWER"  # the slowdown beyond the tolerance is shown
WITHIN: Final = "WITHIN"  # a slowdown beyond the tolerance is ruled out


def regressed(speedup: float, ci_high: float, tolerance: float) -> bool:
    """The guard's failing rule: the median ratio below 1 - tolerance and the whole CI below 1."""
    return speedup < 1.0 - tolerance and ci_high < 1.0


def settled(speedup: float, ci_low: float, ci_high: float, tolerance: float) -> bool:
    """Whether more rounds could still change what the guard says of the lane."""
    return regressed(speedup, ci_high, tolerance) or ci_low >= 1.0 - tolerance


@dataclass(frozen=True)
class Look:
    """A guard lane's look at its rounds so far (the objective lane's is core.sequential.Look)."""

    rounds: int
    index: int
    alpha: float  # the level this look spends (core.sequential.Plan)
    speedup: float  # exp(median per-round log ratio), champion over candidate
    ci_low: float  # exact order-statistic CI of that median at 1 - alpha
    ci_high: float
    decision: str  # SLOWER | WITHIN | CONTINUE
    voided: int = 0  # a guard voids no round: every slow call counts, on either side


def median_ci(logs: Sequence[float] | np.ndarray, alpha: float) -> tuple[float, float, float]:
    """exp of the median of `logs` and its distribution-free CI at 1 - alpha: the order statistics
    [d_(j), d_(n+1-j)] for the largest j with P(Binomial(n, 1/2) >= n + 1 - j) <= alpha / 2.

    Exact for independent rounds at any n, unlike a bootstrap's percentiles: on a dozen rounds of a
    loaded host's noise those passed an unchanged tree as slower beyond 15% for 1 seed in 6. Too few
    rounds for any j: the CI is (0, inf), and the lane grows."""
    d = np.sort(np.asarray(logs, dtype=np.float64))
    n = int(d.size)
    if n == 0 or not np.all(np.isfinite(d)):
        raise ValueError("a guard look needs finite per-round log ratios")
    tails = _dist.binom_half_sf(n - np.arange(1, n // 2 + 1), n)  # P(X >= n + 1 - j), j = 1..n/2
    ok = np.nonzero(tails <= alpha / 2.0)[0]
    centre = float(np.exp(np.median(d)))
    if ok.size == 0:
        return centre, 0.0, math.inf
    j = int(ok[-1]) + 1
    return centre, float(np.exp(d[j - 1])), float(np.exp(d[n - j]))


def look(champion: Sequence[float], candidate: Sequence[float], tolerance: float, index: int,
         alpha: float) -> Look:
    """Look `index` at a guard lane's interleaved rounds at level `alpha`: the paired speedup, its
    exact CI, and whether they settle the lane. Over a plan's looks, whose levels sum to the
    plan's alpha, an unchanged tree fails at one of them with at most alpha / 2."""
    logs = stats.log_ratios(champion, candidate)
    speedup, low, high = median_ci(logs, alpha)
    decision = (SLOWER if regressed(speedup, high, tolerance)
                else WITHIN if low >= 1.0 - tolerance else CONTINUE)
    return Look(int(logs.size), index, alpha, speedup, low, high, decision)


def counts_as_slower(last: Look, tolerance: float, *, shown_only: bool) -> bool:
    """Whether a grown lane's last look makes it REGRESSED. `--ditar-guard` fails only a slowdown
    shown (`shown_only`). A gated run's guard lane also counts as slower when its rounds ran out
    unsettled with its median below 1 - tolerance: the noise that kept the slowdown from being
    shown may be the candidate's own (tests/adversarial/test_noisy_guard.py: a 30% slowdown in
    self-made jitter was KEPT in 2 runs of 3), and a KEEP must not stand on a lane that looks slower."""
    if last.decision == SLOWER:
        return True
    return not shown_only and last.decision == CONTINUE and last.speedup < 1.0 - tolerance


def growth_note(looks: Sequence[Look], undecided: str | None, tolerance: float) -> str:
    """What a grown guard lane's reason adds: where it settled, or that it never did and why."""
    if not looks:
        return ""
    last = looks[-1]
    if last.decision == SLOWER:
        return f"; slowdown shown at look {last.index + 1}, {last.rounds} rounds"
    if last.decision == WITHIN:
        return f"; a slowdown beyond it ruled out at look {last.index + 1}, {last.rounds} rounds"
    return (f"; unresolved after {last.rounds} rounds ({undecided or 'its rounds ran out'}): "
            f"its CI [{last.ci_low:.3f},{last.ci_high:.3f}] spans {1.0 - tolerance:.2f}, too noisy to show "
            "or rule out a slowdown beyond it")


def failures(quality: Sequence[tuple[str, bool]], lanes: Iterable[LaneOutcome], expected_lanes: Iterable[str],
             errors: Sequence[str], tolerance: float) -> list[str]:
    """Why the guard fails, in order (quality, errors, lanes); [] where it passes."""
    out = []
    failed = [item for item, ok in quality if not ok]
    if failed:
        shown = ", ".join(failed[:5]) + (", ..." if len(failed) > 5 else "")
        out.append(f"quality: {len(failed)} of {len(quality)} items failed their contracts ({shown})")
    out += [f"the working tree raised: {e}" for e in errors[:1]]
    seen = {oc.name: oc for oc in lanes}
    for name in expected_lanes:
        oc = seen.get(name)
        if oc is None or oc.speedup is None:
            out.append(f"lane {name}: not measured" + (f" ({oc.reason})" if oc is not None and oc.reason else ""))
        elif oc.ci_high is not None and regressed(oc.speedup, oc.ci_high, tolerance):
            out.append(f"lane {name}: {oc.speedup:.3f}x ci=[{oc.ci_low:.3f},{oc.ci_high:.3f}] of the champion, "
                       f"slower beyond the {tolerance:.0%} tolerance")
        elif oc.verdict == "REGRESSED":  # by its summed time (core.meantime), its median within tolerance
            out.append(f"lane {name}: {oc.reason}")
    return out


def failing_lanes(lanes: Iterable[LaneOutcome], expected_lanes: Iterable[str], tolerance: float) -> list[str]:
    """The lanes `failures` fails the guard on, by name, in the same order (its lane rules, read
    from the outcomes' fields): not measured, slower beyond the tolerance, or REGRESSED."""
    seen = {oc.name: oc for oc in lanes}
    out = []
    for name in expected_lanes:
        oc = seen.get(name)
        if oc is None or oc.speedup is None or oc.verdict == "REGRESSED" or (
                oc.ci_high is not None and regressed(oc.speedup, oc.ci_high, tolerance)):
            out.append(name)
    return out


def unresolved(lanes: Iterable[LaneOutcome], tolerance: float) -> list[str]:
    """The measured lanes a guard could not settle either way: passed because noise proves nothing."""
    return [oc.name for oc in lanes if oc.speedup is not None and oc.ci_low is not None
            and oc.ci_high is not None and not settled(oc.speedup, oc.ci_low, oc.ci_high, tolerance)]


def line(fails: Sequence[str], lanes: Iterable[LaneOutcome], tolerance: float) -> str:
    """The guard's last line: `DITAR GUARD: PASS ...` or `DITAR GUARD: FAIL: <first reason>`. A PASS
    names the lanes it could not settle (`unresolved=...`): passed because noise proves nothing."""
    measured = [oc for oc in lanes if oc.speedup is not None]
    speeds = " ".join(f"{oc.name}={oc.speedup:.3f}x" for oc in measured)
    if fails:
        more = f" (+{len(fails) - 1} more)" if len(fails) > 1 else ""
        return f"DITAR GUARD: FAIL: {fails[0]}{more}"
    open_ = unresolved(measured, tolerance)
    said = f" unresolved={','.join(open_)}" if open_ else ""
    return f"DITAR GUARD: PASS {speeds} tolerance={tolerance:.0%}{said}".rstrip()
