"""Pure parts of the timing defences: the secret-keyed request stream, the audit of timed
outputs, the caching probe's rule, champion drift, and how REJECTED reaches the decision. The
fresh requests of a real gated run: tests/integration/loop/test_timed_requests.py."""
import re

import numpy as np
import pytest

from pytest_ditar.core import probes
from pytest_ditar.core.audit import audit_batch
from pytest_ditar.core.decision import LaneOutcome, QualityOutcome, decide
from pytest_ditar.core.requests import NUM_LABELS, RequestStream
from pytest_ditar.core.thresholds import Thresholds

SECRET = bytes(range(32))


def test_stream_is_keyed_by_its_secret_and_never_repeats_a_seed():
    a, b = RequestStream(SECRET, avoid_seeds=[7]), RequestStream(SECRET, avoid_seeds=[7])
    draws = [a.draw(f"lane/round/{r}", 4, bytes([r])) for r in range(50)]
    assert draws == [b.draw(f"lane/round/{r}", 4, bytes([r])) for r in range(50)]  # reproducible from the record
    # the round's nonce (fresh entropy at send time) changes the draw: nothing is known ahead of it
    assert RequestStream(SECRET).draw("lane/round/0", 4, b"\x01") \
        != RequestStream(SECRET).draw("lane/round/0", 4, b"\x02")
    seeds = [s for d in draws for s in d[0]]
    assert len(set(seeds)) == len(seeds) == 200 and 7 not in seeds
    assert all(0 <= lab < NUM_LABELS for d in draws for lab in d[1])
    other = RequestStream(bytes(reversed(range(32)))).draw("lane/round/0", 4)
    assert other != draws[0]  # another run's secret: other requests
    # asking for the same key again gives new seeds, never a seed handed out before
    again = a.draw("lane/round/0", 4)
    assert not set(again[0]) & set(seeds)


def test_stream_refuses_a_short_secret():
    with pytest.raises(ValueError, match="16 bytes"):
        RequestStream(b"short")


def _outputs(seed: int, n: int = 2):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 4, 8, 8)).astype(np.float32), rng.integers(0, 256, (n, 16, 16, 3), dtype=np.uint8)


EXACT = Thresholds(latent_rel_l2_max=1e-5, psnr_min=60.0)


def test_audit_passes_identical_outputs_and_names_the_first_bad_image():
    lat, img = _outputs(1)
    assert audit_batch("exact", EXACT, lat, img, lat.copy(), img.copy()) is None
    bad = lat.copy()
    bad[1] *= 1.5
    idx, why = audit_batch("exact", EXACT, bad, img, lat, img)
    assert idx == 1 and "labelled 'exact'" in why and "latent_rel_l2" in why


def test_audit_self_checks_hold_without_a_reference_and_for_loose_classes():
    lat, img = _outputs(2)
    const = img.copy()
    const[0] = 17
    assert audit_batch("approximate", EXACT, lat, const, None, None) == (0, "constant image")
    nan = lat.copy()
    nan[1, 0, 0, 0] = np.nan
    assert audit_batch("exact", EXACT, nan, img, None, None) == (1, "non-finite latents")
    other, _ = _outputs(3)
    assert audit_batch("approximate", EXACT, other, img, lat, img) is None  # judged on corpus and holdout
    assert "latent |max|" in audit_batch("approximate", EXACT, lat * 10, img, lat, img)[1]


def test_caching_rule_needs_a_clean_and_large_gap():
    unique = [0.100, 0.104, 0.098, 0.101, 0.099, 0.102]
    assert "caching" in probes.caching([0.041, 0.040, 0.042, 0.040, 0.043, 0.041], unique, min_effect=0.05)
    assert probes.caching([0.097, 0.103, 0.099, 0.100, 0.101, 0.098], unique, min_effect=0.05) is None  # noise
    assert probes.caching([0.070, 0.071, 0.105, 0.103, 0.104, 0.070], unique, min_effect=0.05) is None  # mixed
    assert probes.caching([0.085] * 6, unique, min_effect=0.30) is None  # inside a wide noise floor
    assert probes.caching_suspected([0.041, 0.040], [0.100, 0.104], 0.05)
    assert not probes.caching_suspected([0.041, 0.120], [0.100, 0.104], 0.05)


