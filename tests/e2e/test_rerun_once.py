"""One rule for an UNSTABLE objective lane (issues 27, 49): the change was not judged, so it runs
again, as it is, and its ledger row links the first; unjudged twice for the candidate's or the
champion's doing, or judged once, the same change on the same champion is refused before any
candidate code runs (re-running until noise favours a change is the shortcut the rule closes); a run
not judged because of the host never counts. Through `dit-ar experiment`, as the agent runs it."""
import pytest

from pytest_ditar.loop.run.options import Exit

from candidates import ALTERS, REDUNDANT, STOCK
from conftest import GENERATE, host_visible_dir, research_project, shared_perf

GEN_RETURN = "        return Generated(latents=self._latents, images=images)\n"


@pytest.fixture
def drifting_champion(pytester, model_cache, tmp_path_factory):
    """A champion (REDUNDANT's pass dropped: a real 2x, KEPT) whose calls sleep 1.5x their own time
    once a marker file exists: against the anchor (the baseline's code) it is then 2.5x as slow as
    when kept, so any win against it is voided (UNSTABLE, cause drift: not judged, the champion's
    doing). Returns the project and the kept commit."""
    marker = host_visible_dir("drifting-champion") / "bomb"
    assert STOCK.count(GENERATE) == 1 and STOCK.count(GEN_RETURN) == 1
    sleeps = STOCK.replace(GENERATE, GENERATE + "        import os, time\n        t0 = time.perf_counter()\n").replace(
        GEN_RETURN, f"        if os.path.exists({str(marker)!r}):\n"
                    "            time.sleep(1.5 * (time.perf_counter() - t0))\n" + GEN_RETURN)
    proj = research_project(pytester, tmp_path_factory, mutable_source=REDUNDANT,
                            config={"perf": shared_perf(drift_tolerance=0.05, max_rounds=48, lane_budget_s=15.0)})
    sha, _, line = proj.experiment_judged(sleeps, "exact", "Drop the redundant pass")
    assert line.startswith("DITAR VERDICT: KEEP"), line
    marker.write_text("the champion sleeps from now on\n")
    return proj, sha


def _next(out: str) -> str:
    return next(line for line in reversed(out.splitlines()) if line.startswith("ditar: next: "))


def test_an_unstable_change_runs_once_more_linked_then_is_refused_and_a_judged_one_is_refused(drifting_champion):
    """Issue 49's re-run rule: a run not judged for the champion's doing (its drift against the
    anchor) may run once more, linked; not judged twice so, it is refused on this champion. (A run
    not judged because of the host never counts: tests/unit/core/test_rerun.py, and
    tests/adversarial/test_anchor_drift.py under a real load.)"""
    proj, base = drifting_champion
    _, res, line = proj.experiment(STOCK, "exact", "Same pipeline without the sleep")
    assert line.startswith("DITAR VERDICT: DISCARD ") and "unstable" in line, line
    assert "champion drift against the anchor" in line, line
    assert res.returncode == Exit.DISCARD, res.stdout[-3000:]
    first = proj.ledger()[-1]
    assert first["judged"] == 0 and first["unjudged"] == "champion" and first["rerun_of"] == "", first
    run = sorted((proj.root / ".autoresearch/t/runs").iterdir())[-1]
    said = _next(res.stdout)
    assert "not judged: the objective lane was UNSTABLE for the champion's doing" in said, said
    assert "run it once more" in said, said
    assert proj.head() == base

    # once more, as the next-step line says: the same patch, a new commit (message and date differ)
    proj.git("apply", str(run / "candidate.patch"))
    proj.git("commit", "-qam", "Same pipeline, second run", "-m", "Ditar-Class: exact")
    res = proj.ditar("experiment", "--classification", "exact", "--description", "Same pipeline, again")
    second = proj.ledger()[-1]
    assert second["run"] == first["run"] + 1 and second["patch"] == first["patch"], second
    assert second["rerun_of"] == first["run"] and second["judged"] == 0, (second["status"], second["reason"])
    said = _next(res.stdout)
    assert f"UNSTABLE again (this re-ran run {first['run']})" in said, said
    assert "leave the idea on this champion" in said, said
    assert proj.head() == base

    # a third time: refused before anything runs, nothing recorded
    proj.git("apply", str(run / "candidate.patch"))
    proj.git("commit", "-qam", "Same pipeline, third run", "-m", "Ditar-Class: exact")
    res = proj.ditar("experiment", "--classification", "exact", "--description", "Same pipeline, third")
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith("DITAR REFUSED: ") and "not judged twice for the candidate's or the champion's doing" \
        in last and f"runs {first['run']} (champion), {second['run']} (champion)" in last, res.stdout[-2000:]
    assert res.returncode == Exit.REFUSED and proj.ledger()[-1]["run"] == second["run"]
    proj.git("reset", "-q", "--hard", base)

    # a judged change (its quality failed) is not run again on this champion
    _, res, line = proj.experiment(ALTERS, "exact", "Lower guidance")
    assert line.startswith("DITAR VERDICT: DISCARD ") and proj.ledger()[-1]["judged"] == 1, line
    assert "not this one again" in _next(res.stdout)
    proj.commit_candidate(ALTERS, "exact", "Lower guidance, once more")
    res = proj.ditar("experiment", "--classification", "exact", "--description", "Lower guidance, once more")
    last = res.stdout.strip().splitlines()[-1]
    judged = proj.ledger()[-1]
    assert f"already judged on this champion (run {judged['run']}: DISCARD)" in last, res.stdout[-2000:]
    assert last.startswith("DITAR REFUSED: ") and res.returncode == Exit.REFUSED
    assert proj.ledger()[-1]["run"] == judged["run"]
