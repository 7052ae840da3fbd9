"""The judge runs no code the repository controls, and trusts files by content, not by git's view
of them (issue 24): every git command of vcs (all run by vcs.hardened) with hooks, fsmonitor, the
repository's filter drivers and configured hooks off; the champion's worktree checked by hashing
its files."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ditar.vcs import branches, hardened, queries, trees

USER = ("t", "t@localhost")
HOOKS = ("pre-commit", "prepare-commit-msg", "commit-msg", "post-commit", "post-checkout", "post-merge",
         "post-rewrite", "reference-transaction", "post-index-change", "pre-auto-gc")


def _program(marker: Path, name: str) -> str:
    return (f"#!{sys.executable}\nimport json, sys\nif 'reference-transaction' in sys.argv[0]: sys.stdin.read()\n"
            f"open({str(marker)!r}, 'a').write(json.dumps([{name!r}, sys.argv]) + '\\n')\n"
            f"sys.exit(1 if sys.argv[1:2] == ['2'] else 0)\n")


def _raw_git(root: Path, *args: str) -> str:
    res = subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", *args], cwd=root,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def _plant_everything(root: Path, marker: Path) -> None:
    """Every program a repository can make git run on the judge's commands."""
    programs = root.parent / "programs"
    programs.mkdir(exist_ok=True)
    for name in (*HOOKS, "fsmonitor", "filter", "configured-hook"):
        (programs / name).write_text(_program(marker, name))
        (programs / name).chmod(0o755)
    hooks = root / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    for name in HOOKS:
        (hooks / name).write_text(_program(marker, name))
        (hooks / name).chmod(0o755)
    with open(root / ".git" / "config", "a") as fh:
        fh.write(f"[core]\n\tfsmonitor = {programs / 'fsmonitor'}\n"
                 f"[filter \"sneaky\"]\n\tclean = {programs / 'filter'}\n\tsmudge = {programs / 'filter'}\n\trequired\n"
                 f"[hook \"sneaky\"]\n\tevent = reference-transaction\n\tevent = post-checkout\n"
                 f"\tcommand = {programs / 'configured-hook'}\n"
                 "[gc]\n\tauto = 1\n")
    (root / ".git" / "info").mkdir(exist_ok=True)
    (root / ".git" / "info" / "attributes").write_text("* filter=sneaky\n")


@pytest.fixture
def two_commit_repo(tmp_path):
    root = tmp_path / "r"
    root.mkdir()
    (root / "a.txt").write_text("a\n")
    (root / "b.txt").write_text("b\n")
    first = branches.init_repo(root, "first", user=USER)
    (root / "a.txt").write_text("a2\n")
    return root, first, branches.commit_tracked(root, "second", user=USER)


@pytest.fixture
def planted(two_commit_repo, tmp_path):
    root, first, second = two_commit_repo
    marker = tmp_path / "ran.jsonl"
    _plant_everything(root, marker)
    subprocess.run(["git", "status"], cwd=root, capture_output=True)  # plain git runs them: the plant works
    assert marker.is_file(), "the planted programs do not run under plain git"
    marker.unlink()
    return root, first, second, marker


def test_no_judge_git_command_runs_a_hook_fsmonitor_filter_or_configured_hook(tmp_path, planted):
    root, first, second, marker = planted
    st = queries.state(root)
    assert (st.head, st.branch, st.dirty_paths) == (second, "main", ())
    assert queries.changed_files(root, first, second) == ["a.txt"]
    assert "a2" in queries.diff_patch(root, first, second) and queries.commit_message(root).strip() == "second"
    assert queries.is_ancestor(root, first)
    trees.add_worktree(root, tmp_path / "wt", first)  # post-checkout, the smudge filter
    assert trees.content_changes(root, first, tmp_path / "wt") == []
    trees.add_branch_worktree(root, tmp_path / "wt2", "other", second)
    assert {w["branch"] for w in trees.list_worktrees(root)} >= {"main", "other"}
    (root / "b.txt").write_text("b, edited\n")
    assert queries.dirty_paths(root) == ["b.txt"]  # the clean filter would have answered here
    assert branches.revert_to_parent(root, second) == first  # reference-transaction, post-index-change
    branches.put_branch_back(root, "main", second)
    branches.create_branch(root, "elsewhere")  # post-checkout
    branches.put_branch_back(root, "main", first)  # checkout -B
    (root / "a.txt").write_text("a3\n")
    branches.commit_tracked(root, "third", user=USER)  # pre-commit, commit-msg, post-commit, gc --auto
    files = tmp_path / "state"
    files.mkdir()
    (files / "x").write_text("x\n")
    c = trees.save_tree(root, "refs/ditar/t", {"x": files / "x"}, "backup")  # update-ref
    assert dict(trees.read_tree(root, c)) == {"x": b"x\n"}
    branches.ensure_ignored(root, ["/.autoresearch/"])
    assert not marker.exists(), "the judge's git ran: " + marker.read_text()


