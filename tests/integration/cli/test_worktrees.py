"""Parallel research: `dit-ar init --tag T --gpu N` worktrees and `dit-ar status --all`."""
import json

import torch  # noqa: F401 - preloaded: pytester drops modules first imported inside a test, and torch cannot be re-imported

from pytest_ditar.loop.integrity.worktrees import bound_device, bound_gpu


def test_init_with_gpu_makes_worktrees_and_status_all_lists_them(project):
    proj = project
    res = proj.ditar("init", "--tag", "t")
    assert res.returncode == 0, res.stderr
    for tag, gpu in (("a", 0), ("b", 1)):
        res = proj.ditar("init", "--tag", tag, "--gpu", str(gpu))
        assert res.returncode == 0, res.stderr
        wt = proj.root.parent / f"{proj.root.name}-{tag}"
        assert f"worktree {wt} on autoresearch/{tag}, bound to cuda:{gpu}" in res.stdout
        assert proj.git("-C", str(wt), "rev-parse", "--abbrev-ref", "HEAD") == f"autoresearch/{tag}"
        state = wt / ".autoresearch" / tag
        assert json.loads((state / "session.json").read_text())["gpu"] == gpu and bound_gpu(state) == gpu
        assert bound_device(state) is None  # CPU here: the binding applies when CUDA is there
    assert proj.git("rev-parse", "--abbrev-ref", "HEAD") == "autoresearch/t"  # the main checkout did not move
    res = proj.ditar("init", "--tag", "a", "--gpu", "0")  # again: idempotent, same worktree
    assert res.returncode == 0, res.stderr
    res = proj.ditar("status", "--all")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split()[:4] == ["tag", "branch", "gpu", "champion"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["a"][1:3] == ["autoresearch/a", "0"] and rows["b"][1:3] == ["autoresearch/b", "1"]
    assert rows["t"][1:3] == ["autoresearch/t", "-"] and rows["a"][-1].endswith(f"{proj.root.name}-a")
    data = json.loads(proj.ditar("status", "--all", "--json").stdout)
    assert {r["tag"] for r in data} == {"t", "a", "b"} and all(r["counts"]["KEEP"] == 0 for r in data)


def test_a_worktrees_baseline_runs_its_workers_in_the_sandbox(project, model_cache):
    """The worktree's git folder lies inside the main repository's, and both are hidden from every
    worker: before, the nested mask broke bwrap ("Can't remount readonly") and no worker of a
    `--gpu` worktree started."""
    from dataclasses import replace

    proj = project
    assert proj.ditar("init", "--tag", "t").returncode == 0
    assert proj.ditar("init", "--tag", "a", "--gpu", "0").returncode == 0
    wt = replace(proj, root=proj.root.parent / f"{proj.root.name}-a")
    res = wt.ditar("baseline")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "lane latency_b1: median" in res.stdout and "sandbox off" not in res.stdout


def test_a_branch_checked_out_elsewhere_is_refused(project):
    proj = project
    assert proj.ditar("init", "--tag", "a", "--gpu", "0").returncode == 0
    res = proj.ditar("init", "--tag", "a", "--gpu", "1", "--worktree", str(proj.root.parent / "other"))
    assert res.returncode == 2 and "already checked out" in res.stderr


def test_vcs_worktree_and_commit_operations(tmp_path):
    """The git operations init and status --all are built on (vcs.branches, queries and trees, each
    running git through vcs.hardened)."""
    import pytest

    from pytest_ditar.core.errors import DitarError
    from pytest_ditar.vcs import branches, queries, trees

    root, user = tmp_path / "r", ("t", "t@localhost")
    root.mkdir()
    (root / "a.txt").write_text("a\n")
    first = branches.init_repo(root, "first", user=user)
    (root / "a.txt").write_text("b\n")
    assert queries.dirty_paths(root) == ["a.txt"]
    with pytest.raises(DitarError, match="the tree is not clean"):
        branches.require_clean_repo(root, ["/.autoresearch/"])
    second = branches.commit_tracked(root, "second\n\nDitar-Class: exact", user=user)
    assert queries.commit_message(root).splitlines() == ["second", "", "Ditar-Class: exact"]
    assert branches.require_clean_repo(root, ["/.autoresearch/"]).head == second
    assert queries.changed_files(root, first) == ["a.txt"] and queries.is_ancestor(root, first)
    assert not queries.is_ancestor(root, second, first) and not queries.is_ancestor(root, "no-such-rev")
    assert queries.diff_patch(root, first, second).endswith("\n")
    trees.add_branch_worktree(root, tmp_path / "wt", "autoresearch/x", first)
    trees.add_worktree(root, tmp_path / "det", second)
    wts = {w["path"]: w for w in trees.list_worktrees(root)}
    assert wts[str(tmp_path / "wt")]["branch"] == "autoresearch/x" and wts[str(tmp_path / "wt")]["head"] == first
    assert wts[str(tmp_path / "det")]["branch"] is None and branches.branch_exists(root, "autoresearch/x")
    with pytest.raises(DitarError, match="git diff nope..HEAD failed: fatal"):
        queries.changed_files(root, "nope")
