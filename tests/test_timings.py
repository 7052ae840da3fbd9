"""PhaseClock: exclusive time per phase, so phases add up to no more than the wall time."""
import pytest

from pytest_ditar import timings


class FakeTime:
    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def test_nested_spans_book_their_time_once(monkeypatch):
    t = FakeTime()
    monkeypatch.setattr(timings, "time", t)
    clock = timings.PhaseClock()
    with clock.span("holdout"):
        t.now += 3
        with clock.span("semantic"):
            t.now += 5
        with clock.span("holdout"):  # a build booked to the phase that asked for it
            t.now += 2
    with clock.span("perf.lanes"):
        t.now += 4
    clock.timed_s = 3.5
    t.now += 1  # time in no phase
    d = clock.as_dict()
    assert d["semantic"] == 5 and d["holdout"] == 5  # the child's time is not in the parent's
    assert d["group.firewall"] == 10 and d["group.perf"] == 4 and d["wall"] == 15
    assert d["perf.overhead"] == pytest.approx(4 / 3.5, abs=1e-4) and d["firewall.fraction"] == pytest.approx(10 / 15, abs=1e-4)
    line = clock.line()
    assert "firewall 10.0s" in line and "perf overhead 1.143x of 3.5s timed" in line and "wall 15.0s" in line