def test_caching_probe_rarely_accuses_an_honest_noisy_pipeline():
    """The CI box once rejected an honest A/A at 1.25x on two calls a side: screen, then confirm on
    fresh calls, over heavy-tailed, bursty noise, accuses well under 1% of honest lanes."""
    rng = np.random.default_rng(7)
    accused = screened = 0
    trials = 4000
    for _ in range(trials):
        def calls(n):
            base = 0.04 * rng.lognormal(0.0, 0.25, n)
            burst = rng.random(n) < 0.15
            return list(base * np.where(burst, rng.uniform(1.5, 3.0, n), 1.0))
        rep, uniq = calls(2), calls(2)
        if probes.caching_suspected(rep, uniq, 0.05):
            screened += 1
            accused += probes.caching(calls(6), calls(6), 0.05) is not None
    assert screened > 0.02 * trials  # the screen alone would have been a real false-DISCARD rate
    assert accused <= 0.002 * trials, (accused, screened)
    memo = [0.004] * 6  # a real cache answers a seen request in a fraction of the time
    assert "caching" in probes.caching(memo, [0.04 * x for x in rng.lognormal(0.0, 0.25, 6)], 0.05)


def test_champion_drift_flags_a_slowed_champion_but_not_noise():
    rng = np.random.default_rng(0)
    stored = list(0.1 * (1 + 0.02 * rng.standard_normal(20)))
    same = list(0.1 * (1 + 0.02 * rng.standard_normal(20)))
    assert probes.champion_drift(same, stored, tolerance=0.05) is None
    slowed = [x * 1.8 for x in same]
    found = probes.champion_drift(slowed, stored, tolerance=0.05)
    assert found is not None and 1.7 < found.ratio < 1.9 and found.p < 0.05
    why = found.reason()
    # the wording names only what was measured: a quiet probe is not a measured build difference
    assert why.startswith("champion drift: ") and "kept, " in why and "the judge's host probe as fast as then" in why
    assert "champion build differs" not in why and "or a build other than the one kept" in why
    assert "the host itself 1.30x as slow as then: the host slower" in found.reason(host=1.3)
    # the baseline's code timed in the same rounds tells the host from the build
    assert "the host slower (the baseline's code in the same rounds 1.80x" in found.reason(anchor=1.8)
    assert "a build other than the one kept (the baseline's code in the same rounds 1.00x" in found.reason(anchor=1.0)
    assert probes.champion_drift([x / 1.5 for x in same], stored, tolerance=0.05) is None  # can only hide a win
    assert probes.champion_drift(slowed, stored, tolerance=1.0) is None
    # what a win has taken off is the ratio's upper bound: never below the point estimate, and
    # wider where the rounds scatter (a dozen noisy rounds undershoot a sandbag as often as not)
    assert found.ratio <= found.taken_off < 1.9
    scattered = [x * 1.8 * (1 + 0.3 * abs(r)) for x, r in zip(same, rng.standard_normal(20))]
    wide = probes.champion_drift(scattered, stored, tolerance=0.05)
    assert wide is not None and wide.taken_off - wide.ratio > found.taken_off - found.ratio


def test_rejected_objective_lane_is_a_discard_naming_the_audit():
    lane = LaneOutcome("latency_b1", True, "REJECTED", None, None, None, "audit: timed round 3, seed 9: constant image")
    d = decide(guards=[], quality=QualityOutcome(6, 6), lanes=[lane], errors=[], vram_budget_gib=None, expected_items=6)
    assert d.status == "DISCARD" \
        and d.reason == "lane latency_b1 rejected: audit: timed round 3, seed 9: constant image"
    fast = LaneOutcome("latency_b1", True, "FASTER", 2.0, 1.8, 2.2)
    guard = LaneOutcome("throughput_b8", False, "REJECTED", None, None, None, "caching: ...")
    d = decide(guards=[], quality=QualityOutcome(6, 6), lanes=[fast, guard], errors=[], vram_budget_gib=None,
               expected_items=6)
    assert d.status == "DISCARD" and "guard lane throughput_b8 rejected" in d.reason


