"""The memory lane's judge (loop.perf.lanekinds): its candidate's peaks against the champion's, measured
beside each other; a regression must clear the tolerance, 16 MiB and every call of the champion's."""
from pytest_ditar.config.project import PerfConfig
from pytest_ditar.loop.perf import lanekinds
from pytest_ditar.runtime.lanes import LaneMeasurement


def _judged(candidate, champion=None, device=False):
    peaks = {"candidate": candidate, **({"champion": champion} if champion else {})}
    m = LaneMeasurement("peak_b3", [], [], peaks=peaks)
    if device:
        m.peak_reserved_gib = max(x for x in candidate if x is not None)
    return lanekinds.KINDS["memory"].judge(m, PerfConfig()).outcome


def test_a_heavier_candidate_regresses_and_a_like_one_is_ok():
    heavy = _judged([0.80, 0.81, 0.80], [0.60, 0.61, 0.60])
    assert heavy.verdict == "REGRESSED" and not heavy.objective and heavy.speedup is None
    assert heavy.reason.startswith("peak 0.800 GiB against the champion's 0.600 GiB (+33.3%, median of 3 calls)")
    assert heavy.figure == "0.800 GiB (+33.3%)" and heavy.cause is None
    assert _judged([0.60, 0.62, 0.61], [0.60, 0.61, 0.60]).verdict == "OK"  # +1.6%: within 5%


def test_noise_small_sizes_and_overlap_are_no_regression():
    assert _judged([0.70, 0.90, 0.70], [0.60, 0.75, 0.60]).verdict == "OK"  # one champion call above the candidate's
    assert _judged([0.011, 0.011, 0.011], [0.001, 0.001, 0.001]).verdict == "OK"  # 10 MiB: below 16 MiB


def test_unreadable_or_alone_is_missing_and_a_device_peak_is_the_lanes_vram():
    assert _judged([None, None, None], [0.6, 0.6, 0.6]).verdict == "MISSING"
    alone = _judged([0.6, 0.6, 0.6])
    assert alone.verdict == "MISSING" and "no champion measured beside it" in alone.reason
    assert _judged([2.0, 2.1, 2.0], [2.0, 2.0, 2.0], device=True).peak_vram_gib == 2.1  # core.decision's budget
    assert _judged([2.0, 2.1, 2.0], [2.0, 2.0, 2.0]).peak_vram_gib is None  # host memory is no VRAM
