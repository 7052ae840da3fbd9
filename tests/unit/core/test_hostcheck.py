"""core.hostcheck: doctor's answer from the figures measured (no timing here: the figures are given)."""
from pytest_ditar.core.hostcheck import BUSY, CHAMPION, NOISY, NOISY_BASELINE, SLOW_HOST, HostNow


def host(**kw) -> HostNow:
    base = dict(cores=2, load1=0.5, load_then=0.4, reach_now=0.04, reach_then=0.05, anchor_ratio=1.0)
    return HostNow(**{**base, **kw})


def test_a_quiet_host_says_so():
    h = host()
    assert h.causes == () and h.modest_judgeable
    assert h.verdict() == ("quiet: a 1.10x win can be judged now (smallest resolvable win now about 1+4.0%, "
                           "at baseline time 1+5.0%)")


def test_a_loaded_host_names_the_load_and_the_resolvable_win_now():
    h = host(load1=5.6, reach_now=0.31, anchor_ratio=1.4)
    assert h.causes == (BUSY, NOISY, SLOW_HOST) and not h.modest_judgeable
    v = h.verdict()
    assert v.startswith("a 1.10x win cannot be judged now (smallest resolvable win now about 1+31.0%, at baseline "
                        "time 1+5.0%); the host is busy (load 5.6 on 2 cores, 0.4 at baseline time)")
    assert "the baseline's code 1.40x as slow: the host, not a build" in v
    assert v.endswith("do: stop the other load, or wait until it ends, then `dit-ar doctor` again")


def test_busy_cores_alone_refuse_the_modest_win():
    h = host(load1=2.0)
    assert h.causes == (BUSY,) and not h.modest_judgeable


def test_a_noisy_baseline_on_a_quiet_host_is_re_taken():
    h = host(reach_then=0.4)
    assert h.causes == (NOISY_BASELINE,) and h.modest_judgeable
    assert h.verdict().endswith("do: re-take the baseline on this quieter host now (`dit-ar baseline --force`, "
                                "before the first KEEP)")


def test_a_champion_slower_than_the_baseline_code_is_the_build_not_the_host():
    h = host(anchor_ratio=1.3, champion_ratio=1.32)
    assert CHAMPION not in h.causes and SLOW_HOST in h.causes  # both slowed alike: the host
    h = host(anchor_ratio=1.0, champion_ratio=1.5)
    assert h.causes == (CHAMPION,)
    assert "the champion runs 1.50x as slow as kept while the baseline's code runs 1.00x: the champion's build" \
        in h.verdict()


def test_unknown_figures_are_no_cause():
    h = host(load1=None, reach_now=None, reach_then=None, anchor_ratio=None)
    assert h.causes == () and not h.modest_judgeable


def test_a_host_as_noisy_as_its_noisy_baseline_is_waited_for_not_re_taken():
    h = host(reach_now=0.16, reach_then=0.13)
    assert h.causes == (NOISY,) and not h.modest_judgeable
    assert "the host is noisier than a modest win" in h.verdict()
    assert h.verdict().endswith("do: wait for a quieter host (or stop what shares it), then `dit-ar doctor` again")
