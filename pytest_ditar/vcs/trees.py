"""Trees and objects: a commit's files, read and written without a checkout, through `vcs.hardened`.

It owns the object plumbing: reading a commit's tree (its entries and modes, one file, every
file's bytes with one `cat-file --batch`), checking a checkout's files against that tree by
content (hashed here, so no index flag can hide an edit), the linked worktrees the champion's
and the baseline's code are checked out in, and the state directory's backup: blobs, trees and
commits built with hash-object, mktree and commit-tree under the hidden ref `refs/ditar/<tag>`,
and `dit-ar fetch-state`'s fetch of those refs (the one command that reaches a remote). Nothing
here touches the user's index or branch. Every git command is run by `vcs.hardened`.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from pytest_ditar.core.errors import DitarError
from pytest_ditar.vcs import branches, hardened, queries

# ---- a commit's tree, read from the object store -------------------------------------------------

def tree_modes(root: Path, rev: str) -> dict[str, tuple[str, str]]:
    """Every entry of `rev`'s tree, folders flattened: path -> (mode, object id); blobs (regular
    files: 100644, 100755; symlinks: 120000) and submodules' commits (160000)."""
    out = {}
    for rec in hardened.git(root, "ls-tree", "-r", "-z", rev, what=f"git ls-tree {rev}").split("\0"):
        if rec:
            meta, _, path = rec.partition("\t")
            mode, kind, sha = meta.split()
            if kind in ("blob", "commit"):
                out[path] = (mode, sha)
    return out


def tree_blobs(root: Path, rev: str) -> dict[str, str]:
    """Every file of `rev`'s tree as path -> blob id (`ls-tree -r`), without reading the blobs."""
    return {path: sha for path, (mode, sha) in tree_modes(root, rev).items() if mode != "160000"}


def file_at(root: Path, rev: str, path: str) -> str | None:
    """The text of `path` in `rev`'s tree; None where the revision or the file does not exist."""
    try:
        return hardened.git(root, "cat-file", "blob", f"{rev}:{path}", keep_newline=True)
    except DitarError:
        return None


def read_tree(root: Path, rev: str) -> list[tuple[str, bytes]]:
    """Every file of `rev`'s tree as (path, bytes), read with one `cat-file --batch`."""
    return [(path, data) for path, _mode, data in tree_files(root, rev)]


def tree_files(root: Path, rev: str, under: Iterable[str] = ("",)) -> list[tuple[str, str, bytes]]:
    """Every blob of `rev`'s tree under the folders or files `under` ("" for all) as (path, mode,
    bytes), read with one `cat-file --batch`; a link's bytes are its target (mode 120000), a
    submodule (160000) comes with no bytes. The object store only: no checkout, index or filter."""
    prefixes = tuple(u.strip("/") for u in under)
    entries = [(path, mode, sha) for path, (mode, sha) in tree_modes(root, rev).items()
               if any(not p or path == p or path.startswith(p + "/") for p in prefixes)]
    blobs = [(path, mode, sha) for path, mode, sha in entries if mode != "160000"]
    if not blobs:
        return [(path, mode, b"") for path, mode, _ in entries]
    repo = hardened.find_repo(root)
    if repo is None:
        raise DitarError(f"git cat-file failed: {root} is not a git repository")
    # bytes as they are: blobs are not text, and their last newline is theirs
    top = repo.toplevel or repo.git_dir
    status, raw, err = hardened.execute_bytes(top, ["cat-file", "--batch"],
                                              "".join(f"{sha}\n" for _, _, sha in blobs).encode())
    if status != 0:
        raise DitarError(f"git cat-file failed: {err.strip()}")
    out, pos = [], 0
    for path, mode, sha in blobs:
        eol = raw.index(b"\n", pos)
        size = int(raw[pos:eol].split()[2])
        out.append((path, mode, bytes(raw[eol + 1:eol + 1 + size])))
        pos = eol + 1 + size + 1  # the content, then a newline
    return out + [(path, mode, b"") for path, mode, _ in entries if mode == "160000"]


