"""Git operations, through GitPython. The only module of the package that runs git.

Porcelain that GitPython has no object API for (status, diff --name-only, format-patch,
worktree) goes through its command wrapper (`repo.git.execute`); a failure becomes a DitarError
carrying git's own stderr, one line for the user.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from pytest_ditar.core.errors import DitarError


def _repo(root: Path):
    import git

    try:
        return git.Repo(root, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None


def _git(root: Path, *args: str, what: str | None = None, **kwargs: Any) -> str:
    """stdout of `git <args>` in the repository holding `root`.

    DitarError "<what> failed: <git's stderr>" when there is no repository or git fails."""
    what = what or f"git {' '.join(args)}"
    repo = _repo(root)
    if repo is None:
        raise DitarError(f"{what} failed: {root} is not a git repository")
    status, out, err = repo.git.execute(["git", *args], with_extended_output=True, with_exceptions=False, **kwargs)
    if status != 0:  # some refusals ("nothing to commit") are printed on stdout
        raise DitarError(f"{what} failed: {(err or out).strip()}")
    return out


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
    out = _git(root, "status", "--porcelain", "--untracked-files=all")
    return [line[3:] for line in out.splitlines() if line.strip()]


def require_clean_repo(root: Path, ignore: Iterable[str]) -> RepoState:
    """The state of a repository with a commit and a clean tree, after git-ignoring `ignore`.

    What `dit-ar init` needs before it branches: the state directory ignored first, so it never
    counts as an untracked change."""
    st = state(root)
    if not st.is_repo or not st.head:
        raise DitarError(f"{root}: not a git repository with a commit (git init && git add -A && git commit first)")
    ensure_ignored(root, ignore)
    st = state(root)
    if st.dirty_paths:
        raise DitarError(f"{root}: the tree is not clean ({', '.join(st.dirty_paths[:3])}); commit or stash first")
    return st


def changed_files(root: Path, base: str, head: str = "HEAD") -> list[str]:
    out = _git(root, "diff", "--name-only", base, head, what=f"git diff {base}..{head}")
    return [p for p in out.splitlines() if p]


def is_ancestor(root: Path, ancestor: str, head: str = "HEAD") -> bool:
    """False also when either revision is unknown: an unprovable ancestry fails the guard."""
    try:
        _git(root, "merge-base", "--is-ancestor", ancestor, head)
    except DitarError:
        return False
    return True


def commit_message(root: Path, rev: str = "HEAD") -> str:
    """The full message of `rev`; "" when there is none (no repository, no commit)."""
    try:
        return _git(root, "log", "-1", "--format=%B", rev)
    except DitarError:
        return ""


def diff_patch(root: Path, base: str, head: str) -> str:
    """`git format-patch --stdout base..head`, byte for byte (a patch needs its last newline)."""
    try:
        return _git(root, "format-patch", "--stdout", f"{base}..{head}", strip_newline_in_stdout=False)
    except DitarError:
        return ""


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


def branch_exists(root: Path, name: str) -> bool:
    repo = _repo(root)
    return repo is not None and name in [h.name for h in repo.heads]


def add_worktree(root: Path, path: Path, rev: str) -> None:
    """A detached checkout of `rev` at `path` (the champion's or the baseline's code)."""
    _git(root, "worktree", "add", "--detach", "--force", str(path), rev)


def add_branch_worktree(root: Path, path: Path, branch: str, start: str) -> None:
    """A checkout of `branch` at `path`; the branch is created at `start` when it does not exist."""
    if branch_exists(root, branch):
        _git(root, "worktree", "add", str(path), branch)
    else:
        _git(root, "worktree", "add", "-b", branch, str(path), start)


def list_worktrees(root: Path) -> list[dict[str, Any]]:
    """`git worktree list --porcelain` as dicts: path, head, branch (None when detached)."""
    out, cur = [], {}
    for line in _git(root, "worktree", "list", "--porcelain").splitlines() + [""]:
        if not line:
            if cur:
                out.append(cur)
            cur = {}
            continue
        key, _, val = line.partition(" ")
        if key == "worktree":
            cur = {"path": val, "head": None, "branch": None}
        elif key == "HEAD":
            cur["head"] = val
        elif key == "branch":
            cur["branch"] = val.removeprefix("refs/heads/")
    return out


def _commit_as(root: Path, user: tuple[str, str], *args: str) -> str:
    # -c user.*: a scratch repository's committer, whatever the machine's git config says
    _git(root, "-c", f"user.name={user[0]}", "-c", f"user.email={user[1]}", "commit", "-q", *args)
    return _repo(root).head.commit.hexsha


def init_repo(path: Path, message: str, *, user: tuple[str, str], branch: str = "main") -> str:
    """`git init` at `path`, commit everything there as `user` (name, email); returns the commit."""
    import git

    git.Repo.init(path, initial_branch=branch)
    _git(path, "add", "-A")
    return _commit_as(path, user, "-m", message)


def commit_tracked(root: Path, message: str, *, user: tuple[str, str]) -> str:
    """`git commit -a -m message` as `user` (name, email): every tracked change; returns the commit."""
    return _commit_as(root, user, "-a", "-m", message)


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
