"""Queries: what the repository holds, read through the hardened runner (`vcs.hardened`).

It owns the questions the judge asks git and nothing it changes: the working tree's state (HEAD,
its parent and branch, the dirty paths) and pytest-benchmark's commit info; history (the files a
commit range changes, ancestry, a commit's message, a range as a patch); refs (which exist,
where they point, whether a commit is here); and where git keeps its own files (the git
directories, the repository's config entries and hook files, which loop.integrity.gitpins pins). Every
question is a git command run by `hardened`; branches, worktrees and tree objects are
`vcs.branches` and `vcs.trees`.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_ditar.core.errors import DitarError
from pytest_ditar.vcs import hardened

# ---- the working tree's state --------------------------------------------------------------------

@dataclass(frozen=True)
class RepoState:
    is_repo: bool
    branch: str | None  # None when detached or not a repo
    head: str | None
    parent: str | None
    dirty_paths: tuple[str, ...]  # tracked changes and untracked-not-ignored files
    toplevel: Path | None
    untracked: tuple[str, ...] = ()  # the untracked-not-ignored part of dirty_paths


def state(root: Path) -> RepoState:
    # one rev-parse for the working tree, HEAD, its parents and the branch (it runs no program)
    status, out = hardened.execute_fixed(Path(root), ["rev-parse", "--show-toplevel", "HEAD", "HEAD^@",
                                                      "--symbolic-full-name", "HEAD"])
    lines = out.splitlines()
    if status != 0 or len(lines) < 3:  # no repository, a bare one, or no commits yet
        repo = hardened.find_repo(root)
        return RepoState(repo is not None, None, None, None, (), repo.toplevel if repo else None)
    top, head, parents, ref = Path(lines[0]), lines[1], lines[2:-1], lines[-1]
    branch = ref.removeprefix("refs/heads/") if ref.startswith("refs/heads/") else None
    entries = _status(top)
    return RepoState(True, branch, head, parents[0] if parents else None, tuple(p for _, p in entries), top,
                     tuple(p for code, p in entries if code == "??"))


def _status(root: Path) -> list[tuple[str, str]]:
    """Porcelain status as (two-letter code, path): tracked changes and untracked, not ignored files."""
    out = hardened.git(root, "status", "--porcelain", "--untracked-files=all")
    return [(line[:2], line[3:]) for line in out.splitlines() if line.strip()]


def dirty_paths(root: Path) -> list[str]:
    """Porcelain status: tracked modifications and untracked files that are not ignored."""
    return [p for _, p in _status(root)]


def commit_info(root: Path, project: str | None = None) -> dict[str, Any]:
    """What pytest-benchmark records about the code it timed, in its own keys (its
    `get_commit_info`, without running plain git): id, time, author_time, dirty (tracked changes),
    project (the origin's name, else the folder's), branch."""
    st = state(root)
    info: dict[str, Any] = {"id": "unversioned", "time": None, "author_time": None, "dirty": False,
                            "project": project or Path(root).resolve().name, "branch": "(unknown)"}
    if not st.is_repo or not st.head:
        return info
    try:
        times: list[str | None] = list(hardened.git(root, "log", "-1", "--format=%cI%n%aI", st.head)
                                       .splitlines()) or [None]
    except DitarError:
        times = [None]
    origin = next((v or "" for _, k, v in repository_config(root) if k == "remote.origin.url"), "")
    names = [p for p in re.split(r"[/:\s\\]|\.git", origin) if p]
    return {**info, "id": st.head, "time": times[0], "author_time": times[-1],
            "dirty": any(p not in st.untracked for p in st.dirty_paths),
            "project": project or (names[-1] if names else Path(st.toplevel or root).name),
            "branch": st.branch or "(detached head)"}


# ---- history: diffs, ancestry, messages, patches -------------------------------------------------

def changed_files(root: Path, base: str, head: str = "HEAD") -> list[str]:
    out = hardened.git(root, "diff", "--no-ext-diff", "--no-textconv", "--name-only", base, head,
                       what=f"git diff {base}..{head}")
    return [p for p in out.splitlines() if p]


def is_ancestor(root: Path, ancestor: str, head: str = "HEAD") -> bool:
    """False also when either revision is unknown: an unprovable ancestry fails the guard."""
    try:
        hardened.git(root, "merge-base", "--is-ancestor", ancestor, head)
    except DitarError:
        return False
    return True


def commit_message(root: Path, rev: str = "HEAD") -> str:
    """The full message of `rev`; "" when there is none (no repository, no commit)."""
    try:
        return hardened.git(root, "log", "-1", "--format=%B", rev)
    except DitarError:
        return ""


def diff_patch(root: Path, base: str, head: str) -> str:
    """`git format-patch --stdout base..head`, byte for byte (a patch needs its last newline)."""
    try:
        return hardened.git(root, "format-patch", "--no-ext-diff", "--no-textconv", "--stdout", f"{base}..{head}",
                            keep_newline=True)
    except DitarError:
        return ""


# ---- refs ----------------------------------------------------------------------------------------

def has_commit(root: Path, sha: str) -> bool:
    """Whether the commit `sha` is in the repository's objects (a shallow clone may lack it)."""
    status, _, _ = hardened.git_status(root, ["cat-file", "-e", f"{sha}^{{commit}}"])
    return status == 0