def test_champion_drift_on_a_cpu_lane_allows_the_hosts_own_swings():
    """A CPU host's speed moves 10-20% between runs: on a CPU lane the drift check only counts a
    slowdown beyond CPU_DRIFT_FLOOR; on a GPU lane the configured 5% stands."""
    from pytest_ditar.config.project import PerfConfig
    from pytest_ditar.loop.lanes import judge as judge_lane
    from pytest_ditar.runtime.lanes import LaneMeasurement

    rng = np.random.default_rng(5)
    stored = list(0.050 * (1 + 0.01 * rng.standard_normal(20)))
    champ = list(0.060 * (1 + 0.01 * rng.standard_normal(20)))  # 1.2x slower than it was stored
    cand = list(0.060 * (1 + 0.01 * rng.standard_normal(20)))

    def verdict(cpu):
        m = LaneMeasurement("latency_b1", cand, [], champion_samples=champ)
        return judge_lane(m, champ, objective=True, source="interleaved", noise=None, perf_cfg=PerfConfig(),
                          stored_samples=stored, cpu=cpu).outcome

    # no win here to explain: the verdict stands, the drift named and carried (core.decision reads it)
    gpu = verdict(cpu=False)
    assert gpu.verdict != "FASTER" and gpu.drift is not None and "champion drift" in gpu.reason
    assert "champion drift" not in verdict(cpu=True).reason and verdict(cpu=True).drift is None
    sandbagged = [x * 1.5 for x in champ]  # beyond the floor: still caught on a CPU, and it explains the "win"
    m = LaneMeasurement("latency_b1", cand, [], champion_samples=sandbagged)
    out = judge_lane(m, sandbagged, objective=True, source="interleaved", noise=None, perf_cfg=PerfConfig(),
                     stored_samples=stored, cpu=True).outcome
    assert out.verdict == "UNSTABLE" and out.cause == "drift" and "champion drift" in out.reason


def test_a_drifted_champion_keeps_only_a_win_that_clears_the_bar_with_the_drift_taken_off():
    """A busy host slows every side: a 2x win with the champion 1.4x slower than its stored
    samples still clears 1% once 1.4x is taken off its lower bound. A champion that sandbags in
    its role (its twin too) hands the candidate exactly its own slowdown: that is UNSTABLE."""
    from pytest_ditar.config.project import PerfConfig
    from pytest_ditar.core import sequential as seq
    from pytest_ditar.loop.lanes import judge, plan_for
    from pytest_ditar.runtime.lanes import LaneMeasurement

    rng = np.random.default_rng(8)
    noise = lambda: 1 + 0.01 * rng.standard_normal(40)  # noqa: E731
    stored = list(0.050 * noise())
    perf = PerfConfig()
    sq = plan_for(type("L", (), {"repeats": 20})(), perf)

    def judged(champ_s, cand_s):
        champ, twin, cand = list(champ_s * noise()), list(champ_s * noise()), list(cand_s * noise())
        m = LaneMeasurement("latency_b1", cand, [], champion_samples=champ, twin_samples=twin)
        m.orders = ["cht"] * 40
        m.looks = [vars(seq.look(m.sides(), sq.threshold, sq.plan, 1))]
        return judge(m, champ, objective=True, source="interleaved", noise=None, perf_cfg=perf,
                     stored_samples=stored, sequential=sq).outcome

    busy = judged(0.070, 0.035)  # everything 1.4x slower; the candidate 2x faster than the champion
    assert busy.verdict == "FASTER" and re.search(r"champion drift up to 1\.4[0-9]x taken off", busy.reason)
    sandbag = judged(0.075, 0.050)  # the champion (and its twin) 1.5x slower; the candidate at the old speed
    assert sandbag.verdict == "UNSTABLE" and "champion drift" in sandbag.reason


