"""The checks a lane's verdict passes once its statistics spoke (loop.lanes judges with them):
interference from the untimed side, the summed time a median may hide, the tail rule's 90 calls,
the champion's drift against the anchor, and what the lane's record says beside its verdict,
deciding nothing (the anchor's ratios, the retired stored-samples figures, the net speed-up)."""
from __future__ import annotations

import statistics
from dataclasses import asdict, replace
from typing import Any

from pytest_ditar.core import anchor, interference, meantime, roundtrip, stats
from pytest_ditar.core.decision import LaneOutcome
from pytest_ditar.core.vocabulary import DRIFT, INTERFERENCE, SIDE_CANDIDATE
from pytest_ditar.runtime.lanes import LaneMeasurement


def _trimmed_mean(xs: list[float], cut: float = 0.1) -> float:
    k = int(len(xs) * cut)
    kept = sorted(xs)[k:len(xs) - k] or sorted(xs)
    return statistics.fmean(kept)


def host_ratio(now: list[float], stored: list[float]) -> float:
    """How much slower the host is now than when the champion's samples were stored (the judge's
    fixed workload, runtime.lanes.host_speed), in [1, 2]; 1 when either has under 3 probes.

    A trimmed mean, not a median: a probe is short and lands in a burst of a bursty host's load or
    between two, so the median flips from one mode to the other while the mean follows the share of
    time the host is busy, which is what a longer call feels. Never below 1: a host that looks
    faster than at the baseline does not make a champion at its old speed suspect (the probe is
    too short to say that), it only excuses a slower one."""
    if len(now) < 3 or len(stored) < 3:
        return 1.0
    return min(2.0, max(1.0, _trimmed_mean(now) / _trimmed_mean(stored)))


def interference_checked(oc: LaneOutcome, slowed: interference.AfterCandidate, guard_tolerance: float) -> LaneOutcome:
    """A reference slowed right after the candidate's calls flatters the candidate, so a verdict
    against it (a loss, a regression, a total time not shown) stands, the interference named. A win
    (a guard lane's pass) stands only where its lower bound still clears the bar with the slowdown's
    upper bound charged to the candidate (AfterCandidate.floor): an honest 2x win is not voided by a
    cold cache after another process's call; work the candidate left behind is counted as its own.
    Else the lane is UNSTABLE, cause interference (not judged: run once more)."""
    why = slowed.reason()
    if oc.verdict not in (stats.FASTER, stats.OK):
        return replace(oc, reason=f"{oc.reason}; {why}")
    bar = 1.0 + (oc.threshold or 0.0) if oc.objective else 1.0 - guard_tolerance
    floor = slowed.floor(oc.ci_low or 0.0)
    if floor > bar:
        return replace(oc, reason=f"{oc.reason}; {why}; charged with up to {slowed.high * 100:.1f}% of the "
                                  f"{slowed.side}'s call, its lower bound {floor:.3f}x still clears {bar:.3f}x")
    return replace(oc, verdict=stats.UNSTABLE, cause=INTERFERENCE,
                   reason=f"{why}; charged with up to {slowed.high * 100:.1f}% of the {slowed.side}'s call, "
                          f"its lower bound {floor:.3f}x does not clear {bar:.3f}x")


def information(m: LaneMeasurement, stored_samples: list[float] | None, stored_host_s: list[float] | None,
                 kept_anchor: float | None, drift: anchor.AnchorDrift | None) -> dict[str, Any]:
    """What the lane's record says beside its verdict, deciding nothing: the anchor's ratios, the
    champion's in-run median against its stored samples and the host probe then and now (the retired
    drift rule's figures, kept as information), and the speed-up net of the harness's round trip."""
    out: dict[str, Any] = {}
    if m.anchor_samples:
        out["anchor"] = {"kept_ratio": kept_anchor, "rounds": len(m.anchor_samples),
                         "champion_ratio": anchor.ratio(m.champion_samples, m.anchor_samples),
                         "candidate_ratio": anchor.ratio(m.samples, m.anchor_samples),
                         "drift": asdict(drift) if drift is not None else None}
    if stored_samples and m.champion_samples:
        out["stored"] = {"champion_in_run_median_s": statistics.median(m.champion_samples),
                         "champion_kept_median_s": statistics.median(stored_samples),
                         "host_ratio": host_ratio(m.host_s, list(stored_host_s or []))}
    net = roundtrip.net_speedup(m.champion_samples, m.samples, m.empty_s.get("champion", []),
                              m.empty_s.get(SIDE_CANDIDATE, []))
    if net is not None:
        out["net"] = asdict(net)
    return out


def net_named(oc: LaneOutcome, comparison: dict[str, Any]) -> LaneOutcome:
    """The lane's reason names its speed-up net of the harness's round trip beside the gross one."""
    net = comparison.get("net")
    if not net or oc.speedup is None:
        return oc
    return replace(oc, reason=f"{oc.reason}; {roundtrip.Net(**net).describe()}")


