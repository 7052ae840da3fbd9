"""Every role's code made one way: from git objects, regular files only (issue 38).

The candidate, the champion, its twin and the holdout's baseline are each written from their
commit's blobs into a folder of the judge's own (runtime.boxdir), never run from the project's
working tree or a git worktree, and their sandboxes show that folder at one fixed path. So the
code the judge times is exactly its commit: no link to a file outside the repository whose
target can change while the commit does not, no ignored or untracked file, no bytecode left
beside it, and nothing of one role is at another role's path.

A link, a submodule or any other mode than a regular file under a mutable path refuses the run
before any code runs (`irregular`), naming the path. `dit-ar try` judges an uncommitted working
tree: its mutable paths' regular files are copied the same way (a link there refuses too).
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from pytest_ditar.core.errors import DitarError
from pytest_ditar.vcs import trees

REGULAR = {"100644": 0o444, "100755": 0o555}
_KIND = {"120000": "a symbolic link", "160000": "a submodule", "040000": "a folder"}


class IrregularEntry(DitarError):
    """A mutable path holds something other than regular files (a link, a submodule, a device)."""


@dataclass(frozen=True)
class Code:
    """One role's code as written for its worker: the package folder and each file's bytes' size."""
    folder: Path  # where its files were written (relative paths as in the repository)
    package: Path  # <folder>/<candidate_dir>: what the worker imports
    source: str  # the commit it came from, or "working tree"
    files: tuple[tuple[str, int, int], ...]  # (path relative to the folder, inode, ctime ns) as written


def under_any(path: str, under: Iterable[str]) -> bool:
    """Whether the repository path `path` lies in one of the mutable paths `under`."""
    path = path.strip("/")
    return any(not q.strip("/") or path == q.strip("/") or path.startswith(q.strip("/") + "/") for q in under)


def irregular(root: Path, rev: str, under: Iterable[str]) -> list[str]:
    """The entries of `rev` under the mutable paths `under` that are not regular files, as
    "<path> is a symbolic link"; empty when all are regular files."""
    return [f"{path} is {_KIND.get(mode, f'of mode {mode}')}"
            for path, (mode, _sha) in sorted(_entries(root, rev, under).items()) if mode not in REGULAR]


def refusal(problems: list[str], where: str) -> str:
    """The one line that refuses a run whose mutable paths hold more than regular files."""
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    return (f"{'; '.join(problems[:3])}{more} in {where}: a mutable path may hold regular files only; "
            f"commit the file's contents in its place (git rm the link or submodule, add the file)")


def from_commit(root: Path, rev: str, under: Iterable[str], package: str, dest: Path) -> Code:
    """Write `rev`'s regular files under `under` into `dest`; refuses (IrregularEntry) anything else."""
    under = tuple(under)
    problems = irregular(root, rev, under)
    if problems:
        raise IrregularEntry(refusal(problems, rev[:7]))
    for path, mode, data in trees.tree_files(root, rev, under):
        _write(dest, path, data, REGULAR[mode])
    return Code(dest, dest / package, rev, _stamps(dest))


def from_worktree(root: Path, under: Iterable[str], package: str, dest: Path) -> Code:
    """Copy the working tree's regular files under `under` into `dest` (`dit-ar try`'s uncommitted
    candidate); a link or special file refuses. Folders are walked without following links."""
    problems = []
    for top in under:
        start = root / top.strip("/")
        if not os.path.lexists(start):
            continue
        for path in _walk(start):
            rel = path.relative_to(root).as_posix()
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                problems.append(f"{rel} is a symbolic link")
            elif not stat.S_ISREG(st.st_mode):
                problems.append(f"{rel} is not a regular file")
            elif "__pycache__" not in path.parts:
                _write(dest, rel, path.read_bytes(), 0o555 if st.st_mode & 0o111 else 0o444)
    if problems:
        raise IrregularEntry(refusal(problems, "the working tree"))
    return Code(dest, dest / package, "working tree", _stamps(dest))


def changed(code: Code) -> list[str]:
    """Files of `code`'s folder added, removed or written since it was written: any write, rename or
    chmod moves a file's ctime, and no unprivileged process can set it back, so an edit undone
    before anyone looks still shows. (Every sandbox shows the folder read-only; this is the judge's
    own check, for a run with the sandbox off.)"""
    return sorted({rel for rel, _ino, _ct in set(_stamps(code.folder)) ^ set(code.files)})


def _stamps(folder: Path) -> tuple[tuple[str, int, int], ...]:
    out = []
    for path in _walk(folder):
        try:
            st = path.lstat()
        except OSError:
            continue  # gone while walking: missing from the stamps, which is a change
        out.append((path.relative_to(folder).as_posix(), st.st_ino, st.st_ctime_ns))
    return tuple(sorted(out))


def _entries(root: Path, rev: str, under: Iterable[str]) -> dict[str, tuple[str, str]]:
    prefixes = tuple(u.strip("/") for u in under)
    return {p: ms for p, ms in trees.tree_modes(root, rev).items()
            if any(not q or p == q or p.startswith(q + "/") for q in prefixes)}


def _walk(start: Path) -> list[Path]:
    if not start.is_dir() or start.is_symlink():
        return [start]
    out = []
    for folder, dirs, names in os.walk(start):  # followlinks=False
        out += [Path(folder) / n for n in names]
        out += [Path(folder) / d for d in dirs if (Path(folder) / d).is_symlink()]
    return out


def _write(dest: Path, rel: str, data: bytes, mode: int) -> None:
    target = dest / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(target, mode)