def test_champion_drift_is_judged_against_the_hosts_own_speed():
    """The judge times a fixed workload after every round (all workers paused): on a guard lane, a
    champion 1.5x slower than its stored samples on a host that is itself 1.5x slower has not
    drifted; the same champion on a host as fast as then has (and its drift then comes off the
    objective lane's win, core.decision.drift_voids_win). The objective lane's own drift is never
    excused by the host (battery 22): it is named, the host's speed beside it."""
    from pytest_ditar.config.project import PerfConfig
    from pytest_ditar.loop.lanes import judge
    from pytest_ditar.runtime.lanes import LaneMeasurement

    rng = np.random.default_rng(9)
    noise = lambda n: 1 + 0.01 * rng.standard_normal(n)  # noqa: E731
    stored, stored_host = list(0.050 * noise(20)), list(0.002 * noise(20))
    champ, cand = list(0.075 * noise(20)), list(0.075 * noise(20))

    def verdict(host_now, objective=False):
        m = LaneMeasurement("latency_b1", cand, [], champion_samples=champ, host_s=list(host_now * noise(20)))
        return judge(m, champ, objective=objective, source="interleaved", noise=None, perf_cfg=PerfConfig(),
                     stored_samples=stored, stored_host_s=stored_host).outcome

    assert "champion drift" not in verdict(0.003).reason and verdict(0.003).drift is None  # the host is 1.5x slower
    out = verdict(0.002)
    assert out.drift is not None and 1.4 < out.drift < 1.6 and "the judge's host probe as fast as then" in out.reason
    named = verdict(0.003, objective=True)
    assert named.drift is not None and "the host itself 1.5" in named.reason


def test_the_hosts_speed_excuses_a_slower_champion_and_never_accuses_one():
    """Under a bursty hog the judge's short probe lands in a burst or in a gap: its median flips
    between the two, and a host that looked faster than at the baseline made an honest champion
    look sandbagged (a 2x win UNSTABLE on a noisy CPU host). The host's speed is the probes'
    trimmed mean, and it can only take drift off, never add it."""
    from pytest_ditar.loop.lanes import host_ratio

    quiet = [0.002] * 20
    bursty = [0.002] * 11 + [0.004] * 9  # 45% of the probes in a burst: the median says "quiet"
    assert 1.35 < host_ratio(bursty, quiet) < 1.5  # the mean sees the bursts' share
    assert host_ratio(quiet, bursty) == 1.0  # faster now than at the baseline: no accusation
    assert host_ratio([0.002] * 19 + [0.5], quiet) < 1.05  # one stray probe does not excuse a sandbagger
    assert host_ratio(quiet * 10, [0.002] * 2) == 1.0  # too few stored probes: no correction


def test_a_champion_that_sandbags_in_its_role_is_not_excused_by_a_loaded_hosts_probes():
    """Battery 22 on a loaded CI box: the champion (and its twin) run 4x slower than their stored
    samples in their role, the unchanged candidate runs at the stored speed, and the judge's probe
    reads the host as 2x slower than then. The host may explain a slower champion, never a win:
    the whole drift comes off the candidate's lower bound, so this is not a KEEP."""
    from dataclasses import asdict

    from pytest_ditar.config.project import PerfConfig
    from pytest_ditar.core import sequential as seq
    from pytest_ditar.loop.lanes import judge
    from pytest_ditar.runtime.lanes import LaneMeasurement, Sequential

    rng = np.random.default_rng(3)
    noise = lambda n: 1 + 0.01 * rng.standard_normal(n)  # noqa: E731
    n = 24
    stored, stored_host = list(0.050 * noise(20)), list(0.002 * noise(20))
    cand, champ, twin = list(0.050 * noise(n)), list(0.200 * noise(n)), list(0.200 * noise(n))
    plan = seq.plan(12, 48, 0.05)
    look = seq.look({seq.CANDIDATE: cand, seq.CHAMPION: champ, seq.TWIN: twin}, 0.01, plan, 1)
    assert look.decision == seq.FASTER  # in the rounds themselves: a 4x "win"
    cfg = PerfConfig(drift_tolerance=1.5)  # the battery's loose tolerance: 2.5x

    def outcome(host_now):
        m = LaneMeasurement("latency_b1", cand, [], champion_samples=champ, twin_samples=twin,
                            host_s=list(host_now * noise(20)), looks=[asdict(look)])
        return judge(m, champ, objective=True, source="interleaved", noise=None, perf_cfg=cfg,
                     stored_samples=stored, stored_host_s=stored_host, sequential=Sequential(plan, 0.01, 60.0)).outcome

    for host_now in (0.002, 0.004):  # a quiet host, and one the probes read as 2x slower
        out = outcome(host_now)
        assert out.verdict == "UNSTABLE" and "champion drift" in out.reason, (host_now, out.reason)


