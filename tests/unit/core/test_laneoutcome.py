"""core.laneoutcome.compose: a lane's outcome from its evidence, one rule at a time. Every case
reads the outcome's fields (verdict, cause, drift, threshold, figure), never its reason's words."""
from __future__ import annotations

from dataclasses import replace

import pytest

from pytest_ditar.core import interference
from pytest_ditar.core.anchor import AnchorDrift
from pytest_ditar.core.laneoutcome import (
    FEW_CALLS,
    ONE_ROUND,
    TAIL_SHOWN,
    TAIL_UNPROVEN,
    TOTAL_SLOWER,
    TOTAL_UNPROVEN,
    LaneEvidence,
    MemoryPeaks,
    Statistic,
    TailCheck,
    TotalCheck,
    compose,
    memory_peaks,
    voided,
)
from pytest_ditar.core.roundtrip import Net
from pytest_ditar.core.vocabulary import DRIFT, INTERFERENCE, SHARED_DEVICE

WIN = Statistic("FASTER", 1.30, 1.20, 1.40, "faster")


def _lane(stat: Statistic = WIN, objective: bool = True, **kw: object) -> LaneEvidence:
    return LaneEvidence("latency_b1", objective, 2.5, champion_rounds=30, candidate_rounds=30, statistic=stat,
                        threshold=0.01, **kw)  # type: ignore[arg-type]


def _drift(high: float, *, shown: bool) -> AnchorDrift:
    return AnchorDrift(kept=0.5, now=0.5 * high, high=high, p=0.001 if shown else 0.2, rounds=32, minimum=0.05,
                       shown=shown)


@pytest.mark.parametrize("verdict", ["FASTER", "NOT_FASTER", "SLOWER", "UNSTABLE", "OK", "REGRESSED"])
def test_the_statistics_verdict_stands_where_no_check_objects(verdict):
    out = compose(_lane(replace(WIN, verdict=verdict)))
    assert (out.verdict, out.cause, out.speedup, out.ci_low, out.ci_high) == (verdict, None, 1.30, 1.20, 1.40)
    assert out.threshold == 0.01 and out.peak_vram_gib == 2.5 and out.objective and out.drift is None


def test_a_failed_audit_or_caching_voids_the_timing_before_anything_else():
    for ev in (_lane(audit_failure="round 3: constant image"), _lane(caching="repeats 40% faster")):
        out = compose(replace(ev, champion_rounds=0))  # before MISSING too
        assert out.verdict == "REJECTED" and out.cause is None and out.speedup is None and out.threshold is None
        assert voided(ev) == "REJECTED"


def test_too_few_rounds_is_missing():
    for rounds in ((2, 30), (30, 2)):
        ev = replace(_lane(), champion_rounds=rounds[0], candidate_rounds=rounds[1])
        assert compose(ev).verdict == "MISSING" and voided(ev) == "MISSING"
    assert voided(_lane()) is None


def test_foreign_work_in_repeated_rounds_is_unstable_cause_interference():
    busy = tuple(interference.Foreign(r, "champion", "candidate", 0.004) for r in range(interference.REPEATED))
    out = compose(_lane(foreign=busy, pids={"candidate": 11}))
    assert (out.verdict, out.cause, out.speedup) == ("UNSTABLE", INTERFERENCE, None)
    assert compose(_lane(foreign=busy[:1])).verdict == "FASTER"  # once: re-timed, not void


def test_a_shown_drift_the_win_cannot_clear_is_unstable_cause_drift():
    out = compose(_lane(drift=_drift(1.2, shown=True)))  # 1.20 / 1.2 = 1.0: under the bar 1.01
    assert (out.verdict, out.cause, out.drift) == ("UNSTABLE", DRIFT, 1.2)


