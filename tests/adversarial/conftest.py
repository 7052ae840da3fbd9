"""The adversarial battery's shared parts: the reason keywords the defences must use, the
`adversarial` marker, and helpers to judge a candidate and check that nothing was lost.

Reused from tests/conftest.py (imported as `conftest`: pytest loads it first, and this package's
own conftest is `adversarial.conftest`, so the names do not clash): research_project, Project.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import (  # tests/conftest.py (its `research` fixture serves here too)
    Project,
    not_judged,
    research_project,
    shared_perf,
)

# ---- what a verdict's reason must name, per attack (matched case-insensitively, as substrings) -------
# A/A comparisons (the cheat neutralised, the candidate no faster than the champion) may land
# UNSTABLE on a noisy shared host; "unstable" is accepted wherever the honest outcome is an A/A.
AA = ("not faster", "unstable")
KEYS: dict[str, tuple[str, ...]] = {
    "aa": AA,
    "caching": ("cach", *AA),  # caching / cache
    "precompute": ("cach", "precomput", "replay", "audit", *AA),
    # a candidate that replayed timed requests it predicted from the judge's memory was not stopped
    # by noise: the reason must name what gave it away (or the secret must stay out of its reach)
    "secret": ("secret", "predict", "cach", "replay", "precomput", "audit"),
    "clock": ("clock", *AA),
    "audit": ("audit",),
    "early_return": ("audit", "constant", "quality"),
    "interference": ("drift", "background", "unstable"),
    "champion_process": ("drift", "background", "unstable", "champion", "interfer", "signal", "stopped"),
    "worktree": ("worktree", "champion", "drift"),
    "config": ("config",),
    "fixed": ("fixed", "config"),
    "baseline": ("baseline", "anchor", "manifest"),
    "state": ("state",),
    "ledger": ("state", "ledger", "tamper"),
    "untracked": ("untracked",),
    "git": ("git", "head", "branch", "tamper", "moved", "amend"),
    "user_edit": ("dirty", "uncommitted", "edit", "quality"),
    # "quality": the rewritten references were not used (prevented or restored in time), so the
    # half-step candidate failed its exact contract like any honest half-step candidate
    "takeover": ("baseline", "worktree", "champion", "tamper", "state", "audit", "drift", "corrupt", "manifest",
                 "anchor", "holdout", "quality"),
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "adversarial: an attack on the gate by a candidate rewarded for KEEP "
                                       "(tests/adversarial); slow, runs dit-ar experiment end to end")


# ---- fixtures --------------------------------------------------------------------------------------------

@pytest.fixture
def scratch(tmp_path_factory: pytest.TempPathFactory):
    """A directory outside the project for the attack's evidence, cache and daemon pids; every
    process an attack left running (listed in its `pids`) is killed afterwards, by pid."""
    d = tmp_path_factory.mktemp("attack")
    yield d
    reap(d)


def reap(scratch: Path) -> None:
    """SIGKILL each daemon an attack listed as "pid sid", if that pid is still the same process
    (forked from a candidate worker, in the session the daemon made for itself)."""
    pids = scratch / "pids"
    if not pids.is_file():
        return
    for line in pids.read_text().splitlines():
        try:
            pid, sid = (int(x) for x in line.split())
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            session = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])
        except (OSError, ValueError):
            continue  # gone already, or a line cut short
        if b"worker_main" in cmd and session == sid:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


# The attacks are judged by the product's objective lane: the champion's twin on (the default). With
# it off, one reference process slowed for a lane's rounds on a loaded box reads as a win, and an
# A/A that any attack reduces to was once KEPT so (tests/adversarial/test_role_blind.py).
TWIN = {"perf": shared_perf(twin=True)}


@pytest.fixture
def research(pytester, model_cache, tmp_path_factory) -> Project:
    """tests/conftest.py's `research` (the stock pipeline's baseline stored), with the twin on."""
    return research_project(pytester, tmp_path_factory, config=TWIN)


@pytest.fixture
def research_unsandboxed(pytester, model_cache, tmp_path_factory) -> Project:
    """The stock research project with `"sandbox": "off"` set before its baseline: the workers run
    unsandboxed, so a candidate's writes outside its worker land. For the judge's second line (what
    it detects, restores and refuses when something changed behind it, as a user's stray process
    could), which the sandbox otherwise keeps candidates from reaching (tests/adversarial/test_sandbox.py)."""
    return research_project(pytester, tmp_path_factory, config={"sandbox": "off", **TWIN})


@pytest.fixture
def slow_research(pytester, model_cache, tmp_path_factory) -> Project:
    """A baseline that does a redundant full pass: dropping it is a real ~2x exact speedup. Its lane
    may run 15 s (48 rounds) instead of the suite's 5 s: on a loaded 2-core CI box 5 s bought 12
    rounds of a 55% spread, too few to decide even a 3x win at alpha / K."""

    from .attacks import REDUNDANT
    from conftest import shared_perf

    perf = shared_perf(max_rounds=48, lane_budget_s=15.0)  # its baseline taken whatever the box's load
    return research_project(pytester, tmp_path_factory, mutable_source=REDUNDANT, config={"perf": perf})


# ---- judging ---------------------------------------------------------------------------------------------

_VERDICT = re.compile(r"^DITAR VERDICT: (KEEP|DISCARD|CRASH)\b")


@dataclass
class Judged:
    sha: str
    res: subprocess.CompletedProcess
    last: str  # the run's last line
    status: str  # KEEP | DISCARD | CRASH | REFUSED | NONE (no verdict line: the judge died)
    reason: str  # the verdict line's reason, or the refusal
    reasons: list[str] = field(default_factory=list)  # every objection in the run's summary.json

    @property
    def why(self) -> str:
        """Everything the run said about why, lower-cased, for keyword checks; the stock phrases
        that name the champion only as the other side of a comparison are dropped, so "champion"
        matches a reason about the champion itself (its worktree, its drift)."""
        text = " | ".join([self.reason, *self.reasons]).lower()
        text = re.sub(r"\[(?:interleaved|stored)[^\]]*\]", "", text)
        return re.sub(r"(?:than|from|against) the champion|than champion", "", text)

    def names(self, keys: tuple[str, ...]) -> bool:
        return any(k in self.why for k in keys)

    def show(self, scratch: Path | None = None) -> str:
        ev = evidence(scratch) if scratch else []
        return (f"\nlast line: {self.last}\nreasons: {self.reasons}\nevidence: {json.dumps(ev)[:1500]}"
                f"\nstdout tail:\n{self.res.stdout[-2500:]}\nstderr tail:\n{self.res.stderr[-1500:]}")


def ditar(proj: Project, *args: str, config: str | Path = "config/autoresearch.json",
          timeout: float = 300) -> subprocess.CompletedProcess:
    """`dit-ar --config CONFIG ARGS` in the project, as a user runs it."""
    import shutil
    import sys

    exe = shutil.which("dit-ar") or str(Path(sys.executable).parent / "dit-ar")
    return subprocess.run([exe, "--config", str(config), *args], cwd=proj.root, capture_output=True, text=True,
                          timeout=timeout, env=os.environ.copy(), check=False)


def parse(out: str) -> tuple[str, str, str]:
    """(last line, status, reason) of a gated run's output."""
    lines = out.strip().splitlines()
    last = lines[-1] if lines else ""
    m = _VERDICT.match(last)
    if m:
        r = re.search(r'reason="((?:[^"\\]|\\.)*)"', last)
        reason = r.group(1).replace('\\"', '"').replace("\\\\", "\\") if r else ""
        return last, m.group(1), reason
    if last.startswith("DITAR REFUSED: "):
        return last, "REFUSED", last[len("DITAR REFUSED: "):]
    return last, "NONE", ""


