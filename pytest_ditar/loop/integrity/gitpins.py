"""The repository's own git config and hooks, pinned by the baseline (issue 24).

The judge's git runs none of what they name (vcs.hardened switches hooks, fsmonitor, the
repository's filter drivers and the like off on every command), but the user's and the agent's
own git do, and the config decides what git shows them. A change to either is a change to the
project that no commit carries, so:

- the baseline records a digest of each (`pins`): every key of the repository's config (its
  `config`, a worktree's `config.worktree`, the files they include), one digest per key, so a
  refusal can name the key; and every file of `.git/hooks`, its content and executable bit. Keys
  that only say where the remotes are and who commits (`remote.*.url`, `branch.*.merge`,
  `user.name`, `maintenance.strategy`, ...) are left out: `git push -u`, `git remote add` and
  `git maintenance start` write them;
- a gated run whose pins differ from the baseline's is REFUSED naming the file, the key and the
  fix (`refusal`), before any candidate code runs;
- a run during which they changed is a CRASH naming them (`changed_during`): the candidate, or a
  process of the user's while it ran, wrote there.
"""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Mapping, TypedDict, cast

from pytest_ditar.vcs import queries


class Pins(TypedDict):
    config: dict[str, dict[str, str]]  # file -> {key: digest of its values}
    hooks: dict[str, str]  # hook file -> digest ("link:..." for a link, ":x" where executable)

# Keys that are data about remotes, branches' upstreams, the committer and git's own maintenance
# schedule, written by ordinary git commands (remote add, push -u, branch -u, config user.*,
# maintenance start); none names a program for git to run.
_DATA_KEYS = re.compile(r"remote\..+\.(url|pushurl|fetch|push|tagopt|prune|mirror|skipdefaultupdate)"
                        r"|branch\..+\.(remote|merge|rebase|pushremote|description)|user\.(name|email)"
                        r"|maintenance\.(auto|strategy)", re.I)
FIX = "or re-run `dit-ar baseline --force` if you changed it yourself"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def pins(root: Path) -> Pins:
    """The repository's config keys and hook files as digests (see the module's docstring)."""
    values: dict[str, dict[str, list[str]]] = {}
    for label, key, value in queries.repository_config(root):
        if not _DATA_KEYS.fullmatch(key):
            values.setdefault(label, {}).setdefault(key, []).append("\0" if value is None else value)
    config = {label: {k: _digest("\n".join(v).encode(errors="surrogateescape")) for k, v in keys.items()}
              for label, keys in values.items()}
    hooks: dict[str, str] = {}
    for label, path in queries.hook_files(root).items():
        try:
            if os.path.islink(path):
                hooks[label] = "link:" + _digest(os.fsencode(os.readlink(path)))
            else:
                hooks[label] = _digest(path.read_bytes()) + (":x" if os.access(path, os.X_OK) else "")
        except OSError:
            hooks[label] = "unreadable"
    return {"config": config, "hooks": hooks}


def changes(recorded: Pins, current: Pins) -> list[tuple[str, str, list[str]]]:
    """(kind, file, what changed) for every file whose pins differ: kind "config" with the keys
    ("core.fsmonitor added"), or "hook" with "added", "changed" or "removed"."""
    out: list[tuple[str, str, list[str]]] = []
    rc, cc = recorded.get("config", {}), current.get("config", {})
    for label in sorted(rc.keys() | cc.keys()):
        a, b = rc.get(label, {}), cc.get(label, {})
        keys = [f"{k} added" for k in sorted(b.keys() - a.keys())]
        keys += [f"{k} changed" for k in sorted(a.keys() & b.keys()) if a[k] != b[k]]
        keys += [f"{k} removed" for k in sorted(a.keys() - b.keys())]
        if keys:
            out.append(("config", label, keys))
    rh, ch = recorded.get("hooks", {}), current.get("hooks", {})
    for label in sorted(rh.keys() | ch.keys()):
        if rh.get(label) != ch.get(label):
            out.append(("hook", label, ["added" if label not in rh else "removed" if label not in ch else "changed"]))
    return out


def _detail(what: list[str]) -> str:
    return ", ".join(what[:3]) + (f" +{len(what) - 3} more" if len(what) > 3 else "")


def _fix(found: list[tuple[str, str, list[str]]]) -> str:
    """What undoes `found`, with the commands where they are plain (keys or hooks added)."""
    undo: list[str] = []
    for kind, label, what in found:
        if kind == "hook" and what == ["added"]:
            undo.append(f"rm {label}")
        elif kind == "config" and all(w.endswith(" added") for w in what):
            where = "" if label == ".git/config" else f" --file {label}"
            undo += [f"git config{where} --unset-all {w.removesuffix(' added')}" for w in what]
        else:
            undo = []  # not plain: no commands
            break
    verb = ("remove" if all(k == "hook" for k, _, _ in found) else "restore") + (" them" if len(found) > 1 else " it")
    return f"{verb} ({'; '.join(undo)})" if undo else verb


def describe(found: list[tuple[str, str, list[str]]], when: str) -> str:
    """One line: the files and what changed in them `when` ("since the baseline", "during the run")."""
    if len(found) == 1:
        _, label, what = found[0]
        return f"{label} changed {when} ({_detail(what)})"
    items = [f"{label} ({_detail(what)})" for _, label, what in found]
    return f"{', '.join(items[:4])}{f' (+{len(items) - 4} more)' if len(items) > 4 else ''} changed {when}"


def refusal(root: Path, manifest: Mapping[str, object]) -> str | None:
    """Why a gated run may not start: the repository's config or hooks are not what the baseline
    pinned (None when they are, or when an older baseline pinned nothing)."""
    recorded = manifest.get("git_pins")
    if recorded is None:
        return None
    found = changes(cast(Pins, recorded), pins(root))  # the manifest's, as pins() wrote it
    if not found:
        return None
    return f"{describe(found, 'since the baseline')}: {_fix(found)}, {FIX}"


def changed_during(root: Path, watched: Pins | None) -> str | None:
    """What changed in the repository's config or hooks since `watched` (taken before the
    candidate ran), as a CRASH reason; None when nothing did."""
    if watched is None:
        return None
    found = changes(watched, pins(root))
    return describe(found, "during the run") if found else None
