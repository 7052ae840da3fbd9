"""Guards checked before any candidate code runs: branch, clean tree, mutable-only diff,
fixed-path hashes, baseline integrity."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable, Mapping

from pytest_ditar.core.decision import GuardResult
from pytest_ditar.vcs import repo as gitops

_SKIP_PARTS = {"__pycache__", ".index", ".pytest_cache"}


def _files_under(root: Path, rel: str) -> list[Path]:
    p = root / rel
    if p.is_file():
        return [p]
    if not p.is_dir():
        return []
    return sorted(f for f in p.rglob("*") if f.is_file() and not (_SKIP_PARTS & set(f.relative_to(root).parts))
                  and f.suffix != ".pyc")


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


def check_guards(root: Path, *, branch_prefix: str, tag: str, mutable_paths: Iterable[str],
                 fixed_paths: Iterable[str], recorded_hashes: Mapping[str, str], baseline_commit: str | None,
                 baseline_problems: list[str]) -> list[GuardResult]:
    st = gitops.state(root)
    results = []
    expected = branch_prefix + tag
    results.append(GuardResult("branch", st.branch == expected,
                               "" if st.branch == expected else f"HEAD is on '{st.branch}', expected '{expected}'"))
    results.append(GuardResult("clean_tree", not st.dirty_paths,
                               "" if not st.dirty_paths else "uncommitted changes: " + ", ".join(st.dirty_paths[:5])))
    mutable_paths = list(mutable_paths)
    if baseline_commit and st.head:
        if not gitops.is_ancestor(root, baseline_commit):
            results.append(GuardResult("mutable_only", False, f"baseline commit {baseline_commit[:7]} is not an ancestor of HEAD"))
        else:
            outside = [p for p in gitops.changed_files(root, baseline_commit) if not is_mutable(p, mutable_paths)]
            results.append(GuardResult("mutable_only", not outside,
                                       "" if not outside else "edits outside mutable paths: " + ", ".join(outside[:5])))
    changes = fixed_path_changes(recorded_hashes, hash_fixed_paths(root, fixed_paths))
    results.append(GuardResult("fixed_paths", not changes,
                               "" if not changes else "fixed path modified: " + ", ".join(changes[:5])))
    results.append(GuardResult("baseline_integrity", not baseline_problems,
                               "" if not baseline_problems else baseline_problems[0]))
    return results


def feature_guard(dtypes: set[str], target: str) -> GuardResult:
    """Fail the gate when the candidate holds data types the target cannot run (FP8 on sm_86).

    `dtypes` comes from the candidate's worker (CandidateWorker.dtypes), which walks its objects."""
    from pytest_ditar.hardware.profiles import check_features, get_profile

    problems = check_features(dtypes, get_profile(target))
    return GuardResult("features", not problems, "; ".join(problems))
