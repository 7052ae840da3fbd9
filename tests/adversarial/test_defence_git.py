"""What a gated run does to git: it reverts with `git reset --keep` (never losing uncommitted work),
and it refuses a tree or history it cannot judge cleanly, before recording or reverting anything."""
import pytest

from candidates import ALTERS, PROJECT_ROOT, STOCK

# The defences' own attack-first tests: they run with the battery (CI's second step).
pytestmark = pytest.mark.adversarial

BUILD = "def build(spec: PipelineSpec) -> StockDiT:\n"


def _last(res) -> str:
    return res.stdout.strip().splitlines()[-1]


def _writes_during_build(source: str, rel: str, text: str) -> str:
    """A candidate that edits `rel` while it builds: an edit the user made mid-run, deterministically."""
    assert BUILD in source
    root = PROJECT_ROOT
    return source.replace(BUILD, BUILD + f"    open({root} + '/' + {rel!r}, 'a').write({text!r})\n", 1)


def test_revert_keeps_an_uncommitted_edit_to_a_tracked_file(research_unsandboxed):
    """The attack: an uncommitted edit to a tracked file, made while a run was in flight, was wiped
    by the revert (`git reset --hard`)."""
    proj = research_unsandboxed  # the write must land: the judge's answer is the test
    base = proj.head()
    note = "# a note typed while the run was in flight\n"
    sha, res, line = proj.experiment(_writes_during_build(ALTERS, ".gitignore", note), "exact", "Lower guidance")
    assert res.returncode == 1 and line.startswith("DITAR VERDICT: DISCARD"), line
    assert proj.head() == base and f"ditar: reverted {sha[:7]}" in res.stdout
    assert (proj.root / ".gitignore").read_text().endswith(note)  # the edit survived the revert
    assert proj.git("status", "--porcelain") == "M .gitignore"
    assert proj.ledger()[-1]["commit"] == sha


def test_revert_git_refuses_is_recorded_and_left_to_finish_by_hand(research_unsandboxed):
    """The candidate's own file was edited mid-run: reset --keep refuses, so the commit stays, the
    verdict is still recorded, and one line says how to finish."""
    proj = research_unsandboxed  # the write must land: the judge's answer is the test
    note = "# edited while the run was in flight\n"
    sha, res, line = proj.experiment(_writes_during_build(ALTERS, "mutable/pipeline.py", note), "exact",
                                     "Lower guidance")
    assert line.startswith("DITAR VERDICT: DISCARD"), line
    assert proj.head() == sha and (proj.root / "mutable/pipeline.py").read_text().endswith(note)
    assert proj.ledger()[-1]["status"] == "DISCARD" and proj.ledger()[-1]["commit"] == sha
    (hint,) = [line for line in res.stdout.splitlines() if line.startswith("ditar: not reverted:")]
    assert "uncommitted changes in files the candidate commit touches (mutable/pipeline.py)" in hint, hint
    assert f"git reset --keep {proj.git('rev-parse', 'HEAD^')[:7]}" in hint, hint


def test_untracked_file_refuses_the_run_and_the_commit_stays(research):
    """The attack: an untracked file turned a good candidate into a DISCARD that never ran, and the
    next run reverted it."""
    proj = research
    sha = proj.commit_candidate(STOCK + "\n# same code\n", "exact", "A comment")
    proj.write("mutable/x.py", "x = 1\n")
    res = proj.ditar("experiment", "--classification", "exact", "--description", "A comment")
    assert res.returncode == 4, res.stdout[-2000:]
    assert _last(res) == ("DITAR REFUSED: guard clean_tree: untracked file mutable/x.py: "
                          "commit it, delete it or add it to .gitignore")
    assert proj.head() == sha and [r["status"] for r in proj.ledger()] == ["BASELINE"]
    res = proj.ditar("experiment", "--classification", "exact", "--description", "again")
    assert res.returncode == 4 and proj.head() == sha  # the next run does not revert it either
    assert (proj.root / "mutable/x.py").is_file()