def test_a_replace_ref_does_not_change_what_a_commit_holds(two_commit_repo):
    root, first, second = two_commit_repo
    _raw_git(root, "replace", first, second)  # git's view of `first` is now `second`'s
    assert _raw_git(root, "show", f"{first}:a.txt") == "a2"
    assert dict(trees.read_tree(root, first)) == {"a.txt": b"a\n", "b.txt": b"b\n"}
    assert trees.tree_blobs(root, first) != trees.tree_blobs(root, second)


@pytest.mark.parametrize("flag", ["--assume-unchanged", "--skip-worktree"])
def test_an_index_flag_cannot_hide_an_edit_from_content_changes(tmp_path, two_commit_repo, flag):
    root, first, _ = two_commit_repo
    wt = tmp_path / "checkout"
    _raw_git(root, "worktree", "add", "-q", "--detach", str(wt), first)
    _raw_git(wt, "update-index", flag, "a.txt")
    (wt / "a.txt").write_text("a, slowed down\n")
    assert _raw_git(wt, "status", "--porcelain") == ""  # git's view: clean
    assert trees.content_changes(root, first, wt) == ["a.txt modified"]


def test_content_changes_names_modified_missing_added_and_ignored_files(tmp_path, two_commit_repo):
    root, _, second = two_commit_repo
    (root / ".gitignore").write_text("*.log\n")
    sub = root / "mutable"
    sub.mkdir()
    (sub / "p.py").write_text("x = 1\n")
    (root / "link").symlink_to("a.txt")
    _raw_git(root, "add", "-A")
    second = branches.commit_tracked(root, "third", user=USER)
    assert trees.content_changes(root, second, root) == []
    (sub / "p.py").write_text("x = 2\n")
    (sub / "helper.log").write_text("ignored, importable\n")
    (sub / "__pycache__").mkdir()
    (sub / "__pycache__" / "p.cpython-311.pyc").write_bytes(b"\0")
    (root / "b.txt").unlink()
    (root / "link").unlink()
    (root / "link").symlink_to("b.txt")
    assert trees.content_changes(root, second, root) == [
        "b.txt missing", "link modified", "mutable/__pycache__/p.cpython-311.pyc added", "mutable/helper.log added",
        "mutable/p.py modified"]
    assert trees.content_changes(root, second, root, under=["mutable/"], skip=["__pycache__"]) == [
        "mutable/helper.log added", "mutable/p.py modified"]


def test_line_ending_conversion_on_checkout_is_not_a_change(tmp_path, two_commit_repo):
    root, _, _ = two_commit_repo
    (root / ".gitattributes").write_text("*.txt text eol=crlf\n")
    _raw_git(root, "add", "-A")
    head = branches.commit_tracked(root, "crlf", user=USER)
    trees.add_worktree(root, tmp_path / "wt", head)
    assert (tmp_path / "wt" / "a.txt").read_bytes() == b"a2\r\n"  # not the blob's bytes
    assert trees.content_changes(root, head, tmp_path / "wt") == []
    (tmp_path / "wt" / "a.txt").write_bytes(b"a3\r\n")
    assert trees.content_changes(root, head, tmp_path / "wt") == ["a.txt modified"]


def test_every_git_command_line_carries_the_switches(monkeypatch, two_commit_repo):
    """One place runs git (vcs.hardened._run); whatever calls it, the switches come first."""

    root, _, _ = two_commit_repo
    seen = []
    real = hardened.subprocess.run

    def spy(command, *args, **kwargs):
        seen.append(list(command))
        return real(command, *args, **kwargs)

    monkeypatch.setattr(hardened.subprocess, "run", spy)
    queries.state(root)
    queries.changed_files(root, "HEAD~1")
    with open(root / ".git/config", "a") as fh:
        fh.write('[filter "x"]\n\tclean = false\n')
    queries.dirty_paths(root)
    runs = [c for c in seen if c[0] == "git" and "config" not in c[1:c.index("-c") if "-c" in c else None]]
    assert runs
    for cmd in seen:
        if cmd[0] != "git":
            continue
        assert cmd[1:3] == ["--no-pager", "--no-replace-objects"], cmd
        for kv in ("core.hooksPath=/dev/null", "core.fsmonitor=false", "protocol.allow=never", "commit.gpgSign=false"):
            assert kv in cmd, (kv, cmd)
    assert any("filter.x.clean=" in c and "filter.x.process=" in c for c in seen)
    assert json.dumps(seen)  # plain strings only
    assert os.environ.get("GIT_NO_REPLACE_OBJECTS") is None  # the judge's own environment is left alone


