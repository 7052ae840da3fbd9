"""The state directory's backup in git, and the gate's watch over the directory during a run.

After every baseline and every recorded run, the files that matter (store.statefiles) are
committed to the hidden ref refs/ditar/<tag> as content-addressed objects (vcs.trees.save_tree):
no branch, index or working-tree file changes, so `git status` never shows it.

A candidate runs as the user and can delete or edit the state directory. The gate backs the
verified state up and takes its digest before the candidate runs (`watch`), compares after
(`damage`), and restores from the commit it saved then (`restore`), not from wherever the ref
points by then: the candidate can move a ref too. `dit-ar recover` restores from the ref.

Each gated run leaves two markers on the ref, in the backup commits' messages (a `ditar-run:`
trailer): the pre-run backup says "in-flight <commit> pid=<judge> start=<its start time>", and
the backup written right after the run's ledger row (or at its end, when it records nothing)
says "settled <commit>". So the ref tells the next run (and `dit-ar status`/`verify`):

- newest marker in flight and its judge gone: the run ended (kill -9) before it recorded, and
  whatever it left in the state is untrusted; `settle` rolls the state back to the pre-run backup;
- newest marker settled: the ledger, results and snapshots must be as that backup holds them;
  `drift` names what changed outside any run.

A baseline's backup carries no marker (changes after it are not checked), and the markers are
only as sound as the ref: a candidate that commits a settled marker over its own forged state to
refs/ditar/<tag> before it kills its judge is not caught here.
"""
from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pytest_ditar.core.errors import DitarError
from pytest_ditar.runtime import proctree
from pytest_ditar.store import statefiles
from pytest_ditar.store.paths import CHAMPIONS, TagPaths
from pytest_ditar.vcs import queries, trees