def tail_checked(oc: LaneOutcome, m: LaneMeasurement, calls: int, perf_cfg: Any) -> LaneOutcome:
    """No KEEP before the candidate's timed calls would have met a slow share of 5% with 99%
    (core.meantime.TAIL_CALLS): its rounds and its confirming calls are counted, and the total-time
    rule judges them (core.meantime.confirmed_total). Too few calls (the budget or a failure ended
    the confirmation) is UNSTABLE: not judged."""
    if oc.verdict != stats.FASTER or not oc.objective or calls <= 0:
        return oc
    made = len(m.samples) + len(m.confirm_s)
    if made < calls:
        return replace(oc, verdict=stats.UNSTABLE,
                       reason=f"faster by its median call over {made} timed calls, fewer than the {calls} that meet "
                              f"a 5% share of slow calls with 99%; {oc.reason}")
    if not m.confirm_s:
        return oc
    unproven = meantime.confirmed_total(m.champion_samples, m.samples, m.confirm_s, oc.ci_low or 0.0,
                                        perf_cfg.guard_tolerance, n_boot=perf_cfg.n_boot)
    if unproven is None:
        return replace(oc, reason=f"{oc.reason}; {len(m.confirm_s)} confirming calls of the candidate alone, "
                                  f"its total time within the tolerance")
    return replace(oc, verdict=stats.NOT_FASTER, reason=f"faster by its median call, but {unproven}; {oc.reason}")


def drift_checked(oc: LaneOutcome, drift: anchor.AnchorDrift | None) -> LaneOutcome:
    """The objective lane whose champion reads slower against the anchor than when kept (core.anchor):
    a win the drift's upper bound could explain is UNSTABLE: cause drift (the champion's doing) where
    the drift is shown, no cause (the host's noise: run again) where it only reads worse; a win that
    clears it stands, the drift named; any other verdict stands, a shown drift named (a loss against
    a slowed champion is a loss)."""
    if drift is None or not (drift.shown or drift.worse):
        return oc
    if not (oc.objective and oc.verdict == stats.FASTER):
        return replace(oc, drift=drift.taken_off, reason=f"{oc.reason}; {drift.reason()}") if drift.shown else oc
    voided, said = anchor.charge(oc.ci_low or 0.0, 1.0 + (oc.threshold or 0.0), drift)
    if voided:
        what = drift.reason() if drift.shown else f"{drift.reason()}, not shown to drift"
        return replace(oc, verdict=stats.UNSTABLE, cause=DRIFT if drift.shown else None, drift=drift.taken_off,
                       reason=f"{what}; {said} ({oc.reason})")
    return replace(oc, drift=drift.taken_off, reason=f"{oc.reason}; {said}; {drift.reason()}")


def mean_checked(oc: LaneOutcome, champion_samples: list[float], samples: list[float], perf_cfg: Any, *,
                  strict: bool = False) -> LaneOutcome:
    """What the user pays is the sum of calls (core.meantime). A win, or a guard lane within
    tolerance, whose summed time is shown slower beyond the guard tolerance is neither; nor is an
    objective lane too noisy to decide by its median (one not faster by it has the loss named). A
    lane that wins by its median (the objective lane FASTER, a guard lane whose median is shown faster) must also show
    its total within the tolerance: else the objective lane is NOT_FASTER and a guard lane
    REGRESSED. Where the candidate's slowest round alone makes the difference (a host's stall, or
    a slow share the rounds hit once), the objective lane is UNSTABLE (not judged: it runs once
    more) and a guard lane of a gated run stays as it was; `strict` (--ditar-guard) fails it."""
    if oc.verdict not in (stats.FASTER, stats.OK, stats.UNSTABLE, stats.NOT_FASTER):
        return oc
    tolerance = perf_cfg.guard_tolerance
    loss = meantime.mean_loss(champion_samples, samples, tolerance, n_boot=perf_cfg.n_boot)
    if loss is not None:
        if oc.verdict == stats.OK:
            return replace(oc, verdict=stats.REGRESSED, reason=f"{loss}; {oc.reason}")
        by_median = {stats.FASTER: "faster by its median call", stats.NOT_FASTER: "not faster by its median call"
                     }.get(oc.verdict, "undecided by its median call")
        return replace(oc, verdict=stats.NOT_FASTER, reason=f"{by_median}, but {loss}; {oc.reason}")
    wins = oc.verdict == stats.FASTER or (oc.verdict == stats.OK and (oc.ci_low or 0.0) > 1.0)
    named = wins or oc.verdict == stats.NOT_FASTER  # a median that undersells a slow share: the share named
    unproven = meantime.total_unproven(champion_samples, samples, tolerance, n_boot=perf_cfg.n_boot) if named else None
    if unproven is None:
        return oc
    if oc.verdict == stats.NOT_FASTER:  # named where the total itself reads slower, not for an A/A's noise
        found = meantime.total_ratio(champion_samples, samples, n_boot=perf_cfg.n_boot)
        slower = found is not None and found[0] < 1.0 - tolerance
        return replace(oc, reason=f"not faster by its median call, and {unproven}; {oc.reason}") if slower else oc
    slowest = max(range(len(samples)), key=samples.__getitem__)
    rest = [i for i in range(len(samples)) if i != slowest]
    single = meantime.total_unproven([champion_samples[i] for i in rest], [samples[i] for i in rest], tolerance,
                                     n_boot=perf_cfg.n_boot) is None
    if oc.verdict == stats.FASTER:
        if single:
            return replace(oc, verdict=stats.UNSTABLE, reason=f"faster by its median call, but {unproven}, from one "
                                                              f"round (a stall, or a slow share hit once); {oc.reason}")
        return replace(oc, verdict=stats.NOT_FASTER, reason=f"faster by its median call, but {unproven}; {oc.reason}")
    if single and not strict:
        return oc
    return replace(oc, verdict=stats.REGRESSED, reason=f"faster by its median call, but {unproven}; {oc.reason}")
