"""The roofline of a lane of N ranks: N devices' worth of FLOP/s (loop.run.champion.with_flops).

A split that divides one pipeline's work (the baseline's count) over two ranks legitimately runs
faster than one device could compute it; only beyond both devices is the timer not measuring the
work, a CRASH."""
from types import SimpleNamespace

from pytest_ditar.loop.run.champion import with_flops
from pytest_ditar.loop.run.results import RunResults
from pytest_ditar.runtime.lanes import LaneMeasurement, LaneResult

HOST = 1e10  # the host's measured FLOP/s (one worker's thread), stored at the baseline


def _run(gpus: int, seconds: float) -> list:
    lanes = {"split_b1": {"flops": 1e9, "host_flops": HOST}}
    sess = SimpleNamespace(baseline=lambda: SimpleNamespace(read_json=lambda name: lanes),
                           resolved_device=lambda: "cpu")
    results = RunResults()
    res = LaneResult(LaneMeasurement("split_b1", [seconds] * 5, []), None, "none", 0.0)
    out = with_flops(sess, results, SimpleNamespace(name="split_b1", gpus=gpus), res)  # type: ignore[arg-type]
    assert out.flops == 1e9 and res.flops is None  # a new result; the one given is left as it was
    return list(results.errors)


def test_two_ranks_may_beat_one_device_but_not_two():
    one_device = 1e9 / HOST  # the time one device needs for the baseline's work at its measured rate
    fast = one_device / 2  # twice one device: beyond one (x1.25 margin), within two
    assert _run(1, fast) and "implies" in str(_run(1, fast)[0])  # one rank cannot do that: a CRASH
    assert _run(2, fast) == []  # two ranks can
    assert _run(2, one_device / 10)  # ten times one device: beyond two as well
