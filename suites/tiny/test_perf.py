"""Performance lanes: candidate vs the champion, device-synchronized, noise-aware."""
import pytest

from pytest_ditar.plugin.fixtures import check_lane


@pytest.mark.perf
def test_lane(ditar_lane, ditar_perf, benchmark):
    check_lane(ditar_perf.run(ditar_lane, benchmark))
