"""The mistakes a newcomer made in their first hour (issue 42), replayed through `dit-ar`: each
one-line message names the right fix, never one that leads to a second mistake."""
from candidates import STOCK
from conftest import research_project


def _refusal(res) -> str:
    last = res.stdout.strip().splitlines()[-1]
    assert res.returncode == 4 and last.startswith("DITAR REFUSED: "), res.stdout[-2000:] + res.stderr[-2000:]
    return last


def test_experiment_and_status_on_main_say_to_check_out_the_research_branch(research):
    research.git("checkout", "-q", "main")
    line = _refusal(research.ditar("experiment", "--classification", "exact", "--description", "on main"))
    assert line == "DITAR REFUSED: HEAD is on 'main', not a research branch: git checkout autoresearch/t", line
    st = research.ditar("status")
    assert st.returncode == 1 and "HEAD is on 'main', not a research branch: git checkout autoresearch/t" in st.stdout
    assert "dit-ar init" not in st.stdout and "ledger" not in st.stdout, st.stdout  # neither "start a tag" nor "broken"
    # with two research branches, it names the pattern and lists them
    research.git("branch", "autoresearch/other")
    st = research.ditar("status")
    assert "git checkout autoresearch/<tag> (one of: autoresearch/other, autoresearch/t)" in st.stdout, st.stdout


def test_an_edit_at_the_champion_is_a_new_candidate_never_an_amend(research):
    research.write("mutable/pipeline.py", STOCK + "\n# an edit not yet committed\n")
    line = _refusal(research.ditar("experiment", "--classification", "exact", "--description", "dirty"))
    assert "uncommitted changes: mutable/pipeline.py" in line and "HEAD is the champion" in line, line
    assert "commit them as a new candidate (git commit -am" in line and "--amend" not in line, line


def test_an_edit_over_a_candidate_not_yet_judged_is_folded_into_it(pytester, model_cache, tmp_path_factory):
    proj = research_project(pytester, tmp_path_factory)
    proj.commit_candidate(STOCK + "\n# hypothesis\n", "exact", "A hypothesis")
    proj.write("mutable/pipeline.py", STOCK + "\n# hypothesis, fixed\n")
    line = _refusal(proj.ditar("experiment", "--classification", "exact", "--description", "dirty"))
    assert "fold them into the candidate (git commit --amend)" in line and "champion" not in line, line


def test_a_trailer_that_names_another_class_than_the_run_is_refused(research):
    """issue 50: `Ditar-Class: exact` judged as numerical left the ledger and git history disagreeing."""
    sha = research.commit_candidate(STOCK + "\n# fp16 <-> bf16\n", "exact", "bf16 transformer")
    rows = len(research.ledger())
    line = _refusal(research.ditar("experiment", "--classification", "numerical", "--description", "bf16"))
    assert f"commit {sha[:7]}: its trailer 'Ditar-Class: exact' and the class given (numerical) differ" in line, line
    assert "run it as 'exact' (`--classification exact`)" in line and "(`git commit --amend`)" in line, line
    assert research.head() == sha and len(research.ledger()) == rows  # nothing judged, recorded or reverted


def test_doctor_during_a_try_keeps_the_edit_and_fails_only_on_dirt_outside_mutable(research):
    """`try`'s UNSTABLE-twice next: line sends the user to `dit-ar doctor` with the edit uncommitted (issue
    50's newcomer run): doctor warns and says to keep it, never "fix: clean tree"; other dirt FAILs."""
    research.write("mutable/pipeline.py", STOCK + "\n# a hypothesis being tried\n")
    res = research.ditar("doctor", "--no-probe")
    row = next(ln for ln in res.stdout.splitlines() if ln.startswith("clean tree"))
    assert res.returncode == 0 and "fix:" not in res.stdout, res.stdout
    assert row.split()[2] == "warn" and "uncommitted edit: mutable/pipeline.py (`dit-ar try` times it" in row, row
    research.write("notes.txt", "a file outside mutable/\n")
    res = research.ditar("doctor", "--no-probe")
    row = next(ln for ln in res.stdout.splitlines() if ln.startswith("clean tree"))
    assert res.returncode == 1 and row.split()[2] == "FAIL" and "notes.txt" in row, res.stdout
    assert res.stdout.strip().splitlines()[-1].endswith("fix: clean tree"), res.stdout