def summary_reasons(proj: Project, sha: str) -> list[str]:
    runs = sorted((proj.root / ".autoresearch/t/runs").glob(f"*-{sha[:7]}*/summary.json"))
    if not runs:
        return []
    try:
        return list(json.loads(runs[-1].read_text()).get("reasons", []))
    except (OSError, ValueError):
        return []


def run_experiment(proj: Project, subject: str, cls: str = "exact",
                   config: str | Path = "config/autoresearch.json") -> Judged:
    """`dit-ar experiment` on the committed HEAD."""
    sha = proj.head()
    res = ditar(proj, "experiment", "--classification", cls, "--description", subject, config=config)
    last, status, reason = parse(res.stdout)
    j = Judged(sha, res, last, status, reason, summary_reasons(proj, sha))
    print(f"[adversarial] {subject!r}: {last}\n  reasons: {j.reasons}")  # shown with -rP / -s
    return j


def experiment(proj: Project, source: str, subject: str, cls: str = "exact",
               config: str | Path = "config/autoresearch.json") -> Judged:
    """Commit `source` as one hypothesis (with its Ditar-Class trailer) and judge it; an attack of
    attacks.py's kit is told where the project is, as the agent knows."""
    proj.commit_candidate(source.replace("@@PROJECT_ROOT@@", str(proj.root)), cls, subject)
    return run_experiment(proj, subject, cls, config)


