"""A judge killed with SIGKILL in the middle of a gated run: the next run finds a state it accepts
(long: a run killed at each phase)."""
import os
import signal
import subprocess
import time

from candidates import REDUNDANT, STOCK
from conftest import research_project
from integration.loop.test_loop_integrity import _last


def test_kill_9_mid_run_leaves_a_state_the_next_run_accepts(pytester, model_cache, tmp_path_factory):
    proj = research_project(pytester, tmp_path_factory, mutable_source=REDUNDANT)
    sha = proj.commit_candidate(STOCK, "exact", "Drop the redundant pass")
    runs = proj.root / ".autoresearch/t/runs"
    # first kill: early (start-up or quality); second: once the quality tests have logged, i.e. in the lanes
    for ready in (lambda: True, lambda: any("test_quality" in p.read_text() for p in runs.glob("*/tests.log"))):
        p = subprocess.Popen(["dit-ar", "--config", "config/autoresearch.json", "experiment", "--classification",
                              "exact", "--description", "x"], cwd=proj.root, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        time.sleep(1.5)
        while not ready() and time.time() < deadline and p.poll() is None:
            time.sleep(0.05)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        st = proj.ditar("status")
        assert st.returncode == 0, st.stdout  # ledger chain and baseline still verify
        assert not list((proj.root / ".autoresearch/t").glob("champions/.*tmp*")), "half-written champion"
    decided = [r for r in proj.ledger() if r["commit"] == sha]
    if not decided:  # both kills landed before the decision: the next run judges the commit normally
        res = proj.ditar("experiment", "--classification", "exact", "--description", "Drop the redundant pass")
        assert _last(res).startswith("DITAR VERDICT: "), res.stdout[-2000:]  # KEEP on a quiet machine
        decided = [r for r in proj.ledger() if r["commit"] == sha]
    assert len(decided) == 1  # exactly one verdict for the commit, however the kills landed
    assert proj.ditar("status").returncode == 0
    if decided[0]["status"] == "KEEP":
        assert proj.head() == sha