def test_only_vcs_hardened_starts_a_process():
    """The other vcs modules say what to ask git and call vcs.hardened for every command: none of
    them imports a way to start a process, so none can run git without the switches."""
    spawners = {"subprocess", "asyncio", "multiprocessing", "pty", "pexpect", "sh", "plumbum"}
    os_spawn = ("system", "popen", "exec", "spawn", "posix_spawn", "fork")
    others = sorted(p for p in Path(hardened.__file__).parent.glob("*.py") if p.name != "hardened.py")
    assert {p.stem for p in others} >= {"queries", "branches", "trees"}
    for p in others:
        tree = ast.parse(p.read_text(), str(p))
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "os"
                     for a in n.names if a.name.startswith(os_spawn)}
        os_names = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
                    if a.name == "os"}
        calls = [ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
                 and n.func.value.id in os_names and n.func.attr.startswith(os_spawn)]
        assert not (imported & spawners) and not calls and not any(i.startswith(os_spawn) for i in imported), \
            (p.name, sorted(imported & spawners), calls)


def test_pins_name_the_file_and_key_and_leave_remotes_and_upstreams_alone(two_commit_repo):
    from pytest_ditar.loop.integrity import gitpins

    root, _, _ = two_commit_repo
    (root / ".git/hooks").mkdir(exist_ok=True)
    (root / ".git/hooks/notes").write_text("#!/bin/sh\n")
    (root / ".git/hooks/notes").chmod(0o644)
    manifest = {"git_pins": gitpins.pins(root)}
    _raw_git(root, "remote", "add", "origin", "https://example.invalid/x.git")  # what push -u and the like write
    _raw_git(root, "config", "branch.main.remote", "origin")
    _raw_git(root, "config", "branch.main.merge", "refs/heads/main")
    _raw_git(root, "config", "user.name", "someone else")
    assert gitpins.refusal(root, manifest) is None and gitpins.changed_during(root, manifest["git_pins"]) is None
    _raw_git(root, "config", "core.fsmonitor", "true")
    hook = root / ".git/hooks/post-checkout"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    assert gitpins.refusal(root, manifest) == (
        ".git/config (core.fsmonitor added), .git/hooks/post-checkout (added) changed since the baseline: restore them "
        "(git config --unset-all core.fsmonitor; rm .git/hooks/post-checkout), or re-run `dit-ar baseline --force` "
        "if you changed it yourself")
    _raw_git(root, "config", "--unset-all", "core.fsmonitor")
    hook.unlink()
    (root / ".git/hooks/notes").chmod(0o755)  # made a program: the executable bit is pinned too
    assert gitpins.changed_during(root, manifest["git_pins"]) == ".git/hooks/notes changed during the run (changed)"


def test_an_index_flag_cannot_hide_an_edit_of_the_candidates_own_files(two_commit_repo):
    from pytest_ditar.loop.integrity.guards import hidden_refusal

    root, _, _ = two_commit_repo
    (root / "mutable").mkdir()
    (root / "mutable/pipeline.py").write_text("x = 1\n")
    (root / ".gitignore").write_text("*.log\n__pycache__/\n")
    _raw_git(root, "add", "-A")
    branches.commit_tracked(root, "mutable", user=USER)
    assert hidden_refusal(root, queries.state(root), ["mutable/"]) is None
    (root / "mutable/__pycache__").mkdir()
    (root / "mutable/__pycache__/pipeline.cpython-311.pyc").write_bytes(b"\0")  # the interpreter's, not the commit's
    assert hidden_refusal(root, queries.state(root), ["mutable/"]) is None
    _raw_git(root, "update-index", "--skip-worktree", "mutable/pipeline.py")
    (root / "mutable/pipeline.py").write_text("x = 2\n")
    st = queries.state(root)
    assert st.dirty_paths == ()  # git's view: clean
    assert hidden_refusal(root, st, ["mutable/"]) == (
        f"guard clean_tree: mutable/pipeline.py is modified against HEAD {st.head[:7]} though git status shows no "
        "change (an index flag: assume-unchanged or skip-worktree): git update-index --no-assume-unchanged "
        "--no-skip-worktree mutable/pipeline.py, then commit or stash it")
    _raw_git(root, "update-index", "--no-skip-worktree", "mutable/pipeline.py")
    # the commit's bytes put back by hand: `git checkout --` may trust the index's stat data (same
    # size, same second) and leave the edit in place, a racy-git case that CI's filesystem met
    (root / "mutable/pipeline.py").write_text("x = 1\n")
    (root / "mutable/helper.log").write_text("import me\n")
    assert hidden_refusal(root, queries.state(root), ["mutable/"]) == (
        f"guard clean_tree: mutable/helper.log is not in HEAD {st.head[:7]} and git ignores it, yet the candidate can "
        "import it: commit it or delete it")