def refs_under(root: Path, prefix: str) -> list[str]:
    """The refs whose names start with `prefix` (e.g. "refs/ditar/")."""
    return [r for r in hardened.git(root, "for-each-ref", "--format=%(refname)", prefix).splitlines() if r]


def ref_commit(root: Path, ref: str) -> str | None:
    """The commit `ref` points at; None when it does not exist (or there is no repository)."""
    try:
        return hardened.git(root, "rev-parse", "-q", "--verify", f"{ref}^{{commit}}").strip() or None
    except DitarError:
        return None


# ---- git's own files: its folders, the repository's config and hooks -----------------------------

def git_dirs(root: Path) -> tuple[Path, ...]:
    """The git folders of the repository holding `root`: its own and the one its worktrees share."""
    repo = hardened.find_repo(root)
    return () if repo is None else tuple(dict.fromkeys((repo.git_dir.resolve(), repo.common_dir.resolve())))


def repository_config(root: Path) -> list[tuple[str, str, str | None]]:
    """(file, key, value) of every entry of the repository's own config, as git reads it: its
    `config`, a worktree's `config.worktree` and the files they include (the user's and the
    system's config are theirs, not the repository's). [] outside a repository."""
    repo = hardened.find_repo(root)
    if repo is None:
        return []
    out = []
    for e in hardened.config_entries(root):
        if e.scope in hardened.REPOSITORY_SCOPES and e.origin.startswith("file:"):
            origin = e.origin[len("file:"):]
            where = Path(origin) if os.path.isabs(origin) else (repo.toplevel or repo.git_dir) / origin
            out.append((_label(repo, where), e.key, e.value))
    return out


def hook_files(root: Path) -> dict[str, Path]:
    """Every file in the repository's hooks directory (`.git/hooks`, shared by its worktrees), by
    the name the user knows it by; {} outside a repository."""
    repo = hardened.find_repo(root)
    if repo is None:
        return {}
    hooks = repo.common_dir / "hooks"
    out = {}
    for folder, dirs, files in os.walk(hooks):
        for name in [*files, *(d for d in dirs if os.path.islink(os.path.join(folder, d)))]:
            p = Path(folder) / name
            out[_label(repo, p)] = p
    return out


def _label(repo: hardened.RepoPaths, path: Path) -> str:
    """How the user knows a file of the repository's git directory: `.git/config` for the main
    checkout's own, else its absolute path (a linked worktree's common directory, an include)."""
    path = Path(os.path.abspath(path))
    top = repo.toplevel
    if top is not None and path.is_relative_to(top):
        return path.relative_to(top).as_posix()
    return str(path)
