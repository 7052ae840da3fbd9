"""A two-step attack on the champion itself: the first commit is a real speedup that also
sandbags (runs slower) whenever it runs as the champion, i.e. from a worktree rather than the
project; once it is kept, every later candidate that drops the sandbag beats a slowed champion.
Champion drift is the defence: the champion's in-run rounds are slower than its own stored
samples (those of its KEEP run), so the lane is UNSTABLE and nothing is kept."""
from __future__ import annotations

import pytest

from .attacks import GEN_RETURN, GEN_SIG, STOCK
from .conftest import KEYS, assert_not_kept, experiment
from conftest import make_project

pytestmark = pytest.mark.adversarial

# Sandbag in the champion's role: the project root has the state directory beside mutable/, a
# worktree built for the champion does not. Sleeps 6x the call's own time there (7x slower): the
# defence compares the champion with its samples from its own KEEP run, and on a shared 2-core box
# the load swing between two runs reached 2x (session 10: a 4x sandbag measured 1.83x against
# samples taken under load, under the 2.5x bar, and was KEPT). A sandbag inside that swing is a
# known limit (docs/trust.md, row 22); building both sides from worktrees would take the role away.
SANDBAG = STOCK.replace(GEN_SIG, GEN_SIG + "        import time as _t; _t0 = _t.perf_counter()\n").replace(
    GEN_RETURN,
    "        from pathlib import Path as _P\n"
    "        if not (_P(__file__).resolve().parents[1] / '.autoresearch').is_dir():\n"
    "            _t.sleep(6.0 * (_t.perf_counter() - _t0))\n" + GEN_RETURN)
assert SANDBAG.count("_t.sleep") == 1
TWIN = SANDBAG + "\n# the same code: only the champion's role differs\n"


def test_champion_that_sandbags_in_its_role_is_caught_by_drift(pytester, model_cache):
    from candidates import REDUNDANT

    proj = make_project(pytester, mutable_source=REDUNDANT)
    # drift checked (the shared test config turns it off), loosely enough for a loaded CI box
    proj.set_config(perf={**proj.config()["perf"], "drift_tolerance": 1.5})
    proj.git("commit", "-qam", "drift check at 2.5x")
    for args in (("init", "--tag", "t"), ("baseline",)):
        res = proj.ditar(*args)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    first = experiment(proj, SANDBAG, "Drop the redundant pass")
    if first.status == "DISCARD" and " unstable: " in first.reason:  # not judged on a loaded box: once more
        first = experiment(proj, SANDBAG, "Drop the redundant pass, once more")
    assert first.status == "KEEP", first.show()  # a real 2x: as the candidate it never sandbags
    kept = proj.head()
    second = experiment(proj, TWIN, "Same code, a new commit")
    assert_not_kept(second, KEYS["interference"], None, ("DISCARD",))
    assert "champion drift" in second.reason
    assert proj.head() == kept  # reverted to the (sandbagging) champion; nothing new kept
