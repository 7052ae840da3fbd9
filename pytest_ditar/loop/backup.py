"""The state directory's backup in git, and the gate's watch over the directory during a run.

After every baseline and every recorded run, the files that matter (store.statefiles) are
committed to the hidden ref refs/ditar/<tag> as content-addressed objects (vcs.repo.save_tree):
no branch, index or working-tree file changes, so `git status` never shows it.

A candidate runs as the user and can delete or edit the state directory. The gate backs the
verified state up and takes its digest before the candidate runs (`watch`), compares after
(`damage`), and restores from the commit it saved then (`restore`), not from wherever the ref
points by then: the candidate can move a ref too. `dit-ar recover` restores from the ref.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pytest_ditar.core.errors import DitarError
from pytest_ditar.store import statefiles
from pytest_ditar.store.paths import CHAMPIONS, TagPaths
from pytest_ditar.vcs import repo as gitops


@dataclass(frozen=True)
class Watch:
    commit: str | None  # the backup taken just before the candidate ran (None: git failed)
    digest: Mapping[str, str]  # the watched files' sha256 then
    dirs: tuple[Path, ...] = ()  # the directory's folders then (other plugins write into some)


def ref(paths: TagPaths) -> str:
    return gitops.state_ref(paths.tag)


def save(root: Path, paths: TagPaths, message: str, parent: str | None = None) -> str:
    """Commit the state's files to refs/ditar/<tag> (no new commit when nothing changed)."""
    return gitops.save_tree(root, ref(paths), statefiles.backed_up(paths), message, parent=parent)


def save_note(root: Path, paths: TagPaths, message: str, parent: str | None = None) -> str | None:
    """`save`, for after a record: a failure is a summary line, not a failed run."""
    if not gitops.state(root).is_repo:
        return None  # nothing to back up into (a report-only project outside git)
    try:
        save(root, paths, message, parent)
    except (DitarError, OSError) as exc:
        return f"ditar: state not backed up to {ref(paths)}: {exc}"
    return None


def watch(root: Path, paths: TagPaths) -> Watch:
    """Before the candidate runs (the state has verified): back it up, and take its digest."""
    try:
        commit = save(root, paths, f"ditar {paths.tag}: verified before a run")
    except (DitarError, OSError):
        commit = None  # the run goes on; damage found later cannot be undone then, and says so
    return Watch(commit, statefiles.digest(paths), statefiles.folders(paths))


def put_back(root: Path, paths: TagPaths, before: Watch) -> str | None:
    """During the run: when a folder of the state directory is gone, restore it now, since other
    plugins (junitxml, pytest-benchmark) write into it before the gate finishes. Cheap (one stat
    per folder), so it runs at every test report. Returns what was damaged, or None."""
    if all(d.is_dir() for d in before.dirs):
        return None
    harm = damage(root, paths, before) or "a folder deleted"
    with contextlib.suppress(DitarError, OSError):  # finish() tries again and says what failed
        restore(root, paths, before.commit, before.dirs)
    return harm


def _rel(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def damage(root: Path, paths: TagPaths, before: Watch | None) -> str | None:
    """What happened to the watched files since `watch`, or None when they are as they were (or
    nothing was watched)."""
    if before is None:
        return None
    if not paths.dir.is_dir():
        return f"{_rel(paths.dir, root)} deleted"
    found = statefiles.changes(before.digest, statefiles.digest(paths))
    if not found:
        return None
    return ", ".join(found[:3]) + (f" (+{len(found) - 3} more)" if len(found) > 3 else "")


def restore(root: Path, paths: TagPaths, commit: str | None = None, dirs: tuple[Path, ...] = ()) -> list[str]:
    """Write the backup (`commit`, else the ref's) into the tag's directory, and make `dirs` again;
    returns what differed."""
    commit = commit or gitops.ref_commit(root, ref(paths))
    if commit is None:
        raise DitarError(f"no backup of tag {paths.tag}: {ref(paths)} does not exist in {root}")
    for d in (paths.dir, *dirs):
        d.mkdir(parents=True, exist_ok=True)
    return statefiles.write_back(paths, gitops.read_tree(root, commit))


def describe(restored: list[str]) -> str:
    """"ledger.jsonl, baseline/ (14 files)": what a restore wrote, by file or snapshot."""
    groups: dict[str, int] = {}
    for rel in restored:
        parts = rel.split("/")
        key = f"{'/'.join(parts[:2])}/" if parts[0] == CHAMPIONS and len(parts) > 2 else \
            (f"{parts[0]}/" if len(parts) > 1 else rel)
        groups[key] = groups.get(key, 0) + 1
    return ", ".join(k + (f" ({n} files)" if k.endswith("/") else "") for k, n in groups.items())


def recover(root: Path, paths: TagPaths, force: bool = False, echo: Callable[[str], None] = print) -> int:
    """`dit-ar recover`: restore a missing or damaged state directory from refs/ditar/<tag>."""
    from pytest_ditar.loop.verify import state_checks

    if all(c.ok for c in state_checks(root, paths)) and not force:
        raise DitarError(f"{paths.dir} verifies: nothing to recover (--force restores {ref(paths)} over it anyway)")
    commit = gitops.ref_commit(root, ref(paths))
    if commit is None:
        raise DitarError(f"no backup of tag {paths.tag}: {ref(paths)} does not exist in {root}")
    restored = restore(root, paths, commit)
    if restored:
        echo(f"recover: restored {describe(restored)} from {ref(paths)} ({commit[:7]}) into {paths.dir}")
    else:
        echo(f"recover: nothing differed from {ref(paths)} ({commit[:7]}); {paths.dir} left as it was")
    failed = [c for c in state_checks(root, paths) if not c.ok]
    for c in failed:
        echo(c.line())
    echo("recover: the state directory verifies" if not failed else "recover: the state directory still fails to verify")
    return 0 if not failed else 1