def test_a_drift_only_read_worse_voids_a_win_as_the_hosts_noise():
    out = compose(_lane(drift=_drift(1.2, shown=False)))
    assert (out.verdict, out.cause, out.drift) == ("UNSTABLE", None, 1.2)  # no cause: the host's, run again


def test_a_win_that_clears_the_drift_stands_and_a_loss_keeps_its_verdict():
    big = compose(_lane(replace(WIN, ci_low=2.0), drift=_drift(1.2, shown=True)))
    assert (big.verdict, big.cause, big.drift) == ("FASTER", None, 1.2)
    loss = compose(_lane(replace(WIN, verdict="NOT_FASTER"), drift=_drift(1.2, shown=True)))
    assert (loss.verdict, loss.cause, loss.drift) == ("NOT_FASTER", None, 1.2)
    unseen = compose(_lane(replace(WIN, verdict="NOT_FASTER"), drift=_drift(1.2, shown=False)))
    assert unseen.drift is None  # a drift not shown is charged to a win only


def test_a_champion_twice_as_slow_as_kept_voids_any_win():
    out = compose(_lane(replace(WIN, ci_low=10.0), drift=_drift(2.0, shown=True)))
    assert (out.verdict, out.cause) == ("UNSTABLE", DRIFT)


def test_the_tail_rule():
    few = compose(_lane(tail=TailCheck(FEW_CALLS, 90, 60, 30)))
    assert (few.verdict, few.cause) == ("UNSTABLE", None)
    unproven = compose(_lane(tail=TailCheck(TAIL_UNPROVEN, 90, 90, 61, "a 3.9x tail")))
    assert (unproven.verdict, unproven.cause) == ("UNSTABLE", None)
    assert compose(_lane(tail=TailCheck(TAIL_SHOWN, 90, 90, 61))).verdict == "FASTER"
    assert compose(_lane(tail=TailCheck(None, 90, 90, 0))).verdict == "FASTER"
    # only a win of the objective lane waits for its calls
    assert compose(_lane(replace(WIN, verdict="NOT_FASTER"), tail=TailCheck(FEW_CALLS, 90, 60, 30))).verdict \
        == "NOT_FASTER"
    assert compose(_lane(objective=False, tail=TailCheck(FEW_CALLS, 90, 60, 30))).verdict == "FASTER"


def test_the_total_time_a_median_hides():
    slower = TotalCheck(TOTAL_SLOWER, "its mean call is slower")
    assert compose(_lane(total=slower)).verdict == "NOT_FASTER"
    assert compose(_lane(replace(WIN, verdict="UNSTABLE"), total=slower)).verdict == "NOT_FASTER"
    assert compose(_lane(replace(WIN, verdict="OK"), objective=False, total=slower)).verdict == "REGRESSED"
    assert compose(_lane(replace(WIN, verdict="SLOWER"), total=slower)).verdict == "SLOWER"
    unproven = TotalCheck(TOTAL_UNPROVEN, "not shown within 5%")
    assert compose(_lane(total=unproven)).verdict == "NOT_FASTER"
    assert compose(_lane(total=replace(unproven, cause=ONE_ROUND))).verdict == "UNSTABLE"  # a stall: run again
    assert compose(_lane(replace(WIN, verdict="UNSTABLE"), total=unproven)).verdict == "UNSTABLE"


def test_a_guard_lane_whose_total_is_not_shown():
    ok_win = replace(WIN, verdict="OK")  # shown faster by its median (ci_low > 1)
    one = TotalCheck(ONE_ROUND, "not shown within 5%")
    assert compose(_lane(ok_win, objective=False, total=one)).verdict == "OK"  # one round: a gated run lets it be
    assert compose(_lane(ok_win, objective=False, total=one, strict=True)).verdict == "REGRESSED"  # --ditar-guard
    assert compose(_lane(ok_win, objective=False, total=replace(one, cause=TOTAL_UNPROVEN))).verdict == "REGRESSED"
    level = replace(ok_win, ci_low=0.97)  # within tolerance, not a win by its median: nothing to show
    assert compose(_lane(level, objective=False, total=replace(one, cause=TOTAL_UNPROVEN))).verdict == "OK"


