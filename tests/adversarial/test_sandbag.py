"""A two-step attack on the champion itself: the first commit is a real speedup that will sandbag
(run slower) once it is the champion; once it is kept, every later candidate that drops the
sandbag beats a slowed champion. Since issue 38 every role is built alike and blind to its role
(tests/adversarial/test_role_blind.py), so what is left to such a champion is a change over time
(a time bomb, stood in for here by a file the test creates after the KEEP). Champion drift against
the anchor is the defence (issue 49): the champion's time over the baseline code's, paired by round
in the objective lane, against the same ratio at its KEEP; that drift comes off the objective win's
lower bound: a win it explains is UNSTABLE and nothing is kept (a 13x sandbag: the champion is not
the one that was kept)."""
from __future__ import annotations

import re

import pytest

from .attacks import GEN_RETURN, GEN_SIG, sleeps_after
from .conftest import KEYS, assert_not_kept, experiment, experiment_judged
from conftest import host_visible_dir, make_project

pytestmark = pytest.mark.adversarial


def sandbag(bomb) -> str:
    """REDUNDANT's pass dropped (a real 2x), sleeping 12x the call's own time (13x slower: beyond a loaded box's
    2x swing times the test's 2.5x drift bar) once `bomb`
    exists. On a shared 2-core box the load swing between two runs reached 2x (session 10: a 4x
    sandbag measured 1.83x against samples taken under load): a sandbag inside that swing on every
    lane is a known limit (docs/trust.md, row 22)."""
    from candidates import STOCK

    return sleeps_after(f"        if __import__('os').path.exists({str(bomb)!r}):\n"
                        "            _t.sleep(12.0 * (_t.perf_counter() - _t0))\n", STOCK)


def _judged_twice(proj, first_source: str, honest: str, bomb, clear_load=lambda: None):
    """Baseline, the sandbag as a real 2x win (kept), its bomb set off, then the same speed without
    the sandbag: judged, never kept."""
    # drift checked (the shared test config turns it off), loosely enough for a loaded CI box
    # (a 7x slowed call on a loaded box must not reach the item timeout: a stall is no drift)
    proj.set_config(perf={**proj.config()["perf"], "drift_tolerance": 1.5}, item_timeout_s=60)
    proj.git("commit", "-qam", "drift check at 2.5x")
    for args in (("init", "--tag", "t"), ("baseline",)):
        res = proj.ditar(*args)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    first = experiment_judged(proj, first_source, "Drop the redundant pass")
    assert first.status == "KEEP", first.show()  # a real 2x: its bomb not set yet
    kept = proj.head()
    clear_load()
    bomb.write_text("the champion sandbags from now on\n")
    second = experiment(proj, honest, "The same pass, no sandbag")
    assert_not_kept(second, KEYS["interference"], None, ("DISCARD",))
    assert "champion drift" in second.reason
    assert proj.head() == kept  # reverted to the (sandbagging) champion; nothing new kept
    return second


def _loaded_while(marker, source: str) -> str:
    """`source` whose batch-1 calls take 5x as long while `marker` exists: the load a busy box put
    on the first run's objective lane, both sides alike (its batch-8 lane ran on a quiet box)."""
    return source.replace(GEN_SIG, GEN_SIG + "        import time as _lt; _l0 = _lt.perf_counter()\n").replace(
        GEN_RETURN,
        f"        if len(request.labels) == 1 and __import__('os').path.exists({str(marker)!r}):\n"
        "            _lt.sleep(4.0 * (_lt.perf_counter() - _l0))\n" + GEN_RETURN)


def test_a_sandbag_whose_stored_samples_were_taken_under_load_is_caught_on_a_guard_lane(pytester, model_cache,
                                                                                       tmp_path):
    """CI, stop 36: the first run stored the objective lane's samples under load, so the kept
    sandbag's 7x, against them, stayed under the drift bar there; its guard lane's quiet samples
    showed it (5.09x), and the win was KEPT with that lane merely named. Replayed here without luck:
    a champion drifting on any lane has that drift taken off the objective lane's win, which it
    explains (core.laneoutcome)."""
    from candidates import REDUNDANT, STOCK

    where = host_visible_dir("sandbag")  # a sandbox sees the host here, not in its own /tmp
    marker, bomb = where / "busy", where / "bomb"
    marker.write_text("the box is busy while the first run stores its samples\n")
    proj = make_project(pytester, mutable_source=_loaded_while(marker, REDUNDANT))
    second = _judged_twice(proj, _loaded_while(marker, sandbag(bomb)), _loaded_while(marker, STOCK), bomb,
                           marker.unlink)
    # caught on the guard lane (its drift taken off the win), or on the objective lane's own: a
    # champion up to 2x as slow as kept or more is not the champion that was kept (issue 38)
    assert ("against a champion slowed in this run" in second.reason
            and re.search(r"guard lane throughput_b8: .*champion drift", second.reason)) \
        or ("champion drift" in second.reason and "not the champion that was kept" in second.reason), second.show()


def test_champion_that_sandbags_in_its_role_is_caught_by_drift(pytester, model_cache, tmp_path):
    from candidates import REDUNDANT, STOCK

    bomb = host_visible_dir("sandbag") / "bomb"  # a sandbox sees the host here, not in its own /tmp
    _judged_twice(make_project(pytester, mutable_source=REDUNDANT), sandbag(bomb), STOCK, bomb)
