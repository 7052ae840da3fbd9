"""`pytest -m quality`: passes against its own baseline, fails naming item and metric otherwise."""
from candidates import ALTERS


def test_quality_passes_against_own_baseline(project):
    assert project.pytest("--ditar-baseline").ret == 0
    res = project.pytest("-m", "quality", "-v")
    assert res.ret == 0, res.stdout.str()
    res.assert_outcomes(passed=6, deselected=2)
    res.stdout.fnmatch_lines(["*test_quality?tiny-000? PASSED*", "*ditar: quality 6/6 passed (class exact)*"])


def test_quality_fails_when_outputs_change(project):
    assert project.pytest("--ditar-baseline").ret == 0
    project.write("mutable/pipeline.py", ALTERS)
    res = project.pytest("-m", "quality")
    assert res.ret == 1
    res.assert_outcomes(failed=6, deselected=2)
    out = res.stdout.str()
    assert "quality contract 'exact' failed for item tiny-000" in out
    assert "latent_rel_l2" in out and "> 0.01" in out
    assert "baseline image:" in out and "candidate image:" in out
    assert project.git("status", "--porcelain") == "M mutable/pipeline.py"  # report only: nothing reverted


def test_single_item_selection_reports_only(project):
    assert project.pytest("--ditar-baseline").ret == 0
    res = project.pytest("suites/tiny/test_quality.py::test_quality[tiny-004]")
    res.assert_outcomes(passed=1)
    assert "DITAR VERDICT" not in res.stdout.str()
