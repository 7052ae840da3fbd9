"""Checks made before any candidate code runs. Refusals (nothing recorded, nothing reverted): a
config file other than the repository's, the branch, a dirty tree, more than one commit above the
champion. Guards on the candidate's own diff (judged: DISCARD and revert): mutable-only, fixed
paths."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from pytest_ditar.config.project import Config
from pytest_ditar.core import rerun
from pytest_ditar.core.decision import GuardResult
from pytest_ditar.hardware.profiles import check_features, get_profile
from pytest_ditar.loop.integrity import backup
from pytest_ditar.store.paths import TagPaths
from pytest_ditar.store.records import LedgerRow
from pytest_ditar.vcs import queries, trees

_SKIP_PARTS = {"__pycache__", ".index", ".pytest_cache"}


def _files_under(root: Path, rel: str) -> list[Path]:
    p = root / rel
    if p.is_file():
        return [p]
    if not p.is_dir():
        return []
    # every file, git-ignored ones and stray bytecode beside a source included; `__pycache__` is never
    # loaded by the judge (pytest_ditar's loader, plugin.hooks drops pytest's rewrite caches)
    return sorted(f for f in p.rglob("*") if f.is_file() and not (_SKIP_PARTS & set(f.relative_to(root).parts)))


def hash_fixed_paths(root: Path, fixed_paths: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for rel in fixed_paths:
        for f in _files_under(root, rel):
            out[f.relative_to(root).as_posix()] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def fixed_path_changes(recorded: Mapping[str, str], current: Mapping[str, str]) -> list[str]:
    changes = [f"{p} changed" for p in sorted(recorded) if p in current and current[p] != recorded[p]]
    changes += [f"{p} deleted" for p in sorted(recorded) if p not in current]
    changes += [f"{p} added" for p in sorted(current) if p not in recorded]
    return changes


def is_mutable(path: str, mutable_paths: Iterable[str]) -> bool:
    for m in mutable_paths:
        m = m.rstrip("/")
        if path == m or path.startswith(m + "/"):
            return True
    return False


def config_refusal(cfg: Config, toplevel: Path | None) -> str | None:
    """Why `cfg` may not judge a gated run, or None: a gated run uses the repository's own
    config file (<root>/config/autoresearch.json), not one passed from elsewhere, and a `root`
    key may not move the project away from the file's own."""
    path, top = cfg.path.resolve(), Path(toplevel or cfg.root).resolve()
    if not path.is_relative_to(top):
        return (f"config {path} is outside the repository {top}: a gated run uses only {cfg.repo_config} "
                "(drop --config, or run report-only off the research branch)")
    if cfg.root.resolve() != cfg.own_root.resolve():
        return (f"config {path} sets root to {cfg.root}, not its own project {cfg.own_root}: a gated run uses "
                "the project its config file lives in (remove 'root' from it)")
    if path != cfg.repo_config.resolve():
        return (f"config {path} is not the repository's config file {cfg.repo_config}: "
                "a gated run uses only that file (drop --config)")
    return None


def git_refusal(st: queries.RepoState, expected_branch: str, at_champion: bool = False) -> str | None:
    """A branch or tree the gate cannot judge cleanly: refused before anything is recorded or
    reverted (reverting another branch, or over uncommitted work, would lose the user's work).
    `at_champion`: HEAD is the champion (or the baseline), so an edit is a new candidate, never an
    amend of the kept commit (which rewrites it and is refused next)."""
    if st.branch != expected_branch:
        return f"guard branch: HEAD is on '{st.branch}', expected '{expected_branch}': git checkout {expected_branch}"
    tracked = [p for p in st.dirty_paths if p not in st.untracked]
    if tracked:
        how = ("HEAD is the champion, kept as it is: commit them as a new candidate (git commit -am "
               "'<hypothesis>' with the Ditar-Class trailer)" if at_champion else
               "fold them into the candidate (git commit --amend)")
        return f"guard clean_tree: uncommitted changes: {', '.join(tracked[:5])}: {how}, or stash them (git stash)"
    if st.untracked:
        more = f" (+{len(st.untracked) - 1} more)" if len(st.untracked) > 1 else ""
        return f"guard clean_tree: untracked file {st.untracked[0]}{more}: commit it, delete it or add it to .gitignore"
    return None


