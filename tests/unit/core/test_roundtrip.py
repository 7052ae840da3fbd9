"""core.roundtrip: the speed-up net of the harness's empty call, stated beside the gross one."""
from dataclasses import replace

import pytest

from pytest_ditar.core.roundtrip import net_speedup


def test_the_round_trip_shrinks_a_short_calls_ratio_toward_one():
    """Issue 49: ~0.6 ms of round trip on a 2 ms call: a 12.6x kernel reads far less gross."""
    champion, candidate = [0.0252 + 0.0006] * 9, [0.002 + 0.0006] * 9
    net = net_speedup(champion, candidate, [0.0006] * 9, [0.0006] * 9)
    assert net is not None and round(net.net, 1) == 12.6 and net.gross < 10.0
    assert "net of the harness's round trip" in net.describe() and "the gross figure decides" in net.describe()


def test_no_empty_calls_or_a_call_no_longer_than_its_round_trip_gives_no_figure():
    assert net_speedup([0.01] * 5, [0.005] * 5, [], [0.001]) is None
    assert net_speedup([0.01] * 5, [0.001] * 5, [0.001], [0.002]) is None


def test_the_empty_call_is_pooled_over_both_sides():
    """One side's empty calls alone read 1 ms against 5 ms under a loaded host's bursts: the median of
    both sides' is taken off each (each side's own is kept for the record)."""
    net = net_speedup([0.020] * 9, [0.010] * 9, [0.005] * 9, [0.001] * 7 + [0.005] * 4)
    assert net.empty_s == 0.005 and net.candidate_empty_s == 0.001 and net.net == (0.020 - 0.005) / (0.010 - 0.005)


def test_a_trusted_sides_empty_calls_are_taken_off_and_the_others_cannot_move_it():
    # the anchor's (the baseline's code) round trip: a candidate slowing its own empty call to
    # inflate its net win moves nothing
    honest = net_speedup([0.020] * 9, [0.010] * 9, [0.001] * 9, [0.001] * 9, ("anchor", [0.001] * 9))
    slowed = net_speedup([0.020] * 9, [0.010] * 9, [0.009] * 9, [0.009] * 9, ("anchor", [0.001] * 9))
    assert honest == replace(slowed, champion_empty_s=0.001, candidate_empty_s=0.001)
    assert slowed.source == "anchor" and slowed.empty_s == 0.001 and slowed.net == pytest.approx(0.019 / 0.009)
    assert "anchor's" in slowed.describe()


def test_without_a_trusted_sides_calls_both_sides_are_pooled():
    net = net_speedup([0.020] * 9, [0.010] * 9, [0.002] * 9, [0.002] * 9, ("anchor", []))
    assert net.source == "pooled" and net.empty_s == 0.002
