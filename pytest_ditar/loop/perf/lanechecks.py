"""What a lane's rounds show, as evidence (loop.perf.lanes gathers it): the statistic of its rounds
(core.sequential, core.guard's looks, core.stats), the summed time a median may hide, the tail
rule's 90 calls, the speed-up net of the harness's round trip, and what the lane's record says
beside its verdict, deciding nothing (the anchor's ratios, the retired stored-samples figures).
Each returns a frozen finding (a `cause` where a rule reads one); core.laneoutcome.compose alone
turns the findings into the lane's outcome."""
from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict

from pytest_ditar.config.project import PerfConfig
from pytest_ditar.core import anchor, guard, meantime, roundtrip, sequential as seq, stats
from pytest_ditar.core.laneoutcome import (
    FEW_CALLS,
    ONE_ROUND,
    TAIL_SHOWN,
    TAIL_UNPROVEN,
    TOTAL_SLOWER,
    TOTAL_UNPROVEN,
    Statistic,
    TailCheck,
    TotalCheck,
)
from pytest_ditar.core.vocabulary import SIDE_CANDIDATE
from pytest_ditar.runtime.lanes import LaneMeasurement
from pytest_ditar.runtime.lanesetup import Sequential


def _trimmed_mean(xs: Sequence[float], cut: float = 0.1) -> float:
    k = int(len(xs) * cut)
    kept = sorted(xs)[k:len(xs) - k] or sorted(xs)
    return statistics.fmean(kept)


def host_ratio(now: Sequence[float], stored: Sequence[float]) -> float:
    """How much slower the host is now than when the champion's samples were stored (the judge's
    fixed workload, runtime.lanesetup.host_speed), in [1, 2]; 1 when either has under 3 probes.

    A trimmed mean, not a median: a probe is short and lands in a burst of a bursty host's load or
    between two, so the median flips from one mode to the other while the mean follows the share of
    time the host is busy, which is what a longer call feels. Never below 1: a host that looks
    faster than at the baseline does not make a champion at its old speed suspect (the probe is
    too short to say that), it only excuses a slower one."""
    if len(now) < 3 or len(stored) < 3:
        return 1.0
    return min(2.0, max(1.0, _trimmed_mean(now) / _trimmed_mean(stored)))


def information(m: LaneMeasurement, stored_samples: Sequence[float] | None, stored_host_s: Sequence[float] | None,
                 kept_anchor: float | None, drift: anchor.AnchorDrift | None,
                 net: roundtrip.Net | None) -> dict[str, object]:
    """What the lane's record says beside its verdict, deciding nothing: the anchor's ratios, the
    champion's in-run median against its stored samples and the host probe then and now (the retired
    drift rule's figures, kept as information), and the speed-up net of the harness's round trip."""
    out: dict[str, object] = {}
    if m.anchor_samples:
        out["anchor"] = {"kept_ratio": kept_anchor, "rounds": len(m.anchor_samples),
                         "champion_ratio": anchor.ratio(m.champion_samples, m.anchor_samples),
                         "candidate_ratio": anchor.ratio(m.samples, m.anchor_samples),
                         "drift": asdict(drift) if drift is not None else None}
    if stored_samples and m.champion_samples:
        out["stored"] = {"champion_in_run_median_s": statistics.median(m.champion_samples),
                         "champion_kept_median_s": statistics.median(stored_samples),
                         "host_ratio": host_ratio(m.host_s, list(stored_host_s or []))}
    if net is not None:
        out["net"] = asdict(net)
    return out


def statistic(m: LaneMeasurement, champion_samples: list[float], *, objective: bool, source: str,
              perf_cfg: PerfConfig, sequential: Sequential | None, guard_run: bool, paired: bool,
              min_effect: float) -> tuple[Statistic, dict[str, object]]:
    """What the lane's statistics say of its rounds (the checks that void them passed), and the
    comparison its record keeps: a lane grown by `sequential` by its looks (core.sequential), a
    guard lane grown by core.guard's looks by its last, any other by core.stats."""
    if sequential is not None:
        looks = [seq.Look(**lk) for lk in m.looks]
        c = seq.verdict(m.sides(), min_effect, looks, sequential.plan, undecided=m.undecided,
                        max_cv=perf_cfg.max_cv, n_boot=perf_cfg.n_boot)
        refs = "champion and twin in the same randomized rounds" if m.twin_samples else "champion, no twin"
        comparison = asdict(c)
        if m.twin_samples:
            twin = stats.compare(m.champion_samples, m.twin_samples, min_effect=0.0, max_cv=1e9,
                                 n_boot=perf_cfg.n_boot, paired=True)
            comparison["twin_vs_champion"] = {"speedup": twin.speedup, "ci_low": twin.ci_low, "ci_high": twin.ci_high}
        said = f"{c.why} [{source} paired {refs}, threshold {min_effect * 100:.1f}% = min_speedup]"
        return Statistic(c.verdict, c.speedup, c.ci_low, c.ci_high, said), comparison
    if paired and not objective and m.looks:  # a guard lane grown by core.guard's looks
        looks_ = [guard.Look(**lk) for lk in m.looks]
        return guard_statistic(m, looks_, perf_cfg.guard_tolerance, source, shown_only=guard_run), dict(m.looks[-1])
    if objective:
        c = stats.compare(champion_samples, m.samples, min_effect=min_effect, alpha=perf_cfg.alpha,
                          max_cv=perf_cfg.max_cv, n_boot=perf_cfg.n_boot, paired=paired)
    else:
        c = stats.regression_check(champion_samples, m.samples, perf_cfg.guard_tolerance,
                                   n_boot=perf_cfg.n_boot, paired=paired)
    # c.why, not c.reason: the verdict line already carries the speedup and its CI
    said = f"{c.why} [{source}{' paired' if paired else ''} champion, min effect {min_effect * 100:.1f}%]"
    return Statistic(c.verdict, c.speedup, c.ci_low, c.ci_high, said), asdict(c)


