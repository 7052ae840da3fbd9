"""loop.integrity.roles: every role's code written from git objects, regular files only (issue 38)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from pytest_ditar.loop.integrity import roles


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.email=t@l", "-c", "user.name=t", *args], cwd=root, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "mutable/sub").mkdir(parents=True)
    (root / "mutable/pipeline.py").write_text("def build(spec):\n    return None\n")
    (root / "mutable/sub/helper.py").write_text("X = 1\n")
    (root / "mutable/run.sh").write_text("#!/bin/sh\n")
    os.chmod(root / "mutable/run.sh", 0o755)
    (root / "other.txt").write_text("not mutable\n")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "one")
    return root


def test_a_commit_is_written_from_its_blobs_read_only(repo: Path, tmp_path: Path):
    head = _git(repo, "rev-parse", "HEAD")
    (repo / "mutable/pipeline.py").write_text("edited in the working tree\n")  # never what a commit's role runs
    (repo / "mutable/untracked.py").write_text("not committed\n")
    code = roles.from_commit(repo, head, ["mutable/"], "mutable", tmp_path / "out")
    assert code.package == tmp_path / "out/mutable" and code.source == head
    assert (code.package / "pipeline.py").read_text() == "def build(spec):\n    return None\n"
    assert not (code.package / "untracked.py").exists() and not (tmp_path / "out/other.txt").exists()
    assert [p for p, _ino, _ct in code.files] == ["mutable/pipeline.py", "mutable/run.sh", "mutable/sub/helper.py"]
    assert os.stat(code.package / "run.sh").st_mode & 0o777 == 0o555
    assert os.stat(code.package / "pipeline.py").st_mode & 0o777 == 0o444
    assert roles.changed(code) == []
    os.chmod(code.package / "sub", 0o755)
    (code.package / "sub/planted.py").write_text("x")
    original = (code.package / "pipeline.py").read_text()
    os.chmod(code.package / "pipeline.py", 0o644)
    (code.package / "pipeline.py").write_text(original + "import time\n")  # edited, imported ...
    (code.package / "pipeline.py").write_text(original)  # ... and put back before anyone looks
    assert roles.changed(code) == ["mutable/pipeline.py", "mutable/sub/planted.py"]


def test_a_link_or_a_submodule_under_a_mutable_path_is_named(repo: Path, tmp_path: Path):
    outside = tmp_path / "outside.py"
    outside.write_text("SPEED = 1\n")
    (repo / "mutable/link.py").symlink_to(outside)
    _git(repo, "add", "mutable/link.py")
    _git(repo, "update-index", "--add", "--cacheinfo", f"160000,{_git(repo, 'rev-parse', 'HEAD')},mutable/mod")
    (repo / "link_outside_mutable.py").symlink_to(outside)  # not a mutable path: not the roles' concern
    _git(repo, "add", "link_outside_mutable.py")
    _git(repo, "commit", "-qm", "links")
    head = _git(repo, "rev-parse", "HEAD")
    assert roles.irregular(repo, head, ["mutable/"]) == ["mutable/link.py is a symbolic link",
                                                         "mutable/mod is a submodule"]
    with pytest.raises(roles.IrregularEntry, match=r"mutable/link.py is a symbolic link.*regular files only"):
        roles.from_commit(repo, head, ["mutable/"], "mutable", tmp_path / "out")


def test_the_working_tree_is_copied_for_try_and_a_link_there_refuses(repo: Path, tmp_path: Path):
    (repo / "mutable/pipeline.py").write_text("uncommitted\n")
    (repo / "mutable/__pycache__").mkdir()
    (repo / "mutable/__pycache__/x.pyc").write_bytes(b"\0")
    code = roles.from_worktree(repo, ["mutable/"], "mutable", tmp_path / "out")
    assert (code.package / "pipeline.py").read_text() == "uncommitted\n" and code.source == "working tree"
    assert not (code.package / "__pycache__").exists()
    (repo / "mutable/link").symlink_to(tmp_path)
    with pytest.raises(roles.IrregularEntry, match="mutable/link is a symbolic link"):
        roles.from_worktree(repo, ["mutable/"], "mutable", tmp_path / "again")


def test_under_any():
    assert roles.under_any("mutable/x.py", ["mutable/"]) and roles.under_any("mutable", ["mutable/"])
    assert not roles.under_any("mutablex/y.py", ["mutable/"]) and not roles.under_any("suites/a", ["mutable/"])