def hidden_refusal(root: Path, st: queries.RepoState, mutable_paths: Iterable[str]) -> str | None:
    """The candidate's files must be its commit's by content, not only in git's view: an edit that
    an index flag (assume-unchanged, skip-worktree) hides from `git status`, or a git-ignored file
    the candidate could import, is refused like any dirty tree. Bytecode caches are the
    interpreter's (the workers write none)."""
    if not st.head:
        return None
    found = trees.content_changes(root, st.head, st.toplevel or root, under=list(mutable_paths), skip=_SKIP_PARTS)
    if not found:
        return None
    path, _, what = found[0].rpartition(" ")
    more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
    if what == "added":
        return (f"guard clean_tree: {path}{more} is not in HEAD {st.head[:7]} and git ignores it, "
                "yet the candidate can import it: commit it or delete it")
    return (f"guard clean_tree: {path}{more} is {what} against HEAD {st.head[:7]} though git status shows no change "
            f"(an index flag: assume-unchanged or skip-worktree): git update-index --no-assume-unchanged "
            f"--no-skip-worktree {path}, then commit or stash it")


MAX_WALK = 50  # commits looked at above the champion before the count is given up


def one_commit_refusal(root: Path, st: queries.RepoState, champion: str,
                       rows: Iterable[LedgerRow] = (), paths: TagPaths | None = None) -> str | None:
    """HEAD must be one commit above the champion. Otherwise the refusal says what the state is
    and the one command that fixes it: a commit left in place below HEAD (judged DISCARD/CRASH
    by the ledger but never reverted, or the candidate of a run that ended without a verdict, as
    the state's backup in `paths` tells) is dropped with a rebase, several new commits are
    squashed into one, and a branch that no longer holds the champion gets its candidate moved
    onto it."""
    if st.parent == champion:
        return None
    head, c7 = str(st.head), champion[:7]
    rows = list(rows)
    left_why = {r.commit: f"recorded as {r.status} but never reverted (a revert that failed, or "
                          "--ditar-no-revert)" for r in rows if r.status in ("DISCARD", "CRASH")}
    mark = backup.marker(root, paths) if paths is not None else None  # the last gated run's commit
    if mark is not None and mark.head and mark.head not in {r.commit for r in rows}:
        left_why[mark.head] = "the candidate of a run that ended without a verdict (interrupted or killed)"
    if not queries.is_ancestor(root, champion, head):
        return (f"guard one_commit: HEAD {head[:7]}'s parent {str(st.parent)[:7]} is not the champion {c7}, and the "
                f"champion is not in HEAD's history (the branch was moved or rebuilt): put the candidate on the "
                f"champion: git rebase --onto {c7} {str(st.parent)[:7]}")
    above = []  # HEAD's ancestors above the champion, newest first
    for k in range(1, MAX_WALK + 1):
        sha = queries.ref_commit(root, f"{head}~{k}")
        if sha is None or sha == champion:
            break
        above.append(sha)
    else:
        return (f"guard one_commit: HEAD {head[:7]} is more than {MAX_WALK} commits above the champion {c7}: "
                f"go back to it: git reset --hard {c7}")
    left = [sha for sha in above if sha in left_why]
    if left:  # the newest such commit below HEAD: it and all below it go, the commits after it stay
        newest = left[0]
        return (f"guard one_commit: HEAD {head[:7]} is {len(above) + 1} commits above the champion {c7}; "
                f"{newest[:7]} below it is {left_why[newest]}: drop it (and what lies below it), keeping the commits "
                f"after it: "
                f"git rebase --onto {c7} {newest[:7]}")
    return (f"guard one_commit: HEAD {head[:7]} is {len(above) + 1} commits above the champion {c7} (none of them "
            f"judged yet; one hypothesis per commit): squash them into one: git reset --soft {c7} && git commit")


