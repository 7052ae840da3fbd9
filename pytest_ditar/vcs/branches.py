"""Branches and commits: what the judge changes in the user's history, through `vcs.hardened`.

It owns the local branches (which exist, where they point, making one and checking it out), the
commits the loop writes (a scratch repository's first commit, committing tracked changes), the
clean tree `dit-ar init` needs before it branches (the state directory ignored in
`.git/info/exclude`), and the two moves a verdict makes: reverting a discarded candidate to its
parent and putting a branch back. Every move is `--keep`, never `--hard`: where git would
overwrite a local change it refuses, and so does this, with one line saying how to finish by
hand. Reading state and refs is `vcs.queries`; every git command is run by `vcs.hardened`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from pytest_ditar.core.errors import DitarError
from pytest_ditar.vcs import hardened, queries

# ---- which branches there are, and where HEAD is -------------------------------------------------

def branch_commit(root: Path, branch: str) -> str | None:
    """The commit `branch` (a local branch's name) points at; None when it does not exist."""
    return queries.ref_commit(root, f"refs/heads/{branch}")


def branch_exists(root: Path, name: str) -> bool:
    return branch_commit(root, name) is not None


def branches(root: Path, prefix: str) -> list[str]:
    """The local branches whose names start with `prefix`, sorted; [] where there is no repository."""
    if hardened.find_repo(root) is None:
        return []
    out = hardened.git(root, "for-each-ref", "--format=%(refname:short)", f"refs/heads/{prefix}", what="list branches")
    return sorted(line for line in out.splitlines() if line.startswith(prefix))


def _branch(root: Path) -> str | None:
    """The branch HEAD is on; None when detached."""
    try:
        ref = hardened.git(root, "symbolic-ref", "-q", "HEAD").strip()
    except DitarError:
        return None
    return ref.removeprefix("refs/heads/") if ref.startswith("refs/heads/") else None


def _head(root: Path) -> tuple[str, str | None] | None:
    """HEAD's commit and its first parent; None before the first commit."""
    try:
        line = hardened.git(root, "log", "-1", "--format=%H %P", "HEAD").split()
    except DitarError:
        return None
    return (line[0], line[1] if len(line) > 1 else None) if line else None


# ---- commits, and the clean tree a branch starts from --------------------------------------------

def init_repo(path: Path, message: str, *, user: tuple[str, str], branch: str = "main") -> str:
    """`git init` at `path`, commit everything there as `user` (name, email); returns the commit."""
    status, out, err = hardened.execute(Path(path), ["init", "-q", "-b", branch])
    if status != 0:
        raise DitarError(f"git init {path} failed: {(err or out).strip()}")
    hardened.git(path, "add", "-A")
    return _commit_as(path, user, "-m", message)


def _commit_as(root: Path, user: tuple[str, str], *args: str) -> str:
    # -c user.*: a scratch repository's committer, whatever the machine's git config says
    hardened.git(root, "-c", f"user.name={user[0]}", "-c", f"user.email={user[1]}", "commit", "-q", *args)
    return hardened.git(root, "rev-parse", "HEAD").strip()


def commit_tracked(root: Path, message: str, *, user: tuple[str, str]) -> str:
    """`git commit -a -m message` as `user` (name, email): every tracked change; returns the commit."""
    return _commit_as(root, user, "-a", "-m", message)


def commit_index(root: Path, message: str, *, user: tuple[str, str]) -> str:
    """`git commit -m message` of what the index holds, as `user`; returns the commit."""
    return _commit_as(root, user, "-m", message)


def index_changed(root: Path) -> bool:
    """Whether the index differs from HEAD (`git diff --cached --quiet` says 1)."""
    status, _, _ = hardened.git_status(root, ["diff", "--cached", "--quiet", "--no-ext-diff"])
    return status != 0


def ensure_ignored(root: Path, entries: Iterable[str]) -> bool:
    """Make sure `entries` are git-ignored (via .git/info/exclude, which no commit can undo)."""
    changed = False
    repo = hardened.find_repo(root)
    if repo is None:
        return False
    exclude = repo.common_dir / "info" / "exclude"  # git reads it there for every worktree
    exclude.parent.mkdir(parents=True, exist_ok=True)
    text = exclude.read_text() if exclude.exists() else ""
    for e in entries:
        if e not in text.splitlines():
            text += ("" if text.endswith("\n") or not text else "\n") + e + "\n"
            changed = True
    if changed:
        exclude.write_text(text)
    return changed


def require_clean_repo(root: Path, ignore: Iterable[str]) -> queries.RepoState:
    """The state of a repository with a commit and a clean tree, after git-ignoring `ignore`.

    What `dit-ar init` needs before it branches: the state directory ignored first, so it never
    counts as an untracked change."""
    st = queries.state(root)
    if not st.is_repo or not st.head:
        raise DitarError(f"{root}: not a git repository with a commit (git init && git add -A && git commit first)")
    ensure_ignored(root, ignore)
    st = queries.state(root)
    if st.dirty_paths:
        raise DitarError(f"{root}: the tree is not clean ({', '.join(st.dirty_paths[:3])}); commit or stash first")
    return st


def create_branch(root: Path, name: str) -> None:
    if hardened.find_repo(root) is None:
        raise DitarError(f"{root}: not a git repository (run `git init` and commit first)")
    hardened.git(root, "checkout", "-q", *([name] if branch_exists(root, name) else ["-b", name]))


# ---- a verdict's moves: revert the candidate, put a branch back ----------------------------------

def revert_to_parent(root: Path, expected_head: str) -> str:
    """`git reset --keep HEAD^`, only if HEAD is still the candidate commit; returns the parent.

    --keep, never --hard: uncommitted changes and untracked files survive, and where a local
    change sits in a file the candidate commit touches, git refuses and so does this (DitarError
    saying how to finish by hand) instead of overwriting it."""
    if hardened.find_repo(root) is None:
        raise DitarError(f"{root}: not a git repository; nothing to revert")
    head, parent = _head(root) or ("", None)
    if head != expected_head:
        raise DitarError(f"HEAD moved during the run ({expected_head[:7]} -> {head[:7] or '(none)'}); not reverting")
    if not parent:
        raise DitarError("the candidate is the root commit; not reverting")
    status, out, err = hardened.git_status(root, ["reset", "-q", "--keep", parent])
    if status != 0:
        touched = set(queries.changed_files(root, parent, head))
        local = [p for p in queries.dirty_paths(root) if p in touched]
        if local:
            raise DitarError(f"uncommitted changes in files the candidate commit touches ({', '.join(local[:3])}): "
                             f"save them, then `git reset --keep {parent[:7]}` finishes the revert")
        said = (err or out).strip().splitlines()
        raise DitarError(f"git reset --keep {parent[:7]} refused ({said[0] if said else f'exit {status}'}): "
                         "fix that, then run it to finish the revert")
    return parent


def put_branch_back(root: Path, branch: str, target: str) -> None:
    """Point `branch` at `target` and check it out, keeping uncommitted changes (keep semantics).

    HEAD on `branch`: `git reset --keep target`. HEAD elsewhere (another branch, detached):
    `git checkout -B branch target`, which moves the branch only if the checkout succeeds. Where a
    local change sits in a file the move would overwrite, git refuses and so does this (DitarError,
    one line saying how to finish by hand); nothing is overwritten."""
    if hardened.find_repo(root) is None:
        raise DitarError(f"{root}: not a git repository; {branch} not put back")
    on_branch = _branch(root) == branch
    args = ["reset", "-q", "--keep", target] if on_branch else ["checkout", "-q", "-B", branch, target]
    status, out, err = hardened.git_status(root, args)
    if status == 0:
        return
    by_hand = f"git reset --keep {target[:7]}" if on_branch else f"git checkout -B {branch} {target[:7]}"
    dirty = queries.dirty_paths(root)
    touched = set(queries.changed_files(root, target, "HEAD")) if dirty else set()
    local = [p for p in dirty if p in touched] or dirty
    if local:
        raise DitarError(f"uncommitted changes ({', '.join(local[:3])}) block putting {branch} back on {target[:7]}: "
                         f"save them, then `{by_hand}` finishes it")
    said = (err or out).strip().splitlines()
    raise DitarError(f"`{by_hand}` refused ({said[0] if said else f'exit {status}'}): fix that, then run it to finish")
