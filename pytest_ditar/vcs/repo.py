"""Git operations (GitPython). The only module that changes the repository."""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from pytest_ditar.core.errors import DitarError


def _repo(root: Path):
    import git

    try:
        return git.Repo(root, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None


@dataclass(frozen=True)
class RepoState:
    is_repo: bool
    branch: str | None  # None when detached or not a repo
    head: str | None
    parent: str | None
    dirty_paths: tuple[str, ...]  # tracked changes and untracked-not-ignored files
    toplevel: Path | None


def state(root: Path) -> RepoState:
    repo = _repo(root)
    if repo is None:
        return RepoState(False, None, None, None, (), None)
    try:
        head = repo.head.commit
    except ValueError:  # no commits yet
        return RepoState(True, None, None, None, (), Path(repo.working_tree_dir))
    branch = None if repo.head.is_detached else repo.active_branch.name
    parent = head.parents[0].hexsha if head.parents else None
    return RepoState(True, branch, head.hexsha, parent, tuple(dirty_paths(root)), Path(repo.working_tree_dir))


def dirty_paths(root: Path) -> list[str]:
    """Porcelain status: tracked modifications and untracked files that are not ignored."""
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=root,
                         capture_output=True, text=True, check=True).stdout
    return [line[3:] for line in out.splitlines() if line.strip()]


def changed_files(root: Path, base: str, head: str = "HEAD") -> list[str]:
    out = subprocess.run(["git", "diff", "--name-only", base, head], cwd=root, capture_output=True, text=True)
    if out.returncode != 0:
        raise DitarError(f"git diff {base}..{head} failed: {out.stderr.strip()}")
    return [p for p in out.stdout.splitlines() if p]


def is_ancestor(root: Path, ancestor: str, head: str = "HEAD") -> bool:
    return subprocess.run(["git", "merge-base", "--is-ancestor", ancestor, head], cwd=root).returncode == 0


def commit_message(root: Path, rev: str = "HEAD") -> str:
    return subprocess.run(["git", "log", "-1", "--format=%B", rev], cwd=root, capture_output=True, text=True).stdout


def diff_patch(root: Path, base: str, head: str) -> str:
    return subprocess.run(["git", "format-patch", "--stdout", f"{base}..{head}"], cwd=root,
                          capture_output=True, text=True).stdout


def commits_between(root: Path, base: str, head: str = "HEAD") -> list[str]:
    out = subprocess.run(["git", "rev-list", "--reverse", f"{base}..{head}"], cwd=root, capture_output=True, text=True)
    return [c for c in out.stdout.split() if c]


def reset_hard_to_parent(root: Path, expected_head: str) -> str:
    """`git reset --hard HEAD^`, only if HEAD is still the candidate commit.

    Untracked files are never touched (reset --hard leaves them alone; no clean)."""
    repo = _repo(root)
    if repo is None:
        raise DitarError(f"{root}: not a git repository; nothing to revert")
    head = repo.head.commit
    if head.hexsha != expected_head:
        raise DitarError(f"HEAD moved during the run ({expected_head[:7]} -> {head.hexsha[:7]}); not reverting")
    if not head.parents:
        raise DitarError("the candidate is the root commit; not reverting")
    repo.git.reset("--hard", head.parents[0].hexsha)
    return head.parents[0].hexsha


def create_branch(root: Path, name: str) -> None:
    repo = _repo(root)
    if repo is None:
        raise DitarError(f"{root}: not a git repository (run `git init` and commit first)")
    if name in [h.name for h in repo.heads]:
        repo.git.checkout(name)
    else:
        repo.git.checkout("-b", name)


def add_worktree(root: Path, path: Path, rev: str) -> None:
    subprocess.run(["git", "worktree", "add", "--detach", "--force", str(path), rev], cwd=root,
                   capture_output=True, text=True, check=True)


def remove_worktree(root: Path, path: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=root, capture_output=True, text=True)


def ensure_ignored(root: Path, entries: Iterable[str]) -> bool:
    """Make sure `entries` are git-ignored (via .git/info/exclude, which no commit can undo)."""
    changed = False
    repo = _repo(root)
    if repo is None:
        return False
    exclude = Path(repo.git_dir) / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    text = exclude.read_text() if exclude.exists() else ""
    for e in entries:
        if e not in text.splitlines():
            text += ("" if text.endswith("\n") or not text else "\n") + e + "\n"
            changed = True
    if changed:
        exclude.write_text(text)
    return changed
