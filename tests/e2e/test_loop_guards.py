"""Guards are checked before any candidate code runs. A violation in the candidate's own diff is a
DISCARD with its reason (and the revert); a branch, tree or history the gate cannot judge cleanly is
REFUSED (nothing recorded, nothing reverted), and so is a commit that changes anything outside the
mutable paths (issue 49: pytest would read it before any guard runs)."""
import pytest
import yaml

from candidates import ALTERS, STOCK


def _marker_source(marker) -> str:
    """A candidate that leaves a mark when its code is imported: proof that it ran. The mark is a
    file where its worker runs unsandboxed and a line in its worker's log where it is sandboxed
    (it can write nowhere outside then): `_ran` looks for both."""
    return STOCK.replace("class StockDiT:", f"print('DITAR-TEST-RAN {marker}', flush=True)\n"
                         f"try:\n    open({str(marker)!r}, 'w').close()\nexcept OSError:\n    pass\n\n\n"
                         "class StockDiT:", 1)


def _ran(proj, marker) -> bool:
    logs = proj.root.glob(".autoresearch/*/runs/*/workers/*/*.log")
    return marker.exists() or any(f"DITAR-TEST-RAN {marker}" in p.read_text(errors="replace") for p in logs)


def _run(proj):
    res = proj.ditar("experiment", "--classification", "exact", "--description", "x")
    return res, res.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("what", ["config_threshold", "corpus_seed", "perf_harness"])
def test_fixed_path_edit_is_refused_before_pytest_starts(research, tmp_path, what):
    proj = research
    base = proj.head()
    marker = tmp_path / "ran"
    proj.write("mutable/pipeline.py", _marker_source(marker))
    if what == "config_threshold":
        cfg = proj.config()
        cfg["thresholds"]["exact"]["psnr_min"] = 10.0
        proj.set_config(thresholds=cfg["thresholds"])
        changed = "config/autoresearch.json"
    elif what == "corpus_seed":
        p = proj.root / "suites/tiny/suite.yaml"
        suite = yaml.safe_load(p.read_text())
        suite["corpus"][0]["seed"] += 1
        p.write_text(yaml.safe_dump(suite, sort_keys=False))
        changed = "suites/tiny/suite.yaml"
    else:
        p = proj.root / "suites/tiny/test_perf.py"
        p.write_text(p.read_text() + "\n# tuned the harness\n")
        changed = "suites/tiny/test_perf.py"
    proj.git("commit", "-qam", "sneaky\n\nDitar-Class: exact")
    sha = proj.head()
    res, line = _run(proj)
    assert res.returncode == 4
    assert line.startswith(f"DITAR REFUSED: judge_tree: {changed} modified in HEAD against the baseline"), line
    assert f"git checkout {base[:7]} -- {changed} && git commit --amend --no-edit" in line, line
    assert not _ran(proj, marker), "the candidate ran despite a guard violation"
    assert proj.head() == sha and [r["status"] for r in proj.ledger()] == ["BASELINE"]  # nothing recorded


def test_edit_outside_mutable_paths_is_refused(research, tmp_path):
    proj = research
    marker = tmp_path / "ran"
    proj.write("mutable/pipeline.py", _marker_source(marker))
    proj.write("tools/helper.py", "x = 1\n")
    proj.git("add", "-A")
    proj.git("commit", "-qm", "helper\n\nDitar-Class: exact")
    sha = proj.head()
    res, line = _run(proj)
    assert res.returncode == 4 and line.startswith("DITAR REFUSED: judge_tree: tools/helper.py added in HEAD"), line
    assert "git rm -q -- tools/helper.py && git commit --amend --no-edit" in line
    assert not _ran(proj, marker) and proj.head() == sha


def test_dirty_tree_is_refused_and_the_edit_survives(research, tmp_path):
    proj = research
    marker = tmp_path / "ran"
    sha = proj.commit_candidate(STOCK + "\n# candidate\n", "exact", "candidate")
    proj.write("mutable/pipeline.py", _marker_source(marker))  # uncommitted on top
    res, line = _run(proj)
    want = "uncommitted changes: mutable/pipeline.py: fold them into the candidate (git commit --amend)"
    assert res.returncode == 4 and line.startswith("DITAR REFUSED: guard clean_tree: " + want), line
    assert not _ran(proj, marker) and [r["status"] for r in proj.ledger()] == ["BASELINE"]  # nothing recorded
    assert proj.head() == sha and "open(" in (proj.root / "mutable/pipeline.py").read_text()  # nothing lost


def test_wrong_branch_is_refused(research, tmp_path):
    proj = research
    marker = tmp_path / "ran"
    proj.git("checkout", "-q", "-b", "autoresearch/other")
    sha = proj.commit_candidate(_marker_source(marker), "exact", "on the wrong branch")
    res = proj.ditar("--tag", "t", "experiment", "--classification", "exact", "--description", "x")
    line = res.stdout.strip().splitlines()[-1]
    assert res.returncode == 4 and line == ("DITAR REFUSED: guard branch: HEAD is on 'autoresearch/other', "
                                            "expected 'autoresearch/t': git checkout autoresearch/t"), line
    assert not _ran(proj, marker) and proj.head() == sha  # not our branch: not reverted
    assert [r["status"] for r in proj.ledger()] == ["BASELINE"]  # nor recorded
    proj.git("checkout", "-q", "main")
    res = proj.ditar("--tag", "t", "experiment", "--classification", "exact", "--description", "x")
    last = res.stdout.strip().splitlines()[-1]
    assert res.returncode == 4 and last.startswith("DITAR REFUSED: guard branch: HEAD is on 'main'")


def test_two_commits_at_once_are_one_hypothesis_too_many(research):
    proj = research
    proj.commit_candidate(STOCK + "\n# one\n", "exact", "one")
    proj.commit_candidate(ALTERS, "exact", "two")
    sha = proj.head()
    res, line = _run(proj)
    assert res.returncode == 4 \
        and line.startswith(f"DITAR REFUSED: guard one_commit: HEAD {sha[:7]} is 2 commits above")
    assert "git reset --soft" in line and proj.head() == sha and [r["status"] for r in proj.ledger()] == ["BASELINE"]


def test_fp8_weights_fail_the_a5500_gate(research):
    """The target (sm_86) has no FP8: a candidate holding float8 tensors is discarded."""
    proj = research
    base = proj.head()
    src = STOCK.replace("        self.spec = spec\n",
                        "        self.spec = spec\n"
                        "        self.scales = {'w8': torch.zeros(4, dtype=torch.float8_e4m3fn)}\n", 1)
    assert src != STOCK
    proj.commit_candidate(src, "exact", "fp8 scales")
    res, line = _run(proj)
    assert "guard features: fp8 not supported on a5500 (sm_86): torch.float8_e4m3fn" in line, line
    assert proj.head() == base
