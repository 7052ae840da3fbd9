"""PhaseClock: exclusive time per phase, so phases add up to no more than the wall time."""
import time

from pytest_ditar.timings import PhaseClock


def test_nested_spans_book_their_time_once():
    clock = PhaseClock()
    with clock.span("holdout"):
        time.sleep(0.03)
        with clock.span("semantic"):
            time.sleep(0.05)
        with clock.span("holdout"):  # a build booked to the phase that asked for it
            time.sleep(0.02)
    with clock.span("perf.lanes"):
        time.sleep(0.04)
    clock.timed_s = 0.035
    d = clock.as_dict()
    assert 0.05 <= d["semantic"] < 0.07 and 0.05 <= d["holdout"] < 0.08  # the child's time is not in the parent's
    assert d["group.firewall"] == round(d["holdout"] + d["semantic"], 4)
    assert sum(v for k, v in d.items() if k.startswith("group.")) <= d["wall"]
    assert d["perf.overhead"] > 1.0 and "perf overhead" in clock.line() and "firewall" in clock.line()
