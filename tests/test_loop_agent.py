"""Ten experiments in a row, as a scripted agent runs them overnight."""
from candidates import ALTERS, COMMENT_ONLY, NAN, RAISES, REDUNDANT, STOCK
from conftest import REPO, research_project

FAST = (REPO / "pytest_ditar/demo/candidates/faster_exact.py").read_text()


def test_ten_experiments_leave_kept_commits_equal_to_the_branch(pytester, model_cache, tmp_path_factory):
    proj = research_project(pytester, tmp_path_factory, mutable_source=REDUNDANT)
    start = proj.head()
    plan = [(ALTERS, "Lower guidance"), (STOCK, "Drop the redundant pass"), (RAISES, "Broken kernel"),
            (COMMENT_ONLY, "Comment only"), (FAST, "Lean sampling loop"), (ALTERS, "Lower guidance again"),
            (NAN, "NaN"), (REDUNDANT, "Put the redundant pass back"), (COMMENT_ONLY, "Comment again"),
            (STOCK + "\n", "Back to the stock loop")]
    verdicts = []
    for i, (source, subject) in enumerate(plan):
        proj.commit_candidate(source + f"\n# experiment {i}\n", "exact", subject)
        res = proj.ditar("experiment", "--classification", "exact", "--description", subject)
        verdicts.append(res.stdout.strip().splitlines()[-1].split()[2])
        assert proj.git("status", "--porcelain") == ""  # the loop never leaves the tree dirty
    rows = [r for r in proj.ledger() if r["status"] != "BASELINE"]
    assert len(rows) == 10 and [r["status"] for r in rows] == verdicts
    kept = [r["commit"] for r in rows if r["status"] == "KEEP"]
    on_branch = proj.git("rev-list", "--reverse", f"{start}..HEAD").split()
    assert kept == on_branch and len(kept) >= 1, verdicts
    assert verdicts[2] == "CRASH" and verdicts[6] == "CRASH" and verdicts[0] == "DISCARD"
    st = proj.ditar("status")
    assert st.returncode == 0 and "hash chain verifies" in st.stdout