def experiment_judged(proj: Project, source: str, subject: str, cls: str = "exact") -> Judged:
    """`experiment`, once more when its objective lane was UNSTABLE (not judged: the gate's rule is
    to run it again as it is), for the controls that need an honest win KEPT on a loaded box."""
    j = experiment(proj, source, subject, cls)
    if not_judged(j.last):
        j = experiment(proj, source, subject + ", once more", cls)
    return j


def evidence(scratch: Path | None) -> list[dict]:
    """What the attack logged (attacks.py's _evidence), oldest first."""
    p = scratch / "evidence.jsonl" if scratch else None
    if not p or not p.is_file():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


def engaged(scratch: Path, event: str, field_: str | None = None) -> bool:
    """Whether the attack did its trick this run: it logged `event` (with a non-empty `field_`).

    A defence may also make an attack impossible (a read-only tree, a sandboxed worker, fresh
    requests that never repeat): the candidate then computes honestly and the outcome is an
    A/A's, which the tests accept in place of the named cause."""
    return any(e.get("event") == event and (field_ is None or e.get(field_)) for e in evidence(scratch))


# ---- assertions ------------------------------------------------------------------------------------------

def assert_verdict(j: Judged, statuses: tuple[str, ...], keys: tuple[str, ...], scratch: Path | None = None) -> None:
    """The run ended on one of `statuses` and its reasons name the cause (one of `keys`)."""
    assert j.status in statuses, f"expected {'/'.join(statuses)}, got {j.status}" + j.show(scratch)
    assert j.names(keys), f"the reason names none of {keys}" + j.show(scratch)


def assert_not_kept(j: Judged, keys: tuple[str, ...], scratch: Path | None = None,
                    statuses: tuple[str, ...] = ("DISCARD", "CRASH")) -> None:
    """The attack did not win: a decided, non-KEEP verdict that names the cause."""
    assert j.status != "KEEP", "the attack was KEPT" + j.show(scratch)
    assert_verdict(j, statuses, keys, scratch)


def assert_refused(proj: Project, j: Judged, keys: tuple[str, ...], rows_before: list[dict]) -> None:
    """Refused: exit code 4, nothing recorded, nothing reverted."""
    assert j.status == "REFUSED" and j.res.returncode == 4, j.show()
    assert j.names(keys), f"the refusal names none of {keys}" + j.show()
    assert proj.head() == j.sha, "a refused run must leave the commit in place"
    assert proj.ledger() == rows_before, "a refused run must record nothing"


def assert_rows_kept(proj: Project, rows_before: list[dict]) -> list[dict]:
    """Every earlier ledger row is still there, unchanged and in order."""
    rows = proj.ledger()
    assert rows[:len(rows_before)] == rows_before, f"earlier ledger rows lost or changed: {rows}"
    return rows


def assert_decided_and_reverted(proj: Project, j: Judged, base: str, rows_before: list[dict]) -> None:
    """A DISCARD/CRASH: one new ledger row for the commit, the branch back on the champion."""
    rows = assert_rows_kept(proj, rows_before)
    assert [r["commit"] for r in rows[len(rows_before):]] == [j.sha], rows[len(rows_before):]
    assert rows[-1]["status"] == j.status
    assert proj.head() == base, "not reverted to the champion"
    assert proj.git("status", "--porcelain") == "", "the revert left the tree dirty"