def test_interrupted_revert_with_a_dirty_tree_is_refused_not_finished(research):
    from pytest_ditar.store.ledger import Ledger

    proj = research
    base = proj.head()
    sha = proj.commit_candidate(ALTERS, "exact", "Lower guidance")
    Ledger(proj.root / ".autoresearch/t").append({"commit": sha, "parent": base, "class": "exact",
                                                  "status": "DISCARD", "reason": "quality failed"})
    proj.write("mutable/pipeline.py", ALTERS + "\n# more\n")
    res = proj.ditar("experiment", "--classification", "exact", "--description", "again")
    assert res.returncode == 4 and "guard clean_tree: uncommitted changes: mutable/pipeline.py" in _last(res)
    assert proj.head() == sha and (proj.root / "mutable/pipeline.py").read_text().endswith("# more\n")


def _runs_git_during_build(source: str, *argvs: tuple[str, ...]) -> str:
    """A candidate that runs git in the project while it builds (an agent's process can)."""
    assert BUILD in source
    root = PROJECT_ROOT
    calls = "".join(f"    __import__('subprocess').run(['git', *{list(a)!r}], cwd={root}, capture_output=True)\n"
                    for a in argvs)
    return source.replace(BUILD, BUILD + calls, 1)


AMENDED = STOCK + "\n# amended in: never judged\n"


@pytest.mark.parametrize("move", ["amend", "commit on top", "detach"])
def test_git_moved_during_the_run_is_a_crash_and_the_branch_goes_back_on_the_champion(research_unsandboxed, move):
    """The attacks: the candidate amends HEAD to other code while it is judged (the branch ended on
    untested code under the judged commit's verdict), or commits on top (the revert refused, and the
    discarded commit stayed on the branch), or detaches HEAD."""
    proj = research_unsandboxed  # the write must land: the judge's answer is the test
    base = proj.head()
    root = PROJECT_ROOT
    argvs = {"amend": [("commit", "-qa", "--amend", "--no-edit")],
             "commit on top": [("commit", "-q", "--allow-empty", "-m", "wip: notes")],
             "detach": [("checkout", "-q", "--detach")]}[move]
    src = _runs_git_during_build(ALTERS, *argvs)
    if move == "amend":  # the amended commit carries other code than the judged one
        src = src.replace(BUILD, BUILD + f"    open({root} + '/mutable/pipeline.py', 'w').write({AMENDED!r})\n", 1)
    sha, res, line = proj.experiment(src, "exact", "Lower guidance")
    moved = {"amend": "autoresearch/t moved from {} to ", "commit on top": "autoresearch/t moved from {} to ",
             "detach": "HEAD moved from autoresearch/t to a detached HEAD at {}"}[move].format(sha[:7])
    assert line.startswith("DITAR VERDICT: CRASH") \
        and f'reason="git state changed during the run: {moved}' in line, line
    assert res.returncode == 10  # CRASH: its own exit status (pytest_ditar.loop.run.options.Exit)
    assert proj.git("rev-parse", "autoresearch/t") == base and proj.head() == base, proj.git("log", "--oneline", "-3")
    assert proj.git("rev-parse", "--abbrev-ref", "HEAD") == "autoresearch/t"
    assert proj.git("status", "--porcelain") == "" and (proj.root / "mutable/pipeline.py").read_text() == STOCK
    assert f"ditar: autoresearch/t put back on {base[:7]}, the judged commit's parent" in res.stdout, res.stdout[-2000:]
    rows = proj.ledger()
    assert [(r["commit"], r["status"], r["parent"]) for r in rows[1:]] == [(sha, "CRASH", base)], rows


# ---- vcs, directly --------------------------------------------------------------------------

@pytest.fixture
def two_commits(tmp_path):
    from pytest_ditar.vcs import branches

    root, user = tmp_path / "r", ("t", "t@localhost")
    root.mkdir()
    (root / "a.txt").write_text("a\n")
    (root / "b.txt").write_text("b\n")
    first = branches.init_repo(root, "first", user=user)
    (root / "a.txt").write_text("a2\n")
    second = branches.commit_tracked(root, "second", user=user)
    return root, first, second


