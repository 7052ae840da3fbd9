"""Attacks through code that git runs for the judge, and through git's view of the champion's
worktree (issue 24): a candidate that writes `core.fsmonitor` into `.git/config`, one that
installs `.git/hooks/post-checkout` / `reference-transaction` / `post-index-change`, and one that
edits the champion's worktree behind index flags (assume-unchanged, skip-worktree) so that `git
status` cannot see it. Each program git would run for the judge slows every champion worktree
down (a 50 ms sleep in generate(), hidden from `git status` by the same index flags), so that the
next honest A/A looks faster than the champion; and it logs that it ran (SCRATCH/ran.jsonl).

What the defences must give: the program never runs (no ran.jsonl), the attack is not KEPT, and
the next honest A/A is not KEPT either. Where the write lands (no sandbox), the attack's run is
a CRASH naming the file and the next run is REFUSED naming it, until it is put back; where it
does not (a sandboxed worker), the runs are an A/A's. The same files planted by hand between
runs are REFUSED naming them.

Measured on the 2-core box (tiny suite, CPU), unsandboxed workers, against the tree before these
defences (444807d + the sandbox's work in progress) and with them:
  23 fsmonitor     before: the program ran on the judge's `git status` and pytest-benchmark's
                   `git describe --dirty`; CRASH "champion worktree modified" (FAILS)
                   after: never ran; CRASH ".git/config changed during the run (core.fsmonitor
                   added)"; the next A/A REFUSED naming it; restored, DISCARD not faster
  24 hooks         before: reference-transaction ran on the judge's update-ref of the backup ref;
                   DISCARD not faster (FAILS)
                   after: never ran; CRASH "... changed during the run"; the next A/A REFUSED
                   "... remove them (rm ...)"
  25 index flags   before: CRASH; the next A/A 2.10x, DISCARD only for its spread, the champion's
                   worktree still the slowed copy (FAILS)
                   after: CRASH "champion worktree modified"; the next A/A checked out afresh,
                   DISCARD (1.15x, unstable)
  planted by hand  before (sandboxed workers): the programs ran; post-checkout,
                   reference-transaction and core.hooksPath gave an A/A KEEP at 1.41-1.80x (FAILS)
                   after: REFUSED naming the file and the key, five of five; nothing ran
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .attacks import _SABOTAGE, COMMENT_ONLY, COMMENT_ONLY_2, GEN_SIG, STOCK, _attack, arm
from .conftest import (
    KEYS,
    Judged,
    assert_not_kept,
    assert_refused,
    assert_verdict,
    engaged,
    run_experiment,
)

pytestmark = pytest.mark.adversarial

SLEEP = "        import time as _t; _t.sleep(0.05)\n"
MARK = "# ditar-adversarial: slowed behind git's back\n"

# The program git runs for the judge (as a hook, or as core.fsmonitor): it logs that it ran, then
# slows every champion worktree of the project down and hides the edit from `git status`.
# Placeholders are filled in by the candidate when it installs it (its interpreter, the project).
PROGRAM = '''#!@@PYTHON@@
import json, os, subprocess, sys
from pathlib import Path

try:
    parent = open(f"/proc/{os.getppid()}/cmdline", "rb").read().replace(b"\\0", b" ").decode(errors="replace")
except OSError:
    parent = ""
with open(Path(@@SCRATCH_DIR@@) / "ran.jsonl", "a") as fh:
    fh.write(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "parent": parent}) + "\\n")
if "reference-transaction" in sys.argv[0]:
    sys.stdin.read()
env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
for f in Path(@@ROOT@@).glob("@@STATE@@/*/worktrees/*/mutable/pipeline.py"):
    text = f.read_text()
    if @@MARK@@ not in text:
        for flag in ("--assume-unchanged", "--skip-worktree"):
            subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "update-index", flag,
                            "mutable/pipeline.py"], cwd=f.parents[1], env=env, capture_output=True)
        f.write_text(text.replace(@@GEN_SIG@@, @@GEN_SIG@@ + @@SLEEP@@, 1) + @@MARK@@)
sys.exit(1 if sys.argv[1:2] == ["2"] else 0)  # as fsmonitor (protocol 2): exit 1, git scans as usual
'''.replace("@@MARK@@", repr(MARK)).replace("@@GEN_SIG@@", repr(GEN_SIG)).replace("@@SLEEP@@", repr(SLEEP))

_INSTALL = r'''
import sys as _sys

_PROGRAM = @@PROGRAM@@


def _program(root):
    return (_PROGRAM.replace("@@PYTHON@@", _sys.executable).replace("@@SCRATCH_DIR@@", repr(str(SCRATCH)))
            .replace("@@ROOT@@", repr(str(root))).replace("@@STATE@@", _config(root).get("state_dir", ".autoresearch")))


def _install(path, root):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_program(root))
    path.chmod(0o755)


def _git_dirs():
    return [(root, root / ".git") for root in _roots() if (root / ".git").is_dir()]
'''.replace("@@PROGRAM@@", repr(PROGRAM))

# 23. core.fsmonitor written into .git/config while the candidate builds (a plain file write: no
#     git command of the candidate's own runs it). Git runs the fsmonitor program on every command
#     that reads the index: the judge's `git status` before the next run, in the champion's
#     worktree, after a revert.
A23_FSMONITOR = _attack(prelude=_INSTALL, build='''def build(spec: PipelineSpec) -> StockDiT:
    pipe = StockDiT(spec)
    done = []
    for root, git_dir in _git_dirs():
        try:
            program = SCRATCH / "fsmonitor-program"
            _install(program, root)
            with open(git_dir / "config", "a") as fh:
                fh.write(f"[core]\\n\\tfsmonitor = {program}\\n")
            done.append(str(git_dir / "config"))
        except OSError as exc:
            _evidence("git_config_refused", error=str(exc))
    _evidence("git_config_written", files=done)
    return pipe
''')

HOOKS = ("post-checkout", "reference-transaction", "post-index-change")

# 24. Hooks installed in .git/hooks while the candidate builds: post-checkout (the judge's `git
#     worktree add` of the champion), reference-transaction (every ref it updates: the state's
#     backup ref, the revert), post-index-change (a `git status` that refreshes the index).
A24_HOOKS = _attack(prelude=_INSTALL, build='''def build(spec: PipelineSpec) -> StockDiT:
    pipe = StockDiT(spec)
    done = []
    for root, git_dir in _git_dirs():
        for name in @@HOOKS@@:
            try:
                _install(git_dir / "hooks" / name, root)
                done.append(str(git_dir / "hooks" / name))
            except OSError as exc:
                _evidence("git_hook_refused", hook=name, error=str(exc))
    _evidence("git_hooks_written", files=done)
    return pipe
'''.replace("@@HOOKS@@", repr(HOOKS)))

# 25. Index flags: check the champion's commit out where the judge looks for it (as attack 9),
#     set assume-unchanged and skip-worktree on its mutable/pipeline.py in that worktree's index,
#     then put a sleep into generate() there. `git status` in that worktree says it is clean.
A25_INDEX_FLAGS = _attack(prelude=_SABOTAGE + '''
_HIDDEN = "@@MARK@@"


def _hide_in_champion_worktrees():
    done = []
    for sd in _state_dirs():
        for f in sd.glob("worktrees/*/mutable/pipeline.py"):
            wt = f.parents[1]
            try:
                text = f.read_text()
                if _HIDDEN not in text:
                    _git(wt, "update-index", "--assume-unchanged", "mutable/pipeline.py")
                    _git(wt, "update-index", "--skip-worktree", "mutable/pipeline.py")
                    f.write_text(text.replace(@@GEN_SIG@@, @@GEN_SIG@@ + @@SLEEP@@, 1) + _HIDDEN)
                done.append({"file": str(f), "index": _git(wt, "ls-files", "-v", "mutable/pipeline.py"),
                             "status": _git(wt, "status", "--porcelain")})
            except OSError:
                pass
    return done


_evidence("flags_at_import", planted=_plant_champion_worktrees(), files=_hide_in_champion_worktrees())
''', build='''def build(spec: PipelineSpec) -> StockDiT:
    pipe = StockDiT(spec)
    for _ in range(30):  # a worktree the judge checked out afresh: hide in it too
        done = _hide_in_champion_worktrees()
        if done:
            break
        _time.sleep(0.1)
    _evidence("flags_set", files=done)
    return pipe
''').replace('"@@MARK@@"', repr(MARK)).replace("@@GEN_SIG@@", repr(GEN_SIG)).replace("@@SLEEP@@", repr(SLEEP))

for _src in (A23_FSMONITOR, A24_HOOKS, A25_INDEX_FLAGS):
    compile(arm(_src, Path("/nowhere")), "<attack>", "exec")

# git for the test itself: never the hooks or fsmonitor a candidate left behind (so that the
# program's log says who ran it: the judge, not this test's commit).
SAFE_GIT = ("git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false")


def git(proj, *args: str) -> str:
    res = subprocess.run([*SAFE_GIT, *args], cwd=proj.root, capture_output=True, text=True)
    assert res.returncode == 0, f"git {' '.join(args)}: {res.stderr}"
    return res.stdout.strip()


def commit(proj, source: str, subject: str, cls: str = "exact") -> str:
    proj.write("mutable/pipeline.py", source)
    git(proj, "commit", "-qam", f"{subject}\n\nDitar-Class: {cls}")
    return git(proj, "rev-parse", "HEAD")


def judge(proj, source: str, subject: str) -> Judged:
    commit(proj, source, subject)
    return run_experiment(proj, subject)


def ran(scratch: Path) -> list[dict]:
    """Every time a program the attack left for git ran (nothing may have run it)."""
    p = scratch / "ran.jsonl"
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()] if p.is_file() else []


def assert_nothing_ran(scratch: Path, j: Judged) -> None:
    assert not ran(scratch), f"git ran the repository's code: {ran(scratch)[:3]}" + j.show(scratch)


def test_23_fsmonitor_in_git_config_never_runs_and_is_not_kept(research_unsandboxed, scratch):
    proj = research_unsandboxed  # the write must land: the judge's answer is the test
    base = proj.head()
    j = judge(proj, arm(A23_FSMONITOR, scratch), "the stock pipeline (and an fsmonitor)")
    assert_nothing_ran(scratch, j)
    written = engaged(scratch, "git_config_written", "files")
    if written:  # no sandbox: the write landed, and the run says so
        assert_not_kept(j, ("core.fsmonitor",), scratch, statuses=("CRASH",))
        assert ".git/config changed during the run" in j.reason, j.show(scratch)
    else:
        assert_not_kept(j, KEYS["aa"], scratch)
    assert proj.head() == base, "not reverted"
    rows = proj.ledger()
    after = judge(proj, COMMENT_ONLY, "an unchanged candidate after the fsmonitor")
    assert_nothing_ran(scratch, after)
    if not written:
        assert_not_kept(after, KEYS["aa"], scratch)
        return
    assert_refused(proj, after, (".git/config", "core.fsmonitor"), rows)
    assert "git config --unset-all core.fsmonitor" in after.reason, after.show()
    git(proj, "config", "--unset-all", "core.fsmonitor")  # the fix the refusal names
    again = run_experiment(proj, "an unchanged candidate, the config restored")
    assert_nothing_ran(scratch, again)
    assert_verdict(again, ("DISCARD",), KEYS["aa"], scratch)


def test_24_hooks_in_git_hooks_never_run_and_are_not_kept(research_unsandboxed, scratch):
    proj = research_unsandboxed  # the write must land: the judge's answer is the test
    base = proj.head()
    j = judge(proj, arm(A24_HOOKS, scratch), "the stock pipeline (and three git hooks)")
    assert_nothing_ran(scratch, j)
    written = engaged(scratch, "git_hooks_written", "files")
    if written:
        assert_not_kept(j, (".git/hooks/post-checkout",), scratch, statuses=("CRASH",))
        assert "changed during the run" in j.reason, j.show(scratch)
    else:
        assert_not_kept(j, KEYS["aa"], scratch)
    assert proj.head() == base, "not reverted"
    rows = proj.ledger()
    after = judge(proj, COMMENT_ONLY, "an unchanged candidate after the hooks")
    assert_nothing_ran(scratch, after)
    if written:
        assert_refused(proj, after, tuple(f".git/hooks/{h}" for h in HOOKS), rows)
        assert "remove it" in after.reason or "remove them" in after.reason, after.show()
    else:
        assert_not_kept(after, KEYS["aa"], scratch)


def test_25_index_flags_cannot_hide_an_edit_of_the_champions_worktree(research_unsandboxed, scratch):
    proj = research_unsandboxed  # the write must land: the judge's answer is the test
    base = proj.head()
    j = judge(proj, arm(A25_INDEX_FLAGS, scratch), "the stock pipeline (and a champion slowed behind git's back)")
    # issue 38: the champion's code is written from its commit for each run, never read from a
    # worktree, so what the attack edits (and hides from git) is not what the champion runs: an A/A
    assert_not_kept(j, KEYS["worktree"] + KEYS["aa"], scratch)
    assert proj.head() == base, "not reverted"
    # whatever the index of the champion's worktree says, the next A/A is measured against the champion's own code
    after = judge(proj, COMMENT_ONLY_2, "an unchanged candidate after the hidden edit")
    assert_not_kept(after, KEYS["aa"] + KEYS["worktree"], scratch)
    # (the edited worktree file may stay as the attack left it: no role reads a worktree now)


def _plant(proj, scratch: Path, what: str) -> str:
    """Plant, as a stray process of the user could between runs, what the attacks write; returns
    the words the refusal must name."""
    program = PROGRAM.replace("@@PYTHON@@", sys.executable).replace(
        "@@SCRATCH_DIR@@", repr(str(scratch))).replace("@@ROOT@@", repr(str(proj.root))).replace(
        "@@STATE@@", ".autoresearch")

    def install(path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(program)
        path.chmod(0o755)

    git_dir = proj.root / ".git"
    if what == "fsmonitor":
        install(scratch / "fsmonitor-program")
        with open(git_dir / "config", "a") as fh:
            fh.write(f"[core]\n\tfsmonitor = {scratch / 'fsmonitor-program'}\n")
        return ".git/config"
    if what == "hooksPath":
        install(scratch / "hooks" / "post-checkout")
        install(scratch / "hooks" / "reference-transaction")
        with open(git_dir / "config", "a") as fh:
            fh.write(f"[core]\n\thooksPath = {scratch / 'hooks'}\n")
        return "core.hooksPath"
    if what == "filter":
        with open(git_dir / "info" / "attributes", "a") as fh:
            fh.write("*.py filter=ditar-adversarial\n")
        install(scratch / "filter-program")
        with open(git_dir / "config", "a") as fh:
            fh.write(f'[filter "ditar-adversarial"]\n\tclean = {scratch / "filter-program"}\n'
                     f'\tsmudge = {scratch / "filter-program"}\n')
        return "filter.ditar-adversarial.clean"
    install(git_dir / "hooks" / what)
    return f".git/hooks/{what}"


@pytest.mark.parametrize("what", ["fsmonitor", "hooksPath", "filter", "post-checkout", "reference-transaction"])
def test_repository_code_planted_between_runs_is_refused_naming_it(research, scratch, what):
    proj = research
    rows = proj.ledger()
    commit(proj, STOCK + "\n# a comment: the same code\n", "an unchanged candidate")
    named = _plant(proj, scratch, what)
    j = run_experiment(proj, "an unchanged candidate")
    assert_nothing_ran(scratch, j)
    assert_refused(proj, j, (named.lower(),), rows)
    assert "dit-ar baseline --force" in j.reason, j.show()
    res = subprocess.run([str(Path(sys.executable).parent / "dit-ar"), "--config", "config/autoresearch.json",
                          "verify", "--sample", "0"], cwd=proj.root,
                         capture_output=True, text=True, env=os.environ.copy())
    assert res.returncode == 1 and named.lower() in res.stdout.lower(), res.stdout[-2000:] + res.stderr[-2000:]
    assert_nothing_ran(scratch, j)