def test_a_slowed_reference_voids_a_win_it_could_explain_and_not_one_it_cannot():
    slowed = interference.AfterCandidate("champion", 0.25, 1e-6, 30, 30, high=0.3)
    out = compose(_lane(slowed=slowed))
    assert (out.verdict, out.cause) == ("UNSTABLE", INTERFERENCE)
    big = compose(_lane(replace(WIN, ci_low=3.0), slowed=slowed))
    assert (big.verdict, big.cause) == ("FASTER", None)
    loss = compose(_lane(replace(WIN, verdict="NOT_FASTER"), slowed=slowed))
    assert (loss.verdict, loss.cause) == ("NOT_FASTER", None)
    guard = compose(_lane(replace(WIN, verdict="OK", ci_low=0.9), objective=False, slowed=slowed, tolerance=0.05))
    assert (guard.verdict, guard.cause) == ("UNSTABLE", INTERFERENCE)


def test_a_shared_gpu_makes_any_verdict_unstable_and_keeps_what_was_measured():
    for ev in (_lane(), _lane(audit_failure="constant image"), _lane(drift=_drift(1.2, shown=True))):
        out = compose(replace(ev, shared_device="GPU 0 used by pid 99"))
        assert (out.verdict, out.cause) == ("UNSTABLE", SHARED_DEVICE)
    kept = compose(_lane(shared_device="GPU 0 used by pid 99"))
    assert (kept.speedup, kept.ci_low, kept.threshold) == (1.30, 1.20, 0.01)


def test_notes_never_change_a_verdict():
    net = Net(gross=1.3, net=1.35, empty_s=1e-4, champion_empty_s=1e-4, candidate_empty_s=1e-4)
    out = compose(_lane(net=net, throttled="2 of 30 rounds throttled"))
    assert (out.verdict, out.cause, out.speedup) == ("FASTER", None, 1.30)
    # the net figure rides beside the decided one, scaled by what the round trip did to the medians
    assert out.net == pytest.approx(1.30 * 1.35 / 1.3) and compose(_lane()).net is None


def test_a_timing_that_stands_needs_its_statistic():
    with pytest.raises(ValueError):
        compose(replace(_lane(), statistic=None))


def test_memory_lanes_through_the_same_seam():
    def judged(cand, champ):
        return compose(LaneEvidence("peak_b3", False, None, memory=memory_peaks(
            {"candidate": cand, **({"champion": champ} if champ else {})}, 0.05)))

    heavy = judged([0.80, 0.81, 0.80], [0.60, 0.61, 0.60])
    assert (heavy.verdict, heavy.objective, heavy.speedup, heavy.cause, heavy.threshold) == \
        ("REGRESSED", False, None, None, None)
    assert heavy.figure is not None
    assert judged([0.60, 0.62, 0.61], [0.60, 0.61, 0.60]).verdict == "OK"  # +1.6%: within 5%
    assert judged([0.70, 0.90, 0.70], [0.60, 0.75, 0.60]).verdict == "OK"  # overlapping calls
    assert judged([0.011, 0.011, 0.011], [0.001, 0.001, 0.001]).verdict == "OK"  # under 16 MiB
    assert judged([None, None], [0.6, 0.6]).verdict == "MISSING"
    alone = judged([0.6, 0.6, 0.6], None)
    assert alone.verdict == "MISSING" and alone.figure is not None
    shared = compose(LaneEvidence("peak_b3", False, 2.1, memory=MemoryPeaks((0.6,), (0.6,), 0.05),
                                  shared_device="GPU 0 used by pid 99"))
    assert (shared.verdict, shared.cause, shared.peak_vram_gib) == ("UNSTABLE", SHARED_DEVICE, 2.1)
