"""Git operations, through GitPython. The only module of the package that runs git.

Porcelain that GitPython has no object API for (status, diff --name-only, format-patch,
worktree, reset --keep) and the plumbing of the state's backup ref (hash-object, mktree,
commit-tree, update-ref, cat-file) go through its command wrapper (`repo.git.execute`); a failure
becomes a DitarError carrying git's own stderr, one line for the user.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

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
        msg = err or out
        raise DitarError(f"{what} failed: {(msg.decode(errors='replace') if isinstance(msg, bytes) else msg).strip()}")
    return out


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
    repo = _repo(root)
    if repo is None:
        return RepoState(False, None, None, None, (), None)
    try:
        head = repo.head.commit
    except ValueError:  # no commits yet
        return RepoState(True, None, None, None, (), Path(repo.working_tree_dir))
    branch = None if repo.head.is_detached else repo.active_branch.name
    parent = head.parents[0].hexsha if head.parents else None
    entries = _status(root)
    return RepoState(True, branch, head.hexsha, parent, tuple(p for _, p in entries), Path(repo.working_tree_dir),
                     tuple(p for code, p in entries if code == "??"))


def _status(root: Path) -> list[tuple[str, str]]:
    """Porcelain status as (two-letter code, path): tracked changes and untracked, not ignored files."""
    out = _git(root, "status", "--porcelain", "--untracked-files=all")
    return [(line[:2], line[3:]) for line in out.splitlines() if line.strip()]


def dirty_paths(root: Path) -> list[str]:
    """Porcelain status: tracked modifications and untracked files that are not ignored."""
    return [p for _, p in _status(root)]


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


def revert_to_parent(root: Path, expected_head: str) -> str:
    """`git reset --keep HEAD^`, only if HEAD is still the candidate commit; returns the parent.

    --keep, never --hard: uncommitted changes and untracked files survive, and where a local
    change sits in a file the candidate commit touches, git refuses and so does this (DitarError
    saying how to finish by hand) instead of overwriting it."""
    repo = _repo(root)
    if repo is None:
        raise DitarError(f"{root}: not a git repository; nothing to revert")
    head = repo.head.commit
    if head.hexsha != expected_head:
        raise DitarError(f"HEAD moved during the run ({expected_head[:7]} -> {head.hexsha[:7]}); not reverting")
    if not head.parents:
        raise DitarError("the candidate is the root commit; not reverting")
    parent = head.parents[0].hexsha
    status, out, err = repo.git.execute(["git", "reset", "-q", "--keep", parent], with_extended_output=True,
                                        with_exceptions=False)
    if status != 0:
        touched = set(changed_files(root, parent, head.hexsha))
        local = [p for p in dirty_paths(root) if p in touched]
        if local:
            raise DitarError(f"uncommitted changes in files the candidate commit touches ({', '.join(local[:3])}): "
                             f"save them, then `git reset --keep {parent[:7]}` finishes the revert")
        said = (err or out).strip().splitlines()
        raise DitarError(f"git reset --keep {parent[:7]} refused ({said[0] if said else f'exit {status}'}): "
                         "fix that, then run it to finish the revert")
    return parent


def branch_commit(root: Path, branch: str) -> str | None:
    """The commit `branch` (a local branch's name) points at; None when it does not exist."""
    return ref_commit(root, f"refs/heads/{branch}")


def put_branch_back(root: Path, branch: str, target: str) -> None:
    """Point `branch` at `target` and check it out, keeping uncommitted changes (keep semantics).

    HEAD on `branch`: `git reset --keep target`. HEAD elsewhere (another branch, detached):
    `git checkout -B branch target`, which moves the branch only if the checkout succeeds. Where a
    local change sits in a file the move would overwrite, git refuses and so does this (DitarError,
    one line saying how to finish by hand); nothing is overwritten."""
    repo = _repo(root)
    if repo is None:
        raise DitarError(f"{root}: not a git repository; {branch} not put back")
    on_branch = not repo.head.is_detached and repo.active_branch.name == branch
    args = ["reset", "-q", "--keep", target] if on_branch else ["checkout", "-q", "-B", branch, target]
    status, out, err = repo.git.execute(["git", *args], with_extended_output=True, with_exceptions=False)
    if status == 0:
        return
    by_hand = f"git reset --keep {target[:7]}" if on_branch else f"git checkout -B {branch} {target[:7]}"
    dirty = dirty_paths(root)
    touched = set(changed_files(root, target, "HEAD")) if dirty else set()
    local = [p for p in dirty if p in touched] or dirty
    if local:
        raise DitarError(f"uncommitted changes ({', '.join(local[:3])}) block putting {branch} back on {target[:7]}: "
                         f"save them, then `{by_hand}` finishes it")
    said = (err or out).strip().splitlines()
    raise DitarError(f"`{by_hand}` refused ({said[0] if said else f'exit {status}'}): fix that, then run it to finish")


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


# ---- the state directory's backup: a hidden ref of content-addressed objects ----------------
# Plumbing only (hash-object, mktree, commit-tree, update-ref): no working tree, index or branch
# is touched, so `git status` and the research branch never see it.

_BACKUP_USER = ("pytest-ditar", "ditar@localhost")


def state_ref(tag: str) -> str:
    """The hidden ref that holds a tag's state directory."""
    return f"refs/ditar/{tag}"


def ref_commit(root: Path, ref: str) -> str | None:
    """The commit `ref` points at; None when it does not exist (or there is no repository)."""
    try:
        return _git(root, "rev-parse", "-q", "--verify", f"{ref}^{{commit}}").strip() or None
    except DitarError:
        return None


def _git_in(root: Path, *args: str, data: bytes, what: str | None = None, **kwargs: Any) -> Any:
    """`git <args>` with `data` on its stdin (GitPython hands stdin over as a file)."""
    import tempfile

    with tempfile.TemporaryFile() as fh:
        fh.write(data)
        fh.seek(0)
        return _git(root, *args, what=what, istream=fh, **kwargs)


def _mktree(root: Path, blobs: dict[str, str]) -> str:
    """The tree of `blobs` (path -> blob id), built deepest folders first, one `mktree --batch` per depth."""
    if not blobs:
        return _git_in(root, "mktree", data=b"").strip()
    dirs: dict[str, dict[str, str]] = {"": {}}  # folder -> {name: ls-tree line}
    for path, sha in blobs.items():
        parts = path.split("/")
        if any(c in path for c in "\t\n") or "" in parts:
            raise DitarError(f"cannot back up {path!r}: a name git's tree format cannot hold")
        for i in range(1, len(parts)):
            dirs.setdefault("/".join(parts[:i]), {})
        dirs["/".join(parts[:-1])][parts[-1]] = f"100644 blob {sha}\t{parts[-1]}"
    depth = {d: (d.count("/") + 1 if d else 0) for d in dirs}
    for level in range(max(depth.values()), -1, -1):
        batch = sorted(d for d in dirs if depth[d] == level)
        data = "\n\n".join("\n".join(dirs[d].values()) for d in batch) + "\n"
        shas = _git_in(root, "mktree", "--batch", data=data.encode()).split()
        for d, sha in zip(batch, shas):
            if d:
                parent, _, name = d.rpartition("/")
                dirs[parent][name] = f"040000 tree {sha}\t{name}"
            else:
                return sha
    raise AssertionError("unreachable: the root folder is level 0")


def blob_ids(root: Path, files: Mapping[str, Path], write: bool = False) -> dict[str, str]:
    """The git blob id of each file (path -> file on disk), with one `hash-object --stdin-paths`;
    `write` also stores the blobs."""
    names = sorted(files)
    if not names:
        return {}
    listing = "".join(f"{files[n]}\n" for n in names).encode()
    shas = _git_in(root, "hash-object", *(["-w"] if write else []), "--no-filters", "--stdin-paths", data=listing,
                   what="git hash-object (backing up the state)" if write else "git hash-object").split()
    return dict(zip(names, shas))


def tree_blobs(root: Path, rev: str) -> dict[str, str]:
    """Every file of `rev`'s tree as path -> blob id (`ls-tree -r`), without reading the blobs."""
    out = {}
    for rec in _git(root, "ls-tree", "-r", "-z", rev, what=f"git ls-tree {rev}").split("\0"):
        if rec:
            meta, _, path = rec.partition("\t")
            _mode, kind, sha = meta.split()
            if kind == "blob":
                out[path] = sha
    return out


def save_tree(root: Path, ref: str, files: Mapping[str, Path], message: str, parent: str | None = None,
              always: bool = False) -> str:
    """Commit `files` (path in the tree -> file on disk) to `ref`; returns the ref's commit.

    The previous commit (`parent`, else the ref's) is the new one's parent; when the tree is the
    same as the parent's, nothing new is written and the parent is returned, unless `always`
    (a commit whose message is what matters, such as a run's marker)."""
    tree = _mktree(root, blob_ids(root, files, write=True))
    old = parent or ref_commit(root, ref)
    if old and not always and _git(root, "rev-parse", f"{old}^{{tree}}").strip() == tree:
        if ref_commit(root, ref) != old:  # the ref was moved or deleted: point it back
            _git(root, "update-ref", "-m", message, ref, old)
        return old
    new = _git(root, "-c", f"user.name={_BACKUP_USER[0]}", "-c", f"user.email={_BACKUP_USER[1]}",
               "commit-tree", tree, *(["-p", old] if old else []), "-m", message).strip()
    _git(root, "update-ref", "-m", message, ref, new)
    return new


def read_tree(root: Path, rev: str) -> list[tuple[str, bytes]]:
    """Every file of `rev`'s tree as (path, bytes), read with one `cat-file --batch`."""
    entries = list(tree_blobs(root, rev).items())
    if not entries:
        return []
    raw = _git_in(root, "cat-file", "--batch", data="".join(f"{sha}\n" for _, sha in entries).encode(),
                  stdout_as_string=False, strip_newline_in_stdout=False)
    out, pos = [], 0
    for path, sha in entries:
        eol = raw.index(b"\n", pos)
        size = int(raw[pos:eol].split()[2])
        out.append((path, bytes(raw[eol + 1:eol + 1 + size])))
        pos = eol + 1 + size + 1  # the content, then a newline
    return out


def worktree_changes(path: Path) -> list[str]:
    """Every path where the checkout at `path` differs from its HEAD: modified, deleted, untracked
    and git-ignored files alike (a planted __pycache__ included). Empty: exactly the commit."""
    out = _git(path, "status", "--porcelain", "--ignored", "--untracked-files=all")
    return [line[3:] for line in out.splitlines() if line.strip()]
