"""runtime.lanes' growth of a `--ditar-guard` lane: rounds added at the plan's looks until
core.guard says the lane is settled, or its last look says it never was."""
import numpy as np
import pytest

from pytest_ditar.core import guard
from pytest_ditar.core.sequential import CONTINUE, plan
from pytest_ditar.runtime.lanes import LaneMeasurement, Sequential, _grow


def _scripted(ratio: float, spread: float, n: int, seed: int, start: int = 12) -> tuple[LaneMeasurement, object]:
    """A lane measured `start` rounds in, and the round-timer that adds the next of `n` scripted
    ones: the candidate `ratio` times as fast, each call's log time spread `spread`."""
    rng = np.random.default_rng(seed)
    champ = np.exp(np.log(0.05) + rng.normal(0.0, spread, n)).tolist()
    cand = np.exp(np.log(0.05 / ratio) + rng.normal(0.0, spread, n)).tolist()
    m = LaneMeasurement("latency_b1", samples=cand[:start], warmup_s=[], champion_samples=champ[:start])

    def one_round() -> None:
        n = len(m.samples)
        m.samples.append(cand[n])
        m.champion_samples.append(champ[n])

    return m, one_round


@pytest.mark.parametrize(("ratio", "decision"), [(1 / 1.3, guard.SLOWER), (1.0, guard.WITHIN)])
def test_a_guard_lane_grows_on_a_noisy_host_until_it_is_settled(ratio, decision):
    """The CI failure replayed: rounds 30% apart in spread, 12 of them settle nothing; the guard's
    growth (runtime.lanes) adds rounds at the plan's looks until the lane is settled, and the last
    look is what the lane's verdict will say."""
    m, one_round = _scripted(ratio, 0.3, 400, seed=7)

    sq = Sequential(plan(12, 384, 0.05), 0.01, budget_s=1e9, guard=0.15)
    _grow(m, sq, one_round, 0.0)
    looks = [guard.Look(**lk) for lk in m.looks]
    assert looks[0].rounds == 12 and looks[0].decision == CONTINUE, looks
    assert looks[-1].decision == decision and len(m.samples) == looks[-1].rounds > 12, looks
    assert m.undecided is None


def test_a_guard_lane_that_never_settles_stops_at_its_last_look_and_says_so():
    # rounds alternating 2x either way about 0.9x: the median sits inside the tolerance, and
    # its CI spans 0.85 however many rounds come
    m = LaneMeasurement("latency_b1", samples=[], warmup_s=[], champion_samples=[])

    def one_round() -> None:
        m.champion_samples.append(0.05)
        m.samples.append(0.05 / 0.9 * (2.0 if len(m.samples) % 2 else 0.5))

    for _ in range(12):
        one_round()
    _grow(m, Sequential(plan(12, 48, 0.05), 0.01, budget_s=1e9, guard=0.15), one_round, 0.0)
    assert [lk["rounds"] for lk in m.looks] == [12, 24, 48] and m.looks[-1]["decision"] == CONTINUE, m.looks
    assert m.undecided == "the plan's last look (48 rounds)"