def guard_statistic(m: LaneMeasurement, looks: list[guard.Look], tolerance: float, source: str, *,
                    shown_only: bool) -> Statistic:
    """A guard lane grown by core.guard's looks is what its last look says: the rule that stopped
    the rounds is the rule that judges them (and what its record keeps)."""
    last = looks[-1]
    slower = guard.counts_as_slower(last, tolerance, shown_only=shown_only)
    verdict = stats.REGRESSED if slower else stats.OK
    why = (f"within tolerance {tolerance * 100:.1f}%" if not slower
           else f"slower beyond tolerance {tolerance * 100:.1f}%" if last.decision == guard.SLOWER
           else f"slower than 1-{tolerance * 100:.1f}% by its median, not ruled out")
    said = (f"{why}{guard.growth_note(looks, m.undecided, tolerance)} [{source} paired champion, "
            f"exact CI at {(1 - last.alpha) * 100:.2f}%]")
    return Statistic(verdict, last.speedup, last.ci_low, last.ci_high, said)


def net(m: LaneMeasurement) -> roundtrip.Net | None:
    """The lane's speed-up net of the harness's round trip (core.roundtrip: the anchor's empty calls
    where it ran, the champion's where it is the baseline's code), or None."""
    trusted = (("anchor", m.empty_s["anchor"]) if m.empty_s.get("anchor")
               else ("champion", m.empty_s.get("champion", [])) if m.anchor_is_champion else None)
    return roundtrip.net_speedup(m.champion_samples, m.samples, m.empty_s.get("champion", []),
                                 m.empty_s.get(SIDE_CANDIDATE, []), trusted)


def total(champion_samples: Sequence[float], samples: Sequence[float], perf_cfg: PerfConfig) -> TotalCheck:
    """What the paired rounds' summed time shows against the champion's (core.meantime): shown
    slower beyond the guard tolerance, or not shown within it (through the candidate's slowest round
    alone, or not), or nothing. core.laneoutcome decides what that makes of the lane."""
    tolerance, n_boot = perf_cfg.guard_tolerance, perf_cfg.n_boot
    loss = meantime.mean_loss(champion_samples, samples, tolerance, n_boot=n_boot)
    if loss is not None:
        return TotalCheck(TOTAL_SLOWER, loss)
    unproven = meantime.total_unproven(champion_samples, samples, tolerance, n_boot=n_boot)
    if unproven is None:
        return TotalCheck(None)
    found = meantime.total_ratio(champion_samples, samples, n_boot=n_boot)
    slowest = max(range(len(samples)), key=samples.__getitem__)
    rest = [i for i in range(len(samples)) if i != slowest]
    single = meantime.total_unproven([champion_samples[i] for i in rest], [samples[i] for i in rest], tolerance,
                                     n_boot=n_boot) is None
    return TotalCheck(ONE_ROUND if single else TOTAL_UNPROVEN, unproven,
                      reads_slower=found is not None and found[0] < 1.0 - tolerance)


def tail(m: LaneMeasurement, calls: int, ci_low: float | None, perf_cfg: PerfConfig) -> TailCheck | None:
    """The candidate's timed calls against the tail rule's `calls` (core.meantime.TAIL_CALLS): its
    rounds and its confirming calls counted, the confirming calls judged by the total-time rule
    (core.meantime.confirmed_total) against the win's lower bound `ci_low`. None: no rule (calls 0)."""
    if calls <= 0:
        return None
    made = len(m.samples) + len(m.confirm_s)
    if made < calls:
        return TailCheck(FEW_CALLS, calls, made, len(m.confirm_s))
    if not m.confirm_s:
        return TailCheck(None, calls, made, 0)
    unproven = meantime.confirmed_total(m.champion_samples, m.samples, m.confirm_s, ci_low or 0.0,
                                        perf_cfg.guard_tolerance, n_boot=perf_cfg.n_boot)
    return TailCheck(TAIL_SHOWN if unproven is None else TAIL_UNPROVEN, calls, made, len(m.confirm_s), unproven or "")
