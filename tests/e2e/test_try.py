"""`dit-ar try` (issue 27): the agent's "does this help?" before it commits. The working tree is
timed against the champion with the gate's own lanes and checked against the class's floors, with
the margin to each; nothing is recorded, no verdict is given, git is not touched, even with a
candidate committed on top of the champion (a plain full pytest run there would be a gated one)."""
from candidates import REDUNDANT, STOCK
from conftest import research_project


def test_try_reports_lanes_quality_and_margins_and_records_nothing(pytester, model_cache, tmp_path_factory):
    proj = research_project(pytester, tmp_path_factory, mutable_source=REDUNDANT)
    base, rows = proj.head(), proj.ledger()
    proj.write("mutable/pipeline.py", STOCK)  # drop the redundant pass, not committed
    res = proj.ditar("try", "--classification", "exact")
    out = res.stdout
    assert res.returncode == 0, out[-3000:] + res.stderr[-2000:]
    assert "ditar: lane latency_b1: " in out and "ditar: lane throughput_b8: " in out, out[-3000:]
    assert "ditar: quality 6/6 passed (class exact) - report only, nothing recorded" in out, out[-3000:]
    assert "ditar: margins to the 'exact' floors: latent rel-L2 worst " in out and "PSNR worst " in out, out[-3000:]
    assert out.rstrip().endswith("ditar: try: nothing recorded, no verdict, git untouched") \
        and "DITAR VERDICT" not in out
    assert proj.ledger() == rows and proj.head() == base
    assert proj.git("status", "--porcelain") == "M mutable/pipeline.py"  # the edit is still the agent's
    assert not (proj.root / ".autoresearch/t/runs").exists() or not list((proj.root / ".autoresearch/t/runs").iterdir())

    # committed on top of the champion: still only a report, and the commit stays
    proj.git("commit", "-qam", "Drop the redundant pass", "-m", "Ditar-Class: exact")
    sha = proj.head()
    res = proj.ditar("try", "--classification", "exact")
    assert res.returncode == 0 and "DITAR VERDICT" not in res.stdout, res.stdout[-3000:]
    assert proj.ledger() == rows and proj.head() == sha