INFLIGHT, SETTLED = "in-flight", "settled"
_TRAILER = "ditar-run:"
_MARK = re.compile(r"^ditar-run: (in-flight|settled) ([0-9a-f]{4,64})(?: pid=(\d+) start=(\S+))?\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Watch:
    commit: str | None  # the backup taken just before the candidate ran (None: git failed)
    digest: Mapping[str, str]  # the watched files' sha256 then
    dirs: tuple[Path, ...] = ()  # the directory's folders then (other plugins write into some)


@dataclass(frozen=True)
class Marker:
    """What the newest backup commit says about the run that wrote it."""
    commit: str  # the backup commit
    kind: str  # INFLIGHT, SETTLED, or "" (a baseline's backup, or none of the gate's)
    head: str = ""  # the judged commit
    pid: int | None = None  # the judge's (INFLIGHT)
    start: str = ""  # its start time, so a recycled pid is not taken for it
    subject: str = ""


@dataclass(frozen=True)
class Settled:
    """What `settle` found: a line to print, or why the run must not go on."""
    line: str | None = None  # the state was rolled back
    busy: str | None = None  # a run of this tag is still in flight
    error: str | None = None  # the roll back failed


def ref(paths: TagPaths) -> str:
    return trees.state_ref(paths.tag)


def save(root: Path, paths: TagPaths, message: str, parent: str | None = None, always: bool = False) -> str:
    """Commit the state's files to refs/ditar/<tag> (no new commit when nothing changed, unless
    `always`: a marker)."""
    return trees.save_tree(root, ref(paths), statefiles.backed_up(paths), message, parent=parent, always=always)


def save_note(root: Path, paths: TagPaths, message: str, parent: str | None = None, always: bool = False) -> str | None:
    """`save`, for after a record: a failure is a summary line, not a failed run."""
    if not queries.state(root).is_repo:
        return None  # nothing to back up into (a report-only project outside git)
    try:
        save(root, paths, message, parent, always)
    except (DitarError, OSError) as exc:
        return f"ditar: state not backed up to {ref(paths)}: {exc}"
    return None


def settled_message(paths: TagPaths, head: str | None, what: str) -> str:
    """A backup's message that marks the run of `head` as over; `what` is its subject's end."""
    return f"ditar {paths.tag}: {what}\n\n{_TRAILER} {SETTLED} {head or '0' * 40}\n"


def mark_settled(root: Path, paths: TagPaths, head: str | None, what: str, parent: str | None) -> str:
    """Back the state up as the end of the run of `head` (a new commit even when nothing changed).
    Returns the backup commit; raises DitarError/OSError."""
    return save(root, paths, settled_message(paths, head, what), parent=parent, always=True)


def watch(root: Path, paths: TagPaths, head: str | None = None) -> Watch:
    """Before the candidate runs (the state has verified): back it up, marked as a run in flight
    for `head` by this process, and take its digest."""
    pid = os.getpid()
    msg = (f"ditar {paths.tag}: run in flight for {head}\n\n"
           f"{_TRAILER} {INFLIGHT} {head or '0' * 40} pid={pid} start={proctree.started(pid) or '-'}\n")
    try:
        commit = save(root, paths, msg, always=True)
    except (DitarError, OSError):
        commit = None  # the run goes on; damage found later cannot be undone then, and says so
    return Watch(commit, statefiles.digest(paths), statefiles.folders(paths))


def marker(root: Path, paths: TagPaths) -> Marker | None:
    """The newest backup's marker; None when there is no backup (or no repository)."""
    commit = queries.ref_commit(root, ref(paths))
    if commit is None:
        return None
    msg = queries.commit_message(root, commit)
    subject = msg.strip().splitlines()[0] if msg.strip() else ""
    m = _MARK.search(msg)
    if not m:
        return Marker(commit, "", subject=subject)
    return Marker(commit, m.group(1), m.group(2), int(m.group(3)) if m.group(3) else None, m.group(4) or "", subject)


def _alive(pid: int | None, start: str) -> bool:
    """Whether the judge that wrote an in-flight marker still runs."""
    if pid is None or pid == os.getpid():  # this process: an earlier session of it has ended
        return False
    if Path("/proc/self/stat").is_file() and start != "-":
        return proctree.started(pid) == start
    return proctree.pid_exists(pid)


def settle(root: Path, paths: TagPaths) -> Settled:
    """Before anything reads the state for a verdict: when the newest backup marks a run in flight
    whose judge is gone, that run ended before it recorded (kill -9, a candidate that killed its
    judge). Whatever it did to the state is untrusted: restore the pre-run backup over it (the
    runs' log folders stay), and mark the backup settled."""
    m = marker(root, paths)
    if m is None or m.kind != INFLIGHT:
        return Settled()
    if _alive(m.pid, m.start):
        return Settled(busy=f"a run of {m.head[:7]} is in flight on tag {paths.tag} (judge pid {m.pid}): "
                            "wait for it to finish")
    try:
        restore(root, paths, m.commit)
        mark_settled(root, paths, m.head, f"rolled back the unrecorded run of {m.head[:7]}", parent=m.commit)
    except (DitarError, OSError) as exc:
        return Settled(error=f"the run of {m.head[:7]} ended before it recorded, and its state changes could not be "
                             f"rolled back from {ref(paths)} ({m.commit[:7]}): {exc}")
    return Settled(line=f"ditar: the run of {m.head[:7]} ended before it recorded: its state changes were rolled back "
                        f"from {ref(paths)}")


def drift(root: Path, paths: TagPaths) -> tuple[list[str], Marker] | None:
    """When the newest backup marks a settled run: what of the ledger, results and snapshots
    differs from it (changed outside any run), with that marker; None when nothing does or the
    newest backup is no settled run's."""
    m = marker(root, paths)
    if m is None or m.kind != SETTLED:
        return None
    want = {rel: sha for rel, sha in trees.tree_blobs(root, m.commit).items() if statefiles.recorded(rel)}
    have = trees.blob_ids(root, {rel: f for rel, f in statefiles.watched(paths).items() if statefiles.recorded(rel)})
    found = statefiles.changes(want, have)
    return (found, m) if found else None


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
    returns what differed. A ledger, results file or snapshot that the backup does not hold is
    removed: the backup is the state, and what was added since is not."""
    commit = commit or queries.ref_commit(root, ref(paths))
    if commit is None:
        raise DitarError(f"no backup of tag {paths.tag}: {ref(paths)} does not exist in {root}")
    for d in (paths.dir, *dirs):
        d.mkdir(parents=True, exist_ok=True)
    return statefiles.write_back(paths, trees.read_tree(root, commit), prune=True)


def describe(restored: list[str]) -> str:
    """"ledger.jsonl, baseline/ (14 files)": what a restore wrote, by file or snapshot."""
    groups: dict[str, int] = {}
    for rel in restored:
        parts = rel.split("/")
        key = f"{'/'.join(parts[:2])}/" if parts[0] == CHAMPIONS and len(parts) > 2 else \
            (f"{parts[0]}/" if len(parts) > 1 else rel)
        groups[key] = groups.get(key, 0) + 1
    return ", ".join(k + (f" ({n} files)" if k.endswith("/") else "") for k, n in groups.items())