# ---- a checkout against its commit, by content ---------------------------------------------------

def _blob_id(data: bytes, like: str) -> str:
    """The id git gives a blob of `data`, in the hash of the object id `like` (SHA-1 or SHA-256)."""
    h = hashlib.sha1() if len(like) == 40 else hashlib.sha256()
    h.update(b"blob %d\0" % len(data))
    h.update(data)
    return h.hexdigest()


def content_changes(root: Path, rev: str, checkout: Path, under: Iterable[str] = ("",),
                    skip: Iterable[str] = ()) -> list[str]:
    """Where the files of `checkout` (a checkout of `rev` from the repository holding `root`) are
    not `rev`'s, by content: "<path> modified" (bytes that are another blob than the commit's: what
    an index flag, assume-unchanged or skip-worktree, hides from `git status`), "<path> missing",
    "<path> added" (untracked and git-ignored files alike). Paths are relative to `checkout`; only
    those under `under` (folders, "" for all) count, and none inside a folder named in `skip`.

    The files are read and hashed here, and the commit's tree is read from the object store:
    git's index and status are never asked. A file whose bytes differ from the blob only by git's
    own conversions on checkout (line endings, a filter driver of the user's such as git-lfs)
    matches when git hashes it back to the blob, as it would add it; the repository's own filter
    drivers are off for that too. The checkout's own `.git` (a worktree's file) is git's, not the
    commit's."""
    want = _Wanted(tuple(u.strip("/") for u in under), frozenset(skip))
    tree = {p: ms for p, ms in tree_modes(root, rev).items() if want(p)}
    modules = {p for p, (mode, _) in tree.items() if mode == "160000"}
    out, convert = _by_content(checkout, tree, _checkout_files(checkout, want, modules))
    return sorted(out + _after_conversions(root, checkout, convert))


@dataclass(frozen=True)
class _Wanted:
    """The paths that count: under one of `prefixes` ("" for all), inside no folder named in `skip`."""

    prefixes: tuple[str, ...]
    skip: frozenset[str]

    def __call__(self, rel: str) -> bool:
        return any(not p or rel == p or rel.startswith(p + "/") for p in self.prefixes) \
            and not self.skip & set(rel.split("/")[:-1])

    def tops(self) -> list[str]:
        """The prefixes under no other one, once each: where the walk starts."""
        tops = [p for p in self.prefixes
                if not any(q != p and (not q or p.startswith(q + "/")) for q in self.prefixes)]
        return list(dict.fromkeys(tops))


def _checkout_files(checkout: Path, want: _Wanted, modules: set[str]) -> dict[str, str]:
    """{path: "file" | "link"} of what the checkout holds where `want` looks, submodules left out."""
    found: dict[str, str] = {}
    for top in want.tops():
        start = checkout / top if top else checkout
        if os.path.islink(start) or start.is_file():
            found[top] = "link" if os.path.islink(start) else "file"
            continue
        for folder, dirs, files in os.walk(start):
            found.update(_walked_folder(checkout, folder, dirs, files, want, modules))
    return found


def _walked_folder(checkout: Path, folder: str, dirs: list[str], files: list[str], want: _Wanted,
                   modules: set[str]) -> dict[str, str]:
    """One folder of the walk: its files and linked folders that count; `dirs` pruned in place of
    submodules, the checkout's own .git, skipped folders and links (os.walk then stays out of them)."""
    rel_dir = os.path.relpath(folder, checkout)
    rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/")
    if rel_dir in modules:
        dirs[:] = []  # a submodule's checkout is its own repository's
        return {}
    if not rel_dir:  # the checkout's own .git (a folder, or a worktree's file) is git's
        files = [f for f in files if f != ".git"]
        dirs[:] = [d for d in dirs if d != ".git"]
    found = {}
    for name in [*files, *(d for d in dirs if os.path.islink(os.path.join(folder, d)))]:
        rel = f"{rel_dir}/{name}" if rel_dir else name
        if want(rel):
            found[rel] = "link" if os.path.islink(os.path.join(folder, name)) else "file"
    dirs[:] = [d for d in dirs if d not in want.skip and not os.path.islink(os.path.join(folder, d))]
    return found