@dataclass(frozen=True)
class ConfigPin:
    """The config file against the baseline's record of it: at most one of refusal and guard."""
    refusal: str | None = None  # changed behind the candidate's commit: nothing to judge
    guard: GuardResult | None = None  # changed by the candidate's commit: a guard on its own diff
    note: str | None = None  # an older baseline that recorded no hash


def config_pin(cfg: Config, recorded: str | None, st: queries.RepoState, baseline_commit: str | None) -> ConfigPin:
    """A gated run uses the repository's config file at the hash the baseline recorded."""
    if not recorded:
        return ConfigPin(note="ditar: note: the baseline records no config_sha256 (an older baseline): "
                              "the config is not pinned; re-baseline with a new tag to pin it")
    current = cfg.repo_config_sha256()
    if current == recorded:
        return ConfigPin()
    rel = cfg.repo_config.relative_to(st.toplevel or cfg.root).as_posix()
    now = f"sha256 {current[:12]}" if current else "missing"
    if st.parent and st.head and rel in queries.changed_files(cfg.root, st.parent, st.head):
        return ConfigPin(guard=GuardResult("config", False, f"{rel} changed by the candidate ({now}, the baseline's "
                                                            f"{recorded[:12]})"))
    c7 = str(baseline_commit)[:7]
    return ConfigPin(refusal=f"{rel} ({now}) differs from the baseline's {recorded[:12]}: "
                             f"restore {rel} from the baseline commit {c7} (git checkout {c7} -- {rel}), "
                             "or re-baseline with a new tag")


def check_guards(root: Path, *, mutable_paths: Iterable[str], fixed_paths: Iterable[str],
                 recorded_hashes: Mapping[str, str], baseline_commit: str | None) -> list[GuardResult]:
    """The guards on the candidate's own diff: a violation is judged (DISCARD, reverted)."""
    st = queries.state(root)
    results = []
    mutable_paths = list(mutable_paths)
    if baseline_commit and st.head:
        if not queries.is_ancestor(root, baseline_commit):
            results.append(GuardResult("mutable_only", False,
                                       f"baseline commit {baseline_commit[:7]} is not an ancestor of HEAD"))
        else:
            changed = queries.changed_files(root, baseline_commit)
            outside = [p for p in changed if not is_mutable(p, mutable_paths)]
            results.append(GuardResult("mutable_only", not outside,
                                       "" if not outside else "edits outside mutable paths: " + ", ".join(outside[:5])))
            # the judge never collects a mutable path (loop.integrity.hermetic), and a conftest there is never
            # its to load: one in the candidate's diff is an attempt, judged as such
            plugins = [p for p in changed if is_mutable(p, mutable_paths) and p.rsplit("/", 1)[-1] == "conftest.py"
                       and (root / p).exists()]
            results.append(GuardResult("judge_code", not plugins, "" if not plugins else
                                       "a conftest.py under a mutable path (pytest would run it in the judge): "
                                       + ", ".join(plugins[:5])))
    changes = fixed_path_changes(recorded_hashes, hash_fixed_paths(root, fixed_paths))
    results.append(GuardResult("fixed_paths", not changes,
                               "" if not changes else "fixed path modified: " + ", ".join(changes[:5])))
    return results


def feature_guard(dtypes: set[str], target: str) -> GuardResult:
    """Fail the gate when the candidate holds data types the target cannot run (FP8 on sm_86).

    `dtypes` comes from the candidate's worker (CandidateWorker.dtypes), which walks its objects."""
    problems = check_features(dtypes, get_profile(target))
    return GuardResult("features", not problems, "; ".join(problems))


def repeat_refusal(root: Path, head: str, champion: str, rows: Iterable[LedgerRow],
                   since: str | None = None) -> str | None:
    """The change at HEAD was judged on this champion already, or left unjudged twice (core.rerun)."""
    return rerun.refusal(rows, rerun.patch_key(queries.diff_patch(root, champion, head)), champion, since)
