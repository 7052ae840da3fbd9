"""Issue 50's first "Done when": from a fresh clone, with a CPU hog started after the baseline, a
newcomer who follows README.md and the `ditar: next:` lines alone reaches a KEEP of an honest 1.2x
edit within 5 minutes.

The newcomer's project is a scratch research project (tests/conftest.py's make_project: the tiny
suite, this checkout's mutable/, conftest.py and config), committed in an "upstream" folder and
`git clone`d into a fresh one. This test environment's venv stands in for the README's install
step (its `dit-ar` and `python` are first on PATH). The clone's perf settings are the product's
(config/autoresearch.json: the twin, the drift rule, a 60 s lane budget): with the shared test
settings' 5 s budget (tests/conftest.py's shared_perf) the baseline's A/A on a loaded 2-core box
resolves only wins of about 1.35x, and `baseline` refuses it (perf.max_baseline_win), so a 1.2x
could not be judged at all. The tag's zygote is kept warm as the product does (idle exit
shortened; it is ended with the test).

The honest 1.2x: the clone's baseline code sleeps 20% of its own call time after each call
(tests/candidates.py: slowed(0.2)); the newcomer's edit removes that (STOCK), outputs identical.

Steps, each read from the README's loop block (its lines run as written, `bash -c`): `doctor`,
`init --tag ...`, `baseline`; then the load starts (after the baseline, as the issue has it); the
edit; the smoke check; `try`; the commit with the trailer; `experiment`. Whenever a `ditar: next:`
line says to run something once more (not judged for the host's sake), the test does what the
line says, the command parsed from its backticks (never hard-coded here); it stops at KEEP, or
fails where the lines send the newcomer away from the idea (leave it, stop the load, drop the
edit): the issue asks for a KEEP with the load still running. The clock starts at `git clone`
(the issue's "within 5 minutes" of following the README); the time from the first `try` is
printed beside it.

Two loads: the issue's spinning hog (`python3 -c "while True: pass"`, one process), and several
processes of short multi-threaded torch bursts (what a shared CI box meets: a spinning hog barely
slows a short bursty worker, bursts do). Each runs in a session of its own, ends itself after
LOAD_LIFE_S, and is killed (its process group) in a `finally`, whatever happens.

Measured on the shared 2-core box (load 4-8 from other jobs besides the test's own): before the
anchored drift rule (i-drift), 0 of 2 torch-bursts runs and 1 of 2 spin runs kept the edit (two
UNSTABLE `try`s or experiments on "champion drift" 1.45-2.04x while the win read 1.18-1.22x, CI
well clear of 1; then `doctor`: "stop the other load" or the experiment's "leave the idea"); with
it, spin 2 of 2 KEPT (33, 85 s from the clone), torch bursts 3 of 5 (46, 48, 55 s) and 2 DISCARDED
as judged by the total-time rule (core.meantime): the candidate's 61 confirming calls, timed alone
after the paired rounds, met the bursts (mean call 1.09-1.14x its median against the champion's
0.96-1.01x) and the total's lower bound read 0.889-0.939x: the host's load charged as a loss.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import pytest_ditar
from pytest_ditar.runtime import zygote
from pytest_ditar.store.paths import TagPaths

from candidates import STOCK, slowed
from conftest import REPO, make_project
from integration.repo.test_docs_commands import extract

BUDGET_S = 300.0  # the "within 5 minutes"
LOAD_LIFE_S = 900  # each load ends itself after this long, even if nobody kills it
PREFIX = "ditar: next: "
BASELINES = 3  # `baseline` refused for the host's noise: taken again at most this often in all

# The torch bursts (/work/notes/burst_load.py, with a life bound and an owner check): N processes,
# each torch on 2 threads, 20 small matmuls then 4 ms asleep, over and over.
BURSTS = r"""
import multiprocessing as mp, os, sys, time

def worker(seconds, owner):
    import torch
    torch.set_num_threads(2)
    a = torch.randn(192, 192)
    end = time.time() + seconds
    while time.time() < end:
        try:
            os.kill(owner, 0)  # the test's process is gone (killed before its teardown): so is the load
        except ProcessLookupError:
            return
        for _ in range(20):
            a = torch.tanh(a @ a.T / 192)
        time.sleep(0.004)