def test_a_lane_not_faster_by_its_median_names_its_total_time():
    """The adversarial tail (a fifth of calls at 10x): the median undecided at the plan's last look,
    the run DISCARDED without a word of the candidate's total time, 1.4x the champion's. A total
    shown slower, or not shown within tolerance, is named; the verdict stays NOT_FASTER."""
    from pytest_ditar.config.project import PerfConfig
    from pytest_ditar.loop.lanes import _mean_checked

    rng = np.random.default_rng(3)
    champ = list(0.050 * (1 + 0.05 * rng.standard_normal(60)))
    undecided = LaneOutcome("latency_b1", True, "NOT_FASTER", 1.86, 1.74, 1.88, "not faster beyond 1+1.0%")

    def tail(share: int, times: float) -> list[float]:
        return [0.025 * (times if i % share == 0 else 1) * (1 + 0.05 * r)
                for i, r in enumerate(rng.standard_normal(60))]

    shown = _mean_checked(undecided, champ, tail(2, 10), PerfConfig())  # half the calls at 10x: shown slower
    assert shown.verdict == "NOT_FASTER" and shown.reason.startswith(
        "not faster by its median call, but its mean call is slower: total time"), shown.reason
    unproven = _mean_checked(undecided, champ, tail(5, 10), PerfConfig())  # a fifth: not shown within 5%
    assert unproven.verdict == "NOT_FASTER" and unproven.reason.startswith(
        "not faster by its median call, and its total time is not shown within 5.0%: total time"), unproven.reason
    honest = [0.025 * (1 + 0.05 * r) for r in rng.standard_normal(60)]
    assert _mean_checked(undecided, champ, honest, PerfConfig()) == undecided  # nothing to name
    same = LaneOutcome("latency_b1", True, "NOT_FASTER", 1.0, 0.98, 1.06, "not faster beyond 1+1.0%")
    noisy = [0.050 * (1 + 0.2 * r) for r in rng.standard_normal(60)]  # an A/A's spread: unproven, not slower
    assert _mean_checked(same, champ, noisy, PerfConfig()) == same


def test_a_guard_lanes_champion_far_slower_than_kept_is_named_not_the_kept_build():
    """At half its kept speed (a third on a CPU lane, whose host swings more) a guard lane's champion
    is not the champion that was kept: the lane carries the cause core.decision reads. A designed
    1.5x drift read 2.2x beside a CPU hog: on a CPU lane that is a drift, not another build."""
    from pytest_ditar.config.project import PerfConfig
    from pytest_ditar.loop.lanes import judge
    from pytest_ditar.runtime.lanes import LaneMeasurement

    rng = np.random.default_rng(11)
    noise = lambda: 1 + 0.01 * rng.standard_normal(20)  # noqa: E731
    stored = list(0.050 * noise())

    def guard(slowed: float, cpu: bool):
        champ, cand = list(0.050 * slowed * noise()), list(0.050 * noise())
        m = LaneMeasurement("throughput_b8", cand, [], champion_samples=champ)
        return judge(m, champ, objective=False, source="interleaved", noise=None, perf_cfg=PerfConfig(),
                     stored_samples=stored, cpu=cpu).outcome

    assert guard(2.3, cpu=False).cause == "not_kept_build"
    assert guard(2.3, cpu=True).cause is None and guard(2.3, cpu=True).drift > 2.0
    assert guard(3.5, cpu=True).cause == "not_kept_build"
