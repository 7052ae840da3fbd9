"""Which files of a tag's state directory matter, their digest, and writing them back.

What matters is what the verdicts rest on and what a person reads afterwards: the session file,
the ledger and its TSV view, the baseline and champion snapshots (outputs included), and each
run's summary.json, verdict.txt and candidate.patch. Worker logs, worktrees and caches are
rebuilt or disposable: the compile cache (compile-cache/) is written by candidate code at will, so
it is neither watched, backed up, nor restored. loop.integrity.backup keeps these files in git
(refs/ditar/<tag>); this module only reads and writes the directory.

No pytest, git or torch here.
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from pytest_ditar.store.atomic import publish_dir, sha256_file, temp_dir_beside, write_bytes_atomic
from pytest_ditar.store.paths import (
    BASELINE,
    CHAMPIONS,
    COMPILE_CACHE,
    LEDGER_JSONL,
    RESULTS_TSV,
    RUNS,
    SESSION_FILE,
    WORKTREES,
    ZYGOTE_FILE,
    TagPaths,
)

__all__ = ["RUN_FILES", "backed_up", "changes", "digest", "folders", "recorded", "watched", "write_back"]

RUN_FILES = ("summary.json", "verdict.txt", "candidate.patch")
_TOP_FILES = (SESSION_FILE, LEDGER_JSONL, RESULTS_TSV, ZYGOTE_FILE)
_SNAPSHOT_DIRS = (BASELINE, CHAMPIONS)


def _visible(rel: Path) -> bool:
    # ".name.tmp-*" and ".name.old-*": a snapshot being written or swapped out, not state
    return not any(part.startswith(".") for part in rel.parts)


def watched(paths: TagPaths) -> dict[str, Path]:
    """The files recorded before a run (path relative to the tag's dir -> file): a run must leave
    them as it found them, since only the gate's record step may change them."""
    out: dict[str, Path] = {}
    for name in _TOP_FILES:
        if (paths.dir / name).is_file():
            out[name] = paths.dir / name
    for sub in _SNAPSHOT_DIRS:
        top = paths.dir / sub
        for f in sorted(top.rglob("*")) if top.is_dir() else []:
            rel = f.relative_to(paths.dir)
            if f.is_file() and _visible(rel):
                out[rel.as_posix()] = f
    return out


def recorded(rel: str) -> bool:
    """Whether `rel` (a path in the tag's directory or its backup) is what only a recorded run
    may change: the ledger, its TSV view, and the baseline and champion snapshots. session.json is
    watched during a run but left out here: `dit-ar init --worktree` rebinds it between runs."""
    parts = rel.split("/")
    if ".." in parts or not _visible(Path(rel)):
        return False
    return rel in (LEDGER_JSONL, RESULTS_TSV) or (len(parts) > 1 and parts[0] in _SNAPSHOT_DIRS)


def _group(rel: str) -> str:
    """What a restore replaces as one: a snapshot (baseline/, champions/<commit>/), else the file."""
    parts = rel.split("/")
    return "/".join(parts[:2]) if parts[0] == CHAMPIONS else (BASELINE if parts[0] == BASELINE else rel)


def folders(paths: TagPaths) -> tuple[Path, ...]:
    """The tag directory's folders, git worktrees (git keeps those, and they are big) and the
    compile cache left out: the compiler makes and removes folders there during a run, which is
    not damage."""
    out = []
    for dirpath, dirnames, _ in os.walk(paths.dir):
        if Path(dirpath) == paths.dir:
            dirnames[:] = [d for d in dirnames if d not in (WORKTREES, COMPILE_CACHE)]
        out.append(Path(dirpath))
    return tuple(out)


def backed_up(paths: TagPaths) -> dict[str, Path]:
    """What the backup holds: the watched files, plus each run's summary, verdict and patch."""
    out = watched(paths)
    runs = paths.dir / RUNS
    for run in sorted(runs.iterdir()) if runs.is_dir() else []:
        for name in RUN_FILES:
            if (run / name).is_file() and _visible(Path(run.name)):
                out[f"{RUNS}/{run.name}/{name}"] = run / name
    return out


def digest(paths: TagPaths) -> dict[str, str]:
    """sha256 of every watched file."""
    out = {}
    for rel, f in watched(paths).items():
        try:
            out[rel] = sha256_file(f)
        except OSError:  # vanished between the listing and the read: it is not there
            pass
    return out


def changes(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """What differs between two digests, one phrase per file ("ledger.jsonl deleted")."""
    out = [f"{p} deleted" for p in sorted(before) if p not in after]
    out += [f"{p} changed" for p in sorted(before) if p in after and after[p] != before[p]]
    out += [f"{p} added" for p in sorted(after) if p not in before]
    return out


def write_back(paths: TagPaths, files: Iterable[tuple[str, bytes]], prune: bool = False) -> list[str]:
    """Write backed-up files into the tag's directory; returns those that were missing or differed.

    A snapshot (baseline/, champions/<commit>/) that differs in any way is replaced whole, so a
    file planted in it goes too; other files are replaced one by one. With `prune`, a watched
    file or snapshot the backup does not hold (a champion added since) is removed too. Anything
    else in the directory (runs' logs, worktrees) stays."""
    groups: dict[str, dict[str, bytes]] = {}
    for rel, data in files:
        parts = rel.split("/")
        if ".." in parts or not _visible(Path(rel)):
            continue  # never written outside the tag's directory
        groups.setdefault(_group(rel), {})[rel] = data
    restored: list[str] = []
    for key, members in sorted(groups.items()):
        target = paths.dir / key
        if key == BASELINE or key.startswith(CHAMPIONS + "/"):
            have = {f.relative_to(paths.dir).as_posix(): f for f in target.rglob("*") if f.is_file()} \
                if target.is_dir() else {}
            differ = sorted(r for r, data in members.items() if r not in have or have[r].read_bytes() != data)
            if not differ and set(have) == set(members):
                continue
            tmp = temp_dir_beside(target)
            for rel, data in members.items():
                dest = tmp / Path(rel).relative_to(key)
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data)
            publish_dir(tmp, target, replace=True)
            restored += differ + sorted(f"{r} (removed)" for r in set(have) - set(members))
        else:
            data = members[key]
            if target.is_file() and target.read_bytes() == data:
                continue
            write_bytes_atomic(target, data)
            restored.append(key)
    if prune:
        restored += _prune(paths, set(groups))
    return restored


def _prune(paths: TagPaths, kept: set[str]) -> list[str]:
    """Remove the watched files and snapshots whose group is not in `kept`."""
    removed: list[str] = []
    for rel in sorted(watched(paths)):
        key = _group(rel)
        if key in kept:
            continue
        target = paths.dir / key
        if key != rel:  # a snapshot the backup does not hold: it goes whole
            shutil.rmtree(target, ignore_errors=True)
            kept.add(key)
            removed.append(f"{key}/ (removed)")
        else:
            target.unlink(missing_ok=True)
            removed.append(f"{rel} (removed)")
    return removed