def test_revert_to_parent_keeps_unrelated_local_changes(two_commits):
    from pytest_ditar.vcs import branches

    root, first, second = two_commits
    (root / "b.txt").write_text("b, edited\n")
    (root / "new.txt").write_text("untracked\n")
    assert branches.revert_to_parent(root, second) == first
    assert (root / "a.txt").read_text() == "a\n" and (root / "b.txt").read_text() == "b, edited\n"
    assert (root / "new.txt").read_text() == "untracked\n"


def test_revert_to_parent_refuses_to_lose_an_edit_of_the_candidates_file(two_commits):
    from pytest_ditar.core.errors import DitarError
    from pytest_ditar.vcs import branches, queries

    root, first, second = two_commits
    (root / "a.txt").write_text("a2, edited\n")
    with pytest.raises(DitarError, match=r"uncommitted changes in files the candidate commit touches \(a.txt\)"):
        branches.revert_to_parent(root, second)
    assert queries.state(root).head == second and (root / "a.txt").read_text() == "a2, edited\n"


def test_state_ref_is_content_addressed_and_leaves_index_and_tree_alone(tmp_path, two_commits):
    from pytest_ditar.vcs import queries, trees

    root, _, second = two_commits
    files = tmp_path / "state"
    (files / "sub").mkdir(parents=True)
    (files / "x.txt").write_bytes(b"x\n")
    (files / "sub" / "y.bin").write_bytes(bytes(range(256)))
    index = (root / ".git/index").read_bytes()
    c1 = trees.save_tree(root, "refs/ditar/t", {"x.txt": files / "x.txt", "sub/y.bin": files / "sub/y.bin"}, "one")
    assert queries.ref_commit(root, "refs/ditar/t") == c1
    assert trees.save_tree(root, "refs/ditar/t", {"x.txt": files / "x.txt", "sub/y.bin": files / "sub/y.bin"},
                           "same") == c1
    (files / "x.txt").write_bytes(b"x2\n")
    c2 = trees.save_tree(root, "refs/ditar/t", {"x.txt": files / "x.txt"}, "two")
    assert c2 != c1 and dict(trees.read_tree(root, c1)) == {"x.txt": b"x\n", "sub/y.bin": bytes(range(256))}
    assert dict(trees.read_tree(root, c2)) == {"x.txt": b"x2\n"}
    assert (root / ".git/index").read_bytes() == index and queries.state(root).dirty_paths == ()
    assert queries.state(root).head == second


def test_put_branch_back_keeps_local_changes_and_refuses_to_overwrite_them(two_commits):
    from pytest_ditar.core.errors import DitarError
    from pytest_ditar.vcs import branches

    root, first, second = two_commits
    (root / "b.txt").write_text("b, edited\n")
    branches.put_branch_back(root, "main", first)  # HEAD on the branch: reset --keep
    assert branches.branch_commit(root, "main") == first and (root / "a.txt").read_text() == "a\n"
    assert (root / "b.txt").read_text() == "b, edited\n"
    branches.put_branch_back(root, "main", second)
    (root / "a.txt").write_text("a2, edited\n")
    with pytest.raises(DitarError, match=r"uncommitted changes \(a.txt\) block putting main back on "
                                         rf"{first[:7]}: save them, then `git reset --keep {first[:7]}` finishes it"):
        branches.put_branch_back(root, "main", first)
    assert branches.branch_commit(root, "main") == second and (root / "a.txt").read_text() == "a2, edited\n"


def test_put_branch_back_from_another_branch_or_a_detached_head(two_commits):
    from pytest_ditar.vcs import branches, hardened, queries

    root, first, second = two_commits
    branches.create_branch(root, "elsewhere")
    branches.put_branch_back(root, "main", first)  # checkout -B: the branch moves and HEAD is on it again
    st = queries.state(root)
    assert (st.branch, st.head) == ("main", first) and branches.branch_commit(root, "elsewhere") == second
    branches.put_branch_back(root, "main", second)
    hardened.git(root, "checkout", "-q", "--detach")
    (root / "b.txt").write_text("b, edited\n")
    branches.put_branch_back(root, "main", first)
    st = queries.state(root)
    assert (st.branch, st.head) == ("main", first) and (root / "b.txt").read_text() == "b, edited\n"
