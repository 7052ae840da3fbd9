"""One rule for an UNSTABLE objective lane (issue 27): the change was not judged, so it runs once
more, as it is, and its ledger row links the first; unjudged twice, or judged once, the same change
on the same champion is refused before any candidate code runs (re-running until noise favours a
change is the shortcut the rule closes). Through `dit-ar experiment`, as the agent runs it."""
import pytest

from pytest_ditar.loop.options import Exit

from candidates import ALTERS, STOCK
from conftest import GENERATE, busy_while_marked


@pytest.fixture
def slowed_champion(pytester, model_cache, tmp_path_factory):
    """A baseline whose batch-1 calls sleep while a marker file exists: once it does, the champion
    (and its twin) run the objective lane far slower than their stored samples, and an unchanged
    candidate without the sleep can only look faster by that drift: UNSTABLE, not judged."""
    return busy_while_marked(pytester, tmp_path_factory, STOCK, "len(request.labels) == 1", 0.3)


def _next(out: str) -> str:
    return next(line for line in reversed(out.splitlines()) if line.startswith("ditar: next: "))


def test_an_unstable_change_runs_once_more_linked_then_is_refused_and_a_judged_one_is_refused(slowed_champion):
    proj = slowed_champion
    base = proj.head()
    # slower than the champion on a quiet host: faster than the slowed champion in the lane, but by
    # less than the champion's drift, which is taken off its lower bound: UNSTABLE. 80 ms: with 20 ms
    # a busy host's stored champion samples (62 ms, not 40) let a 58 ms candidate clear the bar.
    candidate = STOCK.replace(GENERATE, GENERATE + "        import time\n"
                              "        if len(request.labels) == 1:\n            time.sleep(0.08)\n")
    _, res, line = proj.experiment(candidate, "exact", "Same pipeline")
    assert line.startswith("DITAR VERDICT: DISCARD ") and "unstable" in line, line
    assert res.returncode == Exit.DISCARD, res.stdout[-3000:]
    first = proj.ledger()[-1]
    assert first["judged"] == 0 and first["rerun_of"] == "" and len(first["patch"]) == 16, first
    run = next((proj.root / ".autoresearch/t/runs").iterdir())
    said = _next(res.stdout)
    assert "not judged: the objective lane was UNSTABLE" in said and "run it once more" in said, said
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
    assert "leave the idea for this champion" in said, said
    assert proj.head() == base

    # a third time: refused before anything runs, nothing recorded
    proj.git("apply", str(run / "candidate.patch"))
    proj.git("commit", "-qam", "Same pipeline, third run", "-m", "Ditar-Class: exact")
    res = proj.ditar("experiment", "--classification", "exact", "--description", "Same pipeline, third")
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith("DITAR REFUSED: ") and f"not judged twice (runs {first['run']}, {second['run']}" in last, \
        res.stdout[-2000:]
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