def _by_content(checkout: Path, tree: dict[str, tuple[str, str]],
                found: dict[str, str]) -> tuple[list[str], list[tuple[str, str]]]:
    """The checkout's files against the commit's tree: what is missing, added or modified, and the
    (path, blob) of each file whose bytes are another blob's, for `_after_conversions`."""
    out, convert = [], []
    for rel in sorted(tree.keys() | found.keys()):
        mode, sha = tree.get(rel, ("", ""))
        if mode == "160000":
            continue
        if rel not in found:
            out.append(f"{rel} missing")
        elif not mode:
            out.append(f"{rel} added")
        else:
            path = checkout / rel
            try:
                data = os.fsencode(os.readlink(path)) if found[rel] == "link" else path.read_bytes()
            except OSError:
                out.append(f"{rel} missing")
                continue
            if (found[rel] == "link") != (mode == "120000"):
                out.append(f"{rel} modified")
            elif _blob_id(data, sha) != sha:
                convert.append((rel, sha))
    return out, convert


def _after_conversions(root: Path, checkout: Path, convert: list[tuple[str, str]]) -> list[str]:
    """The files of `convert` that are still another blob once hashed as git would add them: its
    conversions applied, the user's filters run."""
    out = []
    for rel, sha in convert:
        try:
            again = hardened.git(root, "hash-object", f"--path={rel}", "--", str(checkout / rel)).strip()
        except DitarError:
            again = ""
        if again != sha:
            out.append(f"{rel} modified")
    return out

# ---- linked worktrees ----------------------------------------------------------------------------

def add_worktree(root: Path, path: Path, rev: str) -> None:
    """A detached checkout of `rev` at `path` (the champion's or the baseline's code)."""
    hardened.git(root, "worktree", "add", "--detach", "--force", str(path), rev)


def add_branch_worktree(root: Path, path: Path, branch: str, start: str) -> None:
    """A checkout of `branch` at `path`; the branch is created at `start` when it does not exist."""
    if branches.branch_exists(root, branch):
        hardened.git(root, "worktree", "add", str(path), branch)
    else:
        hardened.git(root, "worktree", "add", "-b", branch, str(path), start)


def remove_worktrees(root: Path, paths: Iterable[Path]) -> None:
    """Drop linked worktrees (their folders and git's records of them)."""
    for path in paths:
        hardened.git(root, "worktree", "remove", "--force", str(path))
    hardened.git(root, "worktree", "prune")


def list_worktrees(root: Path) -> list[dict[str, Any]]:
    """`git worktree list --porcelain` as dicts: path, head, branch (None when detached)."""
    out: list[dict[str, Any]] = []
    cur: dict[str, Any] = {}
    for line in hardened.git(root, "worktree", "list", "--porcelain").splitlines() + [""]:
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


# ---- the state directory's backup: a hidden ref of content-addressed objects ---------------------
# Plumbing only (hash-object, mktree, commit-tree, update-ref): no working tree, index or branch
# is touched, so `git status` and the research branch never see it.

_BACKUP_USER = ("pytest-ditar", "ditar@localhost")


def state_ref(tag: str) -> str:
    """The hidden ref that holds a tag's state directory."""
    return f"refs/ditar/{tag}"


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


def _git_in(root: Path, *args: str, data: bytes, what: str | None = None) -> str:
    """`git <args>` with `data` on its stdin."""
    return hardened.git(root, *args, what=what, data=data)


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


