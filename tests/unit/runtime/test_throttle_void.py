"""Issue 41: a round the GPU throttled in is void like one that started on a busy device: the
lane's sequential look counts neither side's call of it and times another round (runtime.lanes,
core.sequential). Hand-made measurements, no workers."""
from __future__ import annotations

from pytest_ditar.core.sequential import look, plan
from pytest_ditar.runtime.lanes import LaneMeasurement, _voiding


def _lane(states: list[dict]) -> LaneMeasurement:
    n = len(states)
    return LaneMeasurement("latency_b1", [0.10] * n, [], champion_samples=[0.11] * n, orders=["ch"] * n,
                           rounds_state=states)


def test_a_throttled_round_is_void_and_an_idle_reason_is_not():
    states = [{"load1": 0.5}] * 12
    states[3] = {"reasons": ["gpu_idle"], "sm_mhz": 1980.0}
    states[7] = {"reasons": ["sw_thermal_slowdown"], "slowed": ["sw_thermal_slowdown"], "sm_mhz": 1410.0}
    states[9] = {"reasons": ["sw_power_cap"], "sm_mhz": 1410.0}  # after the candidate's own call: not void
    m = _lane(states)
    assert _voiding(m) == [7]
    lk = look(m.sides(), 0.01, plan(12, 48, 0.05), 0, foreign=_voiding(m))
    assert lk.voided == 1 and lk.rounds == 12
    assert _voiding(_lane([{"load1": 0.5}] * 12)) == []  # a CPU host's state never voids a round


def test_the_lanes_verdict_names_the_throttled_rounds():
    from pytest_ditar.config.project import PerfConfig
    from pytest_ditar.loop.perf.lanes import judge

    states = [{"load1": 0.5}] * 12
    states[2] = {"reasons": ["hw_power_brake_slowdown"], "slowed": ["hw_power_brake_slowdown"]}
    m = _lane(states)
    res = judge(m, m.champion_samples, objective=False, source="interleaved", noise=None, perf_cfg=PerfConfig())
    assert "1 of 12 rounds throttled (hw_power_brake_slowdown): void" in res.outcome.reason, res.outcome
    quiet = judge(_lane([{"load1": 0.5}] * 12), [0.11] * 12, objective=False, source="interleaved", noise=None,
                  perf_cfg=PerfConfig())
    assert "throttled" not in quiet.outcome.reason
