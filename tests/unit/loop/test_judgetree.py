"""loop.integrity.judgetree: the candidate's tree against the baseline's outside the mutable paths, from git's
objects; the working tree's files pytest and Python would read; the judge's own ini (issue 49)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_ditar.loop.integrity import judgetree


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.email=t@l", "-c", "user.name=t", *args], cwd=root, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "mutable").mkdir(parents=True)
    (root / "suites/tiny").mkdir(parents=True)
    (root / "mutable/pipeline.py").write_text("X = 1\n")
    (root / "suites/tiny/test_perf.py").write_text("def test_x():\n    pass\n")
    (root / "conftest.py").write_text("# names the config\n")
    (root / "README.md").write_text("readme\n")
    (root / ".gitignore").write_text(".autoresearch/\n__pycache__/\nignored*\n")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "baseline")
    return root


def _commit(root: Path, msg: str = "candidate") -> str:
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", msg)
    return _git(root, "rev-parse", "HEAD")


def test_tree_changes_name_every_difference_outside_the_mutable_paths(repo: Path):
    base = _git(repo, "rev-parse", "HEAD")
    (repo / "mutable/pipeline.py").write_text("X = 2\n")
    (repo / "mutable/conftest.py").write_text("# under a mutable path: the guard judge_code's\n")
    assert judgetree.tree_changes(repo, base, _commit(repo), ["mutable/"]) == []
    (repo / "pytest.ini").write_text("[pytest]\naddopts = -p mutable.payload\n")
    (repo / "suites/tiny/conftest.py").write_text("import mutable.payload\n")
    (repo / "conftest.py").write_text("# names the config\nimport mutable.payload\n")
    (repo / "README.md").unlink()
    head = _commit(repo)
    assert judgetree.tree_changes(repo, base, head, ["mutable/"]) == [
        "README.md deleted", "conftest.py modified", "pytest.ini added", "suites/tiny/conftest.py added"]
    # the working tree plays no part: the same commits, whatever is checked out
    _git(repo, "checkout", "-q", base)
    assert judgetree.tree_changes(repo, base, head, ["mutable/"])[2] == "pytest.ini added"
    assert judgetree.tree_changes(repo, base, base, ["mutable/"]) == []


def test_a_mode_change_is_a_change(repo: Path):
    base = _git(repo, "rev-parse", "HEAD")
    (repo / "conftest.py").chmod(0o755)
    assert judgetree.tree_changes(repo, base, _commit(repo), ["mutable/"]) == ["conftest.py modified"]


def test_stray_files_are_what_pytest_or_python_would_read_that_git_does_not_hold(repo: Path):
    base = _git(repo, "rev-parse", "HEAD")
    assert judgetree.stray_files(repo, base, ["mutable/"], "suites") == []
    (repo / "notes.txt").write_text("an untracked note: nobody reads it\n")
    (repo / "mutable/scratch.py").write_text("under a mutable path: the candidate's own\n")
    (repo / "suites/tiny/__pycache__").mkdir()
    (repo / "suites/tiny/__pycache__/x.pyc").write_bytes(b"bytecode the judge never loads")
    assert judgetree.stray_files(repo, base, ["mutable/"], "suites") == []
    (repo / "tox.ini").write_text("[pytest]\naddopts = -p mutable.payload\n")  # untracked
    (repo / "ignored_setup.cfg").write_text("[tool:pytest]\n")  # git-ignored
    (repo / "yaml.py").write_text("# shadows the judge's yaml under python -m\n")
    (repo / "suites/tiny/conftest.py").write_text("import mutable.payload\n")
    (repo / "suites/tiny/test_perf.py").write_text("# edited, not committed\n")
    assert judgetree.stray_files(repo, base, ["mutable/"], "suites") == [
        "ignored_setup.cfg added", "suites/tiny/conftest.py added", "suites/tiny/test_perf.py modified",
        "tox.ini added", "yaml.py added"]


def _cfg(repo: Path) -> SimpleNamespace:
    return SimpleNamespace(root=repo, state_dir=".autoresearch", mutable_paths=("mutable/",), suites_dir="suites",
                           repo_config=repo / "config/autoresearch.json")


def _baseline(repo: Path, sha: str) -> None:
    d = repo / ".autoresearch/t/baseline"
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"git_sha": sha}))


def test_launch_refusal_names_the_path_and_the_fix(repo: Path):
    cfg = _cfg(repo)
    assert judgetree.launch_refusal(cfg, "t") is None  # no baseline yet: the gate says so
    base = _git(repo, "rev-parse", "HEAD")
    _baseline(repo, base)
    (repo / "mutable/pipeline.py").write_text("X = 2\n")
    _commit(repo)
    assert judgetree.launch_refusal(cfg, "t") is None
    (repo / ".pytest.ini").write_text("[pytest]\naddopts = -p mutable.payload\n")
    (repo / "mutable/pipeline.py").write_text("X = 3\n")
    _commit(repo)
    why = judgetree.launch_refusal(cfg, "t")
    assert why is not None and why.startswith(f"judge_tree: .pytest.ini added in HEAD against the baseline {base[:7]}")
    assert "git rm -q -- .pytest.ini && git commit --amend --no-edit" in why
    _git(repo, "rm", "-q", ".pytest.ini")
    _git(repo, "commit", "-q", "--amend", "--no-edit")
    assert judgetree.launch_refusal(cfg, "t") is None
    (repo / "pytest.ini").write_text("[pytest]\n")  # never committed
    why = judgetree.launch_refusal(cfg, "t")
    assert why is not None and why.startswith("judge_tree: pytest.ini is untracked or git-ignored in the working tree")
    assert "rm -- pytest.ini" in why
    assert judgetree.launch_refusal(cfg, "t", worktree=False) is None  # the commits alone agree


def test_project_markers_come_from_the_baselines_config_as_data(repo: Path):
    (repo / "pyproject.toml").write_text('[tool.pytest.ini_options]\nmarkers = ["slow: a slow one", "bad\\nline"]\n'
                                         'addopts = "-p mutable.payload"\n')
    base = _commit(repo)
    assert judgetree.project_markers(repo, base) == ["slow: a slow one"]  # a line break would start a key
    text = judgetree.judge_ini_text("suites", judgetree.project_markers(repo, base))
    assert "addopts" not in text and "testpaths = suites" in text and "    slow: a slow one" in text
    (repo / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["suites"]\n')
    (repo / "tox.ini").write_text("[pytest]\nmarkers =\n    unread: pytest takes pyproject.toml's table first\n")
    assert judgetree.project_markers(repo, _commit(repo)) == []


def test_only_the_judges_own_options_are_taken_off(repo: Path, tmp_path: Path):
    cfg = _cfg(repo)
    ini = judgetree.write_judge_ini(cfg, tmp_path, None)
    args = [*judgetree.judge_args(ini, repo), "--ditar-gate", "-q"]
    assert judgetree.judge_started(args, cfg) == ["--ditar-gate", "-q"]
    assert judgetree.judge_started(["--ditar-gate"], cfg) is None
    assert judgetree.judge_started(["-c", str(ini), "--rootdir=/elsewhere", "--noconftest"], cfg) is None
    forged = tmp_path / "forged.ini"
    forged.write_text("[pytest]\ntestpaths = suites\naddopts = -p mutable.payload\n")
    assert judgetree.judge_started(["-c", str(forged), *judgetree.judge_args(ini, repo)[2:]], cfg) is None
    forged.write_text("[pytest]\ntestpaths = mutable\n")
    assert judgetree.judge_started(["-c", str(forged), *judgetree.judge_args(ini, repo)[2:]], cfg) is None


def test_the_mutable_paths_are_the_baselines_config_not_the_one_in_hand(repo: Path):
    """A config that widens its own mutable paths (or moves the suites into them) changes nothing:
    the check reads them from the baseline commit's config file."""
    (repo / "config").mkdir()
    (repo / "config/autoresearch.json").write_text(json.dumps({"mutable_paths": ["mutable/"], "suites_dir": "suites"}))
    base = _commit(repo)
    _baseline(repo, base)
    wide = json.dumps({"mutable_paths": ["mutable/", "config/", "suites/"], "suites_dir": "mutable/suites"})
    (repo / "config/autoresearch.json").write_text(wide)
    (repo / "suites/tiny/conftest.py").write_text("import mutable.payload\n")
    _commit(repo)
    cfg = SimpleNamespace(root=repo, state_dir=".autoresearch", mutable_paths=("mutable/", "config/", "suites/"),
                          suites_dir="mutable/suites", repo_config=repo / "config/autoresearch.json")
    assert judgetree.pinned_paths(cfg, base) == (["mutable/"], "suites")
    why = judgetree.launch_refusal(cfg, "t")
    assert why is not None and why.startswith("judge_tree: config/autoresearch.json modified in HEAD"), why
