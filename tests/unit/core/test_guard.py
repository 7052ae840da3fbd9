"""core.guard: when `--ditar-guard` fails a lane, when a lane is settled, and what its lines say."""
import numpy as np
import pytest

from pytest_ditar.core import guard
from pytest_ditar.core.decision import LaneOutcome
from pytest_ditar.core.sequential import plan


def rounds(ratio: float, spread: float, n: int, seed: int) -> tuple[list[float], list[float]]:
    """n interleaved rounds: the candidate `ratio` times as fast as the champion, each call's log
    time spread `spread` around its own centre."""
    rng = np.random.default_rng(seed)
    champ = np.exp(np.log(0.05) + rng.normal(0.0, spread, n))
    cand = np.exp(np.log(0.05 / ratio) + rng.normal(0.0, spread, n))
    return champ.tolist(), cand.tolist()


def _outcome(name: str, speedup: float, low: float, high: float) -> LaneOutcome:
    return LaneOutcome(name, False, "OK", speedup, low, high, "", None)


@pytest.mark.parametrize(("speedup", "low", "high", "fails", "settled"), [
    (0.77, 0.70, 0.84, True, True),     # slower beyond 15%, the whole CI below 1: shown
    (0.80, 0.60, 1.05, False, False),   # looks slower, but the CI reaches 1: noise could make it
    (0.938, 0.80, 1.08, False, False),  # the CI run that passed a planted 1.3x slowdown at 12 rounds
    (0.97, 0.90, 1.04, False, True),    # a slowdown beyond 15% ruled out
])
def test_a_lane_fails_only_on_a_shown_slowdown_and_is_settled_only_when_more_rounds_cannot_change_that(
        speedup, low, high, fails, settled):
    assert guard.regressed(speedup, high, 0.15) is fails
    assert guard.settled(speedup, low, high, 0.15) is settled
    said = guard.failures([], [_outcome("b1", speedup, low, high)], ["b1"], [], 0.15)
    assert bool(said) is fails


def test_a_pass_names_the_lanes_it_could_not_settle():
    lanes = [_outcome("b1", 0.97, 0.90, 1.04), _outcome("b8", 0.938, 0.80, 1.08)]
    assert guard.line([], lanes, 0.15) == "DITAR GUARD: PASS b1=0.970x b8=0.938x tolerance=15% unresolved=b8"
    assert "unresolved" not in guard.line([], lanes[:1], 0.15)
    assert guard.line(["lane b8: slower"], lanes, 0.15) == "DITAR GUARD: FAIL: lane b8: slower"


def test_the_median_ci_is_the_order_statistics_a_binomial_allows_and_holds_its_level_on_noise():
    logs = [float(x) for x in range(1, 13)]  # 12 rounds: [d_(2), d_(11)] at alpha 0.0083 (P(X >= 11) = 13/4096)
    centre, low, high = guard.median_ci(logs, 0.05 / 6)
    assert (low, high) == (pytest.approx(np.exp(2.0)), pytest.approx(np.exp(11.0)))
    assert centre == pytest.approx(np.exp(6.5))
    assert guard.median_ci(logs[:6], 0.05 / 6)[1:] == (0.0, float("inf"))  # 6 rounds allow no CI at this level
    # an unchanged tree on heavy, skewed noise: the CI misses 1 at most alpha of the time, every size
    rng = np.random.default_rng(0)
    for n in (6, 12, 24, 48):
        d = rng.gumbel(0.0, 0.5, (4000, n))
        d -= np.median(rng.gumbel(0.0, 0.5, 200_000))  # true median 0
        cis = [guard.median_ci(row, 0.05)[1:] for row in d]
        miss = np.mean([not (lo <= 1.0 <= hi) for lo, hi in cis])
        assert miss <= 0.05 + 0.01, (n, miss)


def test_a_look_settles_a_clear_slowdown_and_a_clear_pass_and_continues_between():
    champ, cand = rounds(1 / 1.3, 0.02, 12, seed=1)
    assert guard.look(champ, cand, 0.15, 0, 0.01).decision == guard.SLOWER
    champ, cand = rounds(1.0, 0.02, 12, seed=2)
    assert guard.look(champ, cand, 0.15, 0, 0.01).decision == guard.WITHIN
    champ, cand = rounds(1 / 1.3, 0.6, 12, seed=3)  # a loaded host: a 1.3x slowdown in 60% spread
    lk = guard.look(champ, cand, 0.15, 0, 0.01)
    assert lk.decision == guard.CONTINUE and lk.rounds == 12, lk


def test_an_unchanged_tree_on_a_loaded_host_is_rarely_failed_over_a_whole_plan_of_looks():
    """The false FAIL a percentile bootstrap made on a dozen noisy rounds (1 seed in 6 at 30% spread):
    over every look of a plan, the exact CI at each look's share keeps it under alpha / 2."""
    the_plan = plan(12, 384, 0.05)
    fails = 0
    for seed in range(300):
        champ, cand = rounds(1.0, 0.4, 384, seed)
        for k, n in enumerate(the_plan.looks):
            lk = guard.look(champ[:n], cand[:n], 0.15, k, the_plan.alphas[k])
            if lk.decision != guard.CONTINUE:
                fails += lk.decision == guard.SLOWER
                break
    assert fails / 300 <= 0.025 + 0.01, fails


def test_the_growth_note_says_where_a_lane_settled_or_why_it_did_not():
    settled = guard.Look(48, 2, 0.01, 0.77, 0.70, 0.83, guard.SLOWER)
    assert guard.growth_note([settled], None, 0.15) == "; slowdown shown at look 3, 48 rounds"
    open_ = guard.Look(96, 3, 0.01, 0.9, 0.8, 1.05, guard.CONTINUE)
    note = guard.growth_note([open_], "the lane's budget of 20s, reached at 96 rounds", 0.15)
    assert note.startswith("; unresolved after 96 rounds (the lane's budget of 20s") and "spans 0.85" in note, note
    assert guard.growth_note([], None, 0.15) == ""


def test_a_gated_runs_guard_lane_that_looks_slower_and_never_settled_counts_as_slower_and_a_guards_does_not():
    """The candidate's own jitter kept a 30% slowdown from being shown (tests/adversarial/test_noisy_guard.py)."""
    open_slow = guard.Look(48, 2, 0.01, 0.80, 0.55, 1.10, guard.CONTINUE)
    open_fine = guard.Look(48, 2, 0.01, 0.97, 0.80, 1.10, guard.CONTINUE)
    shown = guard.Look(12, 1, 0.01, 0.70, 0.60, 0.90, guard.SLOWER)
    assert guard.counts_as_slower(open_slow, 0.05, shown_only=False)
    assert not guard.counts_as_slower(open_slow, 0.05, shown_only=True)
    assert not guard.counts_as_slower(open_fine, 0.05, shown_only=False)
    assert guard.counts_as_slower(shown, 0.05, shown_only=True)
    assert guard.counts_as_slower(shown, 0.05, shown_only=False)


def test_a_lane_regressed_by_its_summed_time_fails_the_guard_with_its_reason():
    lane = LaneOutcome("b1", False, "REGRESSED", 1.9, 1.7, 2.0, "its mean call is slower: total time 0.57x", None)
    assert guard.failures([], [lane], ["b1"], [], 0.05) == ["lane b1: its mean call is slower: total time 0.57x"]
