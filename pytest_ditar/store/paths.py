"""The state directory's layout: the one module that spells its names.

    <project root>/<cfg.state_dir>/        state root (".autoresearch"), git-ignored
      <tag>/                              one research tag (TagPaths)
        session.json                      init's record: branch, start commit, bound GPU, worktree
        ledger.jsonl  results.tsv  .ledger.lock
        baseline/                         the unmodified pipeline's snapshot
        champions/<commit>/               each kept commit's snapshot
        runs/<stamp>-<sha7>[-n]/          one run's logs, patch and summary
        profiles/<stamp>-<sha7>[-n]/      `dit-ar profile`'s trace.json and summary.json (never read by a verdict)
        worktrees/<sha12>/                checkouts of earlier commits (champion, baseline code)
        compile-cache/<device key>/       torch.compile's caches, shared by every worker of the tag
                                          on that device stack (a cache, never state)
        phase-quality.json                two-phase runs: pointer to the quality phase's record
        zygote.json                       the warm zygote the last recording run handed over (runtime.zygote)
        report/                           `dit-ar report`'s HTML

No pytest, git or torch here.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TagPaths", "state_root", "tag_dirs"]

SESSION_FILE = "session.json"
LEDGER_JSONL = "ledger.jsonl"
RESULTS_TSV = "results.tsv"
LEDGER_LOCK = ".ledger.lock"
BASELINE = "baseline"
CHAMPIONS = "champions"
RUNS = "runs"
PROFILES = "profiles"
WORKTREES = "worktrees"
PHASE_POINTER = "phase-quality.json"
REPORT = "report"
COMPILE_CACHE = "compile-cache"
ZYGOTE_FILE = "zygote.json"
TRIED_JSONL = "tried.jsonl"  # `dit-ar try`'s notes (store.tried): not state a verdict rests on


def state_root(project_root: Path, state_dir: str) -> Path:
    """<project root>/<state_dir>: every tag's directory lives under it."""
    return Path(project_root) / state_dir


@dataclass(frozen=True)
class TagPaths:
    """Where one tag's state lives; `dir` is <state root>/<tag>."""

    dir: Path

    @classmethod
    def of(cls, project_root: Path, state_dir: str, tag: str) -> TagPaths:
        return cls(state_root(project_root, state_dir) / tag)

    @property
    def tag(self) -> str:
        return self.dir.name

    @property
    def session_file(self) -> Path:
        return self.dir / SESSION_FILE

    @property
    def zygote_file(self) -> Path:
        return self.dir / ZYGOTE_FILE

    @property
    def ledger_jsonl(self) -> Path:
        return self.dir / LEDGER_JSONL

    @property
    def results_tsv(self) -> Path:
        return self.dir / RESULTS_TSV

    @property
    def ledger_lock(self) -> Path:
        return self.dir / LEDGER_LOCK

    @property
    def baseline(self) -> Path:
        return self.dir / BASELINE

    @property
    def champions(self) -> Path:
        return self.dir / CHAMPIONS

    def champion(self, commit: str) -> Path:
        return self.champions / commit

    @property
    def runs(self) -> Path:
        return self.dir / RUNS

    def new_run_dir(self, head: str | None) -> Path:
        """Create and return runs/<UTC stamp>-<sha7>, suffixed -2, -3.. when that exists already."""
        return _new_stamped_dir(self.runs, head)

    def newest_run(self, commit: str) -> Path | None:
        """The newest run dir of `commit` (a sha or its first 7) that holds a summary.json; a change
        re-run after an UNSTABLE lane has a run dir of its own, and the newest is the one that counts."""
        runs = self.runs
        mine = [d for d in runs.glob(f"*-{commit[:7]}*") if (d / "summary.json").is_file()] if runs.is_dir() else []
        return max(mine, key=lambda d: (d / "summary.json").stat().st_mtime) if mine else None

    @property
    def profiles(self) -> Path:
        return self.dir / PROFILES

    def new_profile_dir(self, commit: str | None) -> Path:
        """Create and return profiles/<UTC stamp>-<sha7> (`dit-ar profile`), suffixed like a run's."""
        return _new_stamped_dir(self.profiles, commit)

    def worktree(self, commit: str) -> Path:
        # 12 hex digits: unique in any real repository, short enough for readable paths.
        return self.dir / WORKTREES / commit[:12]

    def compile_cache(self, device_key: str) -> Path:
        """Inductor's and Triton's cache directories for one device stack (hardware.cachekey):
        the candidate and the champion compile into it, so each graph compiles once per machine."""
        return self.dir / COMPILE_CACHE / device_key

    @property
    def phase_pointer(self) -> Path:
        return self.dir / PHASE_POINTER

    @property
    def report(self) -> Path:
        return self.dir / REPORT


def _new_stamped_dir(parent: Path, commit: str | None) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = f"{stamp}-{(commit or 'nohead')[:7]}"
    d, n = parent / base, 1
    while d.exists():
        n += 1
        d = parent / f"{base}-{n}"
    d.mkdir(parents=True)
    return d


def tag_dirs(root: Path) -> list[TagPaths]:
    """The tags under a state root that `dit-ar init` created (they have a session file)."""
    if not root.is_dir():
        return []
    return [TagPaths(p) for p in sorted(root.iterdir()) if p.is_dir() and (p / SESSION_FILE).is_file()]
