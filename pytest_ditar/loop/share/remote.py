"""`dit-ar fetch-state`: a fresh clone (an ephemeral CI runner) gets the research state from a remote.

The state directory is git-ignored, so a clone has none; its backup, refs/ditar/<tag>
(loop.integrity.backup), travels with `git push <remote> 'refs/ditar/*'`. This fetches those refs (fast-forward
only: a local backup that diverged is never overwritten), writes the tag's backup into the state
directory with loop.integrity.backup.restore, fetches the commits the state names where the clone lacks them
(a shallow checkout), and verifies the result with `dit-ar verify`'s checks. Then `pytest
--ditar-guard` has what it times against: the baseline snapshot and the champion's commit.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from pytest_ditar.config.project import Config
from pytest_ditar.core.errors import DitarError
from pytest_ditar.core.vocabulary import ENV_TAG
from pytest_ditar.loop.integrity import backup
from pytest_ditar.loop.run import champion
from pytest_ditar.loop.run.verify import state_checks
from pytest_ditar.store import statefiles
from pytest_ditar.store.ledger import Ledger
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.store.snapshot import load_snapshot
from pytest_ditar.vcs import queries, trees

PREFIX = "refs/ditar/"
COMMAND = "dit-ar fetch-state --remote origin"  # what a clone without the state is told to run


def missing_state(tag: str, state_dir: Path) -> str:
    """The refusal of a guard where the clone holds no state for `tag`: names the command that brings it."""
    return (f"no research state for tag {tag} in {state_dir} (a fresh clone has none: it is git-ignored); "
            f"bring it from the remote with `{COMMAND} --tag {tag}`, which fetches refs/ditar/{tag}")


def pick_tag(fetched: list[str], explicit: str | None) -> str:
    """The tag to restore: --tag, else DITAR_TAG, else the one tag the remote holds."""
    tag = explicit or os.environ.get(ENV_TAG)
    if tag:
        if tag not in fetched:
            raise DitarError(f"fetch-state: the remote holds no {PREFIX}{tag} "
                             f"(it holds: {', '.join(fetched) or 'none'}); "
                             f"push it from the research clone with `git push origin '{PREFIX}*'`")
        return tag
    if len(fetched) == 1:
        return fetched[0]
    if not fetched:
        raise DitarError(f"fetch-state: the remote holds no {PREFIX}* ref; push the research state from the research "
                         f"clone with `git push origin '{PREFIX}*'` (and its branch, autoresearch/<tag>)")
    raise DitarError(f"fetch-state: the remote holds several tags ({', '.join(fetched)}): name one with --tag")


def fetch_state(cfg: Config, remote: str, tag: str | None, *, force: bool = False,
                echo: Callable[[str], None] = print) -> tuple[TagPaths, bool]:
    """Fetch, restore and verify; returns the tag's paths and whether the state verifies."""
    root = cfg.root
    trees.fetch(root, remote, [f"{PREFIX}*:{PREFIX}*"])  # no '+': a diverged local backup is an error, not lost
    fetched = sorted(r[len(PREFIX):] for r in queries.refs_under(root, PREFIX))
    paths = TagPaths.of(root, cfg.state_dir, pick_tag(fetched, tag))
    if statefiles.backed_up(paths) and not force:  # caches and logs are no state
        raise DitarError(f"fetch-state: {paths.dir} exists; --force writes {PREFIX}{paths.tag} over it "
                         "(what it holds that the ref does not is removed)")
    commit = queries.ref_commit(root, backup.ref(paths))
    restored = backup.restore(root, paths, commit)
    echo(f"fetch-state: restored {backup.describe(restored) or 'nothing new'} from {remote} {PREFIX}{paths.tag} "
         f"({str(commit)[:7]}) into {paths.dir}")
    for sha in _named_commits(paths):
        if not queries.has_commit(root, sha):  # a shallow clone: the champion's build needs its commit
            try:
                trees.fetch(root, remote, [sha])
            except DitarError as exc:
                raise DitarError(f"fetch-state: commit {sha[:7]}, which the state names, is not in this clone and "
                                 f"{remote} would not send it ({exc}); clone with full history (actions/checkout "
                                 "fetch-depth: 0, GIT_DEPTH: 0) and push the research branch") from None
            echo(f"fetch-state: fetched commit {sha[:7]} from {remote}")
    failed = [c for c in state_checks(root, paths, echo=echo) if not c.ok]
    for c in failed:
        echo(c.line())
    return paths, not failed


def _named_commits(paths: TagPaths) -> list[str]:
    """The baseline's commit and the champion's (the last KEEP), which the guard builds."""
    try:
        base = load_snapshot(paths.baseline, "baseline", verify=False).manifest.get("git_sha")
        kept = champion.kept_commit(Ledger(paths.dir))
    except (DitarError, OSError):
        return []  # the checks that follow say what is wrong with the state
    return list(dict.fromkeys(str(c) for c in (kept, base) if c))
