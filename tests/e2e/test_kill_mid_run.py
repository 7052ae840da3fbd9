"""A judge killed with SIGKILL in the middle of a gated run: the next run finds a state it accepts
(long: a run killed at each phase), and no folder the killed judge made under /dev/shm outlives the
next run's start (issue 39: 56 were left after a day of runs)."""
import os
import signal
import subprocess
import time
from pathlib import Path

from pytest_ditar.runtime import boxdir

from candidates import REDUNDANT, STOCK
from conftest import research_project
from integration.loop.test_loop_integrity import _last


def _group(pgid: int) -> set[int]:
    """The live processes of process group `pgid`."""
    out = set()
    for d in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{d}/stat").read_text() if d.isdigit() else ""
        except OSError:
            continue
        if stat and int(stat.rsplit(")", 1)[1].split()[2]) == pgid:
            out.add(int(d))
    return out


def _left_by(pids: set[int]) -> list[str]:
    return sorted(n for n in os.listdir(boxdir.base()) if n.startswith(boxdir.PREFIX)
                  and int(n[len(boxdir.PREFIX):].split("-")[0]) in pids)


def test_kill_9_mid_run_leaves_a_state_the_next_run_accepts(pytester, model_cache, tmp_path_factory):
    proj = research_project(pytester, tmp_path_factory, mutable_source=REDUNDANT)
    sha = proj.commit_candidate(STOCK, "exact", "Drop the redundant pass")
    runs = proj.root / ".autoresearch/t/runs"
    killed: set[int] = set()
    # first kill: early (start-up or quality); second: once the quality tests have logged, i.e. in the lanes
    for ready in (lambda: True, lambda: any("test_quality" in p.read_text() for p in runs.glob("*/tests.log"))):
        p = subprocess.Popen(["dit-ar", "--config", "config/autoresearch.json", "experiment", "--classification",
                              "exact", "--description", "x"], cwd=proj.root, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        time.sleep(1.5)
        while not ready() and time.time() < deadline and p.poll() is None:
            time.sleep(0.05)
        killed |= _group(p.pid)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        st = proj.ditar("status")
        assert st.returncode == 0, st.stdout  # ledger chain and baseline still verify
        assert not list((proj.root / ".autoresearch/t").glob("champions/.*tmp*")), "half-written champion"
    decided = [r for r in proj.ledger() if r["commit"] == sha]
    swept = bool(decided)  # a run after the kills starts (and sweeps) below, either way
    if not decided:  # both kills landed before the decision: the next run judges the commit normally
        res = proj.ditar("experiment", "--classification", "exact", "--description", "Drop the redundant pass")
        assert _last(res).startswith("DITAR VERDICT: "), res.stdout[-2000:]  # KEEP on a quiet machine
        decided = [r for r in proj.ledger() if r["commit"] == sha]
    assert len(decided) == 1  # exactly one verdict for the commit, however the kills landed
    assert proj.ditar("status").returncode == 0
    if decided[0]["status"] == "KEEP":
        assert proj.head() == sha
    if swept:
        proj.commit_candidate((proj.root / "mutable/pipeline.py").read_text() + "\n# again\n", "exact", "again")
        res = proj.ditar("experiment", "--classification", "exact", "--description", "the same code again")
        assert _last(res).startswith("DITAR VERDICT: "), res.stdout[-2000:]
    assert killed and _left_by(killed) == [], _left_by(killed)  # the killed judges' folders, swept