if __name__ == "__main__":
    n, secs, owner = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    ps = [mp.Process(target=worker, args=(secs, owner)) for _ in range(n)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
"""


def _load_argv(kind: str) -> list[str]:
    if kind == "spin":  # the hog, as written, bounded in time
        return ["timeout", str(LOAD_LIFE_S), "python3", "-c", "while True: pass"]
    n = max(2, os.cpu_count() or 1)
    return [sys.executable, "-c", BURSTS, str(n), str(LOAD_LIFE_S), str(os.getpid())]


def readme_loop() -> dict[str, str]:
    """The README's loop commands, as written, by their first two words ('dit-ar try', 'git commit')."""
    cmds = [c.text for c in extract("README.md", (REPO / "README.md").read_text()) if c.marker is None]
    by = {}
    for text in cmds:
        key = " ".join(text.split()[:2])
        by.setdefault(key, text)  # the first of each: the loop block comes before any other
    for key in ("dit-ar doctor", "dit-ar init", "dit-ar baseline", "python -m", "dit-ar try", "git commit",
                "dit-ar experiment"):
        assert key in by, f"README.md's loop block no longer has a `{key} ...` line"
    assert "-m quality" in by["python -m"], by["python -m"]
    return by


def backticked(line: str) -> list[str]:
    return re.findall(r"`([^`]+)`", line)


@dataclass
class Step:
    at: float  # seconds since the clone, at the step's end
    took: float
    cmd: str
    rc: int
    next: str
    last: str
    lanes: list[str]  # the objective lane's line: its figures and why it decided as it did


@dataclass
class Newcomer:
    root: Path
    env: dict[str, str]
    t0: float
    steps: list[Step] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

    def run(self, cmd: str, timeout: float = 300) -> tuple[Step, str]:
        t = time.perf_counter()
        res = subprocess.run(["bash", "-c", cmd], cwd=self.root, env=self.env, capture_output=True, text=True,
                             timeout=timeout)
        out = res.stdout + res.stderr
        lines = res.stdout.strip().splitlines()
        nxt = [ln[len(PREFIX):] for ln in res.stdout.splitlines() if ln.startswith(PREFIX)]
        lanes = [ln for ln in res.stdout.splitlines() if ln.startswith("ditar: lane ")]
        step = Step(round(time.perf_counter() - self.t0, 1), round(time.perf_counter() - t, 1),
                    cmd.split("  #")[0].strip(), res.returncode, nxt[-1] if nxt else "", lines[-1] if lines else "",
                    lanes)
        self.steps.append(step)
        self.outputs.append(out)
        print(f"[{step.at:6.1f}s +{step.took:5.1f}s] $ {step.cmd}  -> exit {step.rc}")
        for ln in res.stdout.splitlines():
            if ln.startswith(("ditar: lane ", "host: ", "host ", "DITAR ", PREFIX, "baseline:", "ditar: baseline")):
                print("      " + ln)
        return step, out

    def log(self) -> str:
        return "\n".join(f"[{s.at:6.1f}s +{s.took:5.1f}s] exit {s.rc}: {s.cmd}\n      next: {s.next}\n"
                         + "".join(f"      {ln}\n" for ln in s.lanes) + f"      last: {s.last}" for s in self.steps)


def _sent_away(why: str, who: Newcomer, out: str) -> str:
    return f"{why}\n--- the newcomer's steps ---\n{who.log()}\n--- the last output ---\n{out[-4000:]}"


def _try_until_faster(who: Newcomer, readme: dict[str, str]) -> None:
    """`try` as the README writes it; an UNSTABLE outcome's next: line is followed as written."""
    cmd, tries = readme["dit-ar try"], 0
    while True:
        step, out = who.run(cmd)
        tries += 1
        outcome = step.last.split()[2] if step.last.startswith("DITAR TRY: ") else ""
        if outcome == "FASTER":
            said = backticked(step.next)
            assert any(s.startswith("dit-ar experiment --classification exact") for s in said), step.next
            return
        assert outcome == "UNSTABLE", _sent_away(f"try: {outcome or 'no outcome line'}: the newcomer drops the "
                                                 "honest 1.2x edit", who, out)
        said = backticked(step.next)
        assert said and said[0].startswith("dit-ar try") and "once more as it is" in step.next, step.next
        if tries == 1:
            continue  # "`dit-ar try` once more as it is"
        # "UNSTABLE again: `dit-ar doctor`, and do what its `host:` line says before a third try"
        assert tries == 2 and "dit-ar doctor" in said, _sent_away("try: UNSTABLE a third time", who, out)
        _, dout = who.run(next(s for s in said if s.startswith("dit-ar doctor")))
        host = next((ln for ln in dout.splitlines() if ln.startswith("host: ")), "")
        assert host.startswith("host: quiet") or " can be judged now" in host, _sent_away(
            f"doctor sends the newcomer away with the load still running: {host or 'no host: line'}", who, dout)


def _experiment_until_judged(who: Newcomer, readme: dict[str, str]) -> Step:
    """The README's commit and `experiment`; a run not judged is run once more as its next: line says."""
    commit, experiment = readme["git commit"], readme["dit-ar experiment"]
    step, out = who.run(commit)
    assert step.rc == 0, out
    while True:
        step, out = who.run(experiment)
        verdict = step.last.split()[2] if step.last.startswith("DITAR VERDICT: ") else ""
        if verdict == "KEEP":
            return step
        # not judged: "run it once more as it is: `git apply <run>/candidate.patch`, commit, the same experiment"
        applies = [s for s in backticked(step.next) if s.startswith("git apply ")]
        again = (verdict == "DISCARD" and "not judged" in step.next and len(applies) == 1
                 and "commit, the same experiment" in step.next and "leave" not in step.next)
        assert again, _sent_away(f"experiment: {step.last or 'no verdict line'}; next: {step.next}", who, out)
        assert step.at < 2 * BUDGET_S, _sent_away(f"no KEEP after {step.at:.0f}s of re-runs", who, out)
        s2, out = who.run(applies[0])
        assert s2.rc == 0, out
        s2, out = who.run(commit)
        assert s2.rc == 0, out


def _baseline(who: Newcomer, readme: dict[str, str]) -> None:
    """`baseline` as written; refused for its A/A noise (the host's other load, before ours), the
    newcomer does what the refusal says: `dit-ar doctor` measures the host now, then `baseline` again.
    BASELINES tries at most; the budget's clock runs throughout."""
    for _ in range(BASELINES):
        step, out = who.run(readme["dit-ar baseline"])
        if step.rc == 0:
            return
        said = [s for s in backticked(out.strip().splitlines()[-1]) if s.startswith("dit-ar doctor")]
        assert "A/A noise is too large" in out and said, _sent_away("baseline refused", who, out)
        who.run(said[0])
    raise AssertionError(_sent_away(f"baseline refused {BASELINES} times for the host's noise (before the test's "
                                    "load started: other work on this box)", who, out))


def _retire_zygote(root: Path, tag: str) -> None:
    try:
        rec = json.loads(TagPaths.of(root, ".autoresearch", tag).zygote_file.read_text())
    except (OSError, ValueError):
        return
    if isinstance(rec, dict):
        zygote.retire(rec)


@pytest.mark.solo  # its own load is what is under test: not beside another xdist worker's runs
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("load", ["spin", "torch-bursts"])
def test_a_newcomer_keeps_an_honest_1_2x_with_a_load_started_after_the_baseline(load, pytester, model_cache,
                                                                                tmp_path_factory, capsys):
    readme = readme_loop()
    perf = json.loads((REPO / "config/autoresearch.json").read_text())["perf"]  # the product's, as cloned
    upstream = tmp_path_factory.mktemp("upstream")
    make_project(pytester, root=upstream, mutable_source=slowed(0.2), config={"perf": perf})
    clone = tmp_path_factory.mktemp("newcomer") / "project"
    env = {**os.environ, "DITAR_CACHE": str(model_cache), "DITAR_ZYGOTE_IDLE_S": "300",
           "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
           # the newcomer's own git identity (their ~/.gitconfig)
           "GIT_AUTHOR_NAME": "newcomer", "GIT_AUTHOR_EMAIL": "newcomer@localhost",
           "GIT_COMMITTER_NAME": "newcomer", "GIT_COMMITTER_EMAIL": "newcomer@localhost"}
    for k in ("DITAR_TAG", "DITAR_CONFIG"):
        env.pop(k, None)
    tag = readme["dit-ar init"].split("--tag")[1].split()[0]
    proc = None
    with capsys.disabled():
        print(f"\nnewcomer, load {load!r} started after the baseline; clock from `git clone`")
        who = Newcomer(clone.parent, env, time.perf_counter())
        try:
            step, out = who.run(f"git clone -q {upstream} {clone.name}")
            assert step.rc == 0, out
            who.root = clone
            # the install step's stand-in: the clone's `python` and `dit-ar` are this environment's
            step, out = who.run('python -c "import pytest_ditar, sys; print(sys.prefix, pytest_ditar.__file__)"')
            assert step.rc == 0 and out.split() == [sys.prefix, str(Path(pytest_ditar.__file__))], out
            step, out = who.run(readme["dit-ar doctor"])  # before init and baseline: 1, naming what to do
            assert step.rc == 1 and "dit-ar init --tag" in out, out[-3000:]
            step, out = who.run(readme["dit-ar init"])
            assert step.rc == 0, out[-3000:]
            _baseline(who, readme)
            proc = subprocess.Popen(_load_argv(load), start_new_session=True, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            time.sleep(3.0)  # the bursts import torch first
            assert proc.poll() is None, "the load did not start"
            print(f"[{time.perf_counter() - who.t0:6.1f}s] load {load!r} running (pid {proc.pid}); "
                  "the edit: the 20% sleep removed (STOCK)")
            (clone / "mutable/pipeline.py").write_text(STOCK)  # "# edit mutable/ (one hypothesis)"
            step, out = who.run(readme["python -m"])  # the smoke check
            assert step.rc == 0 and any(s.startswith("dit-ar try --classification exact")
                                        for s in backticked(step.next)), out[-3000:]
            t_try = time.perf_counter()
            _try_until_faster(who, readme)
            kept = _experiment_until_judged(who, readme)
        finally:
            if proc is not None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # its own session: the load and its children
                except ProcessLookupError:
                    pass
                proc.wait(timeout=30)
            _retire_zygote(clone, tag)
        since_clone = kept.at
        since_try = time.perf_counter() - t_try
        print(f"KEEP {since_clone:.1f}s after `git clone`, {since_try:.1f}s after the first `try` "
              f"(load {load!r}): {kept.last}")
    assert kept.last.startswith("DITAR VERDICT: KEEP ")
    speedup = float(re.search(r"speedup=([\d.]+)x", kept.last).group(1))
    assert 1.05 < speedup < 1.5, kept.last  # the honest 1.2x, not something else
    assert since_clone < BUDGET_S, _sent_away(f"KEEP after {since_clone:.0f}s, over {BUDGET_S:.0f}s", who, "")
