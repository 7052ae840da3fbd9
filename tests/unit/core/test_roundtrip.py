"""core.roundtrip: the speed-up net of the harness's empty call, stated beside the gross one."""
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