def save_tree(root: Path, ref: str, files: Mapping[str, Path], message: str, parent: str | None = None,
              always: bool = False) -> str:
    """Commit `files` (path in the tree -> file on disk) to `ref`; returns the ref's commit.

    The previous commit (`parent`, else the ref's) is the new one's parent; when the tree is the
    same as the parent's, nothing new is written and the parent is returned, unless `always`
    (a commit whose message is what matters, such as a run's marker)."""
    tree = _mktree(root, blob_ids(root, files, write=True))
    old = parent or queries.ref_commit(root, ref)
    if old and not always and hardened.git(root, "rev-parse", f"{old}^{{tree}}").strip() == tree:
        if queries.ref_commit(root, ref) != old:  # the ref was moved or deleted: point it back
            hardened.git(root, "update-ref", "-m", message, ref, old)
        return old
    new = hardened.git(root, "-c", f"user.name={_BACKUP_USER[0]}", "-c", f"user.email={_BACKUP_USER[1]}",
                       "commit-tree", tree, *(["-p", old] if old else []), "-m", message).strip()
    hardened.git(root, "update-ref", "-m", message, ref, new)
    return new


# `dit-ar fetch-state` alone reaches a remote, before any judge runs: the transports a CI clone uses,
# each switched back on by name over `protocol.allow=never` (ext:: and the rest stay off), and the
# remote's own upload-pack named here, never a `remote.<name>.uploadpack` of the repository's config.
_TRANSPORTS = tuple(a for p in ("file", "git", "ssh", "http", "https") for a in ("-c", f"protocol.{p}.allow=always"))


def fetch(root: Path, remote: str, refspecs: Iterable[str]) -> str:
    """`git fetch` of `refspecs` from `remote` (a remote's name or URL): no tags, no submodules, no
    program of the repository's config. Returns git's report; DitarError with its stderr."""
    if remote.startswith("-"):
        raise DitarError(f"fetch: {remote!r} is not a remote")
    return hardened.git(root, *_TRANSPORTS, "fetch", "--no-tags", "--no-recurse-submodules",
                        "--upload-pack=git-upload-pack", "--", remote, *refspecs, what=f"git fetch {remote}")


def push(root: Path, remote: str, refspecs: Iterable[str], lease: Mapping[str, str | None]) -> tuple[bool, str]:
    """`git push --atomic` of `refspecs` to `remote`, each ref of `lease` updated only where the
    remote still holds the commit given (None: the ref must not exist yet): git's compare-and-swap,
    so two hosts writing one ref never overwrite each other's rows. (ok, git's report): a refused
    update is an answer, not an error, since the caller fetches and tries again."""
    if remote.startswith("-"):
        raise DitarError(f"push: {remote!r} is not a remote")
    leases = [f"--force-with-lease={ref}:{old or ''}" for ref, old in lease.items()]
    status, out, err = hardened.git_status(root, [*_TRANSPORTS, "push", "--atomic", "--no-verify", "--porcelain",
                                                  "--receive-pack=git-receive-pack", *leases, "--", remote,
                                                  *refspecs])
    return status == 0, f"{out}\n{err}".strip()  # --porcelain: each ref's outcome on stdout, the reason on stderr


def make_commit(root: Path, files: Mapping[str, bytes], message: str, parent: str | None) -> str:
    """A commit of `files` (path -> bytes) whose parent is `parent`, on no ref yet (the caller
    pushes it, then points its own ref at it); returns the commit."""
    blobs = {path: _git_in(root, "hash-object", "-w", "--no-filters", "--stdin", data=data).strip()
             for path, data in files.items()}
    return hardened.git(root, "-c", f"user.name={_BACKUP_USER[0]}", "-c", f"user.email={_BACKUP_USER[1]}",
                        "commit-tree", _mktree(root, blobs), *(["-p", parent] if parent else []), "-m",
                        message).strip()


def set_ref(root: Path, ref: str, commit: str, message: str) -> None:
    hardened.git(root, "update-ref", "-m", message, ref, commit)


def take_paths(root: Path, rev: str, prefixes: Iterable[str]) -> None:
    """Make the working tree's and index's files under `prefixes` those of `rev` (files `rev` does
    not hold there are removed): the way a promotion puts another host's candidate code on this
    host's research branch, its fixed paths left as they are."""
    for prefix in prefixes:
        p = prefix.rstrip("/")
        hardened.git(root, "rm", "-r", "-q", "--ignore-unmatch", "--", p)
        if any(path == p or path.startswith(p + "/") for path in tree_modes(root, rev)):
            hardened.git(root, "checkout", rev, "--", p)
