"""Issue 49: champion drift against an anchor the agent never wrote.

The judge compared the champion's in-run time with the samples stored when it was kept, with a
tolerance, a CPU floor and a host-probe correction. Wrong both ways: a host that got busier after
the KEEP voided honest 1.2x wins (6 of 7 runs), while kept code that slows itself 10% after its KEEP
(a file under $HOME, the date) sat under the 25% CPU floor and the next plain candidate was KEPT at
1.1x. Now the baseline's own code (the anchor) is timed in the objective lane's rounds, and drift is
the champion's paired time over the anchor's against the same ratio recorded at its KEEP
(core.anchor): host load moves both, a self-slowing champion moves only its own.

(a) the self-slowing champion: the next A/A-like candidate is never KEPT;
(b) under a load started after the baseline (processes of short multi-threaded torch bursts), an
    honest exact 1.2x edit is KEPT (the gate's re-run rule applied once) and an A/A is not.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .attacks import sleeps_after
from .conftest import experiment, experiment_judged
from conftest import host_visible_dir, research_project, shared_perf

pytestmark = pytest.mark.adversarial

# the product's drift minimum (5%) and the twin on; rounds enough for the tail's first look (29) on a loaded box
PERF = {**shared_perf(twin=True), "drift_tolerance": 0.05, "max_rounds": 64, "lane_budget_s": 20.0}


def _anchor_figures(proj, sha: str) -> dict:
    """The objective lane's anchor figures from the run's summary.json (loop.perf.lanes._information)."""
    runs = sorted((proj.root / ".autoresearch/t/runs").glob(f"*-{sha[:7]}*/summary.json"))
    if not runs:
        return {}
    lane = json.loads(runs[-1].read_text())["lanes"]["latency_b1"]
    return {**lane.get("comparison", {}), "outcome": lane.get("outcome", {})}


def test_a_champion_that_slows_itself_after_its_keep_gets_no_later_candidate_kept(pytester, model_cache,
                                                                                   tmp_path_factory):
    from candidates import REDUNDANT, STOCK

    bomb = host_visible_dir("anchor-drift") / "bomb"  # under $HOME: every sandbox sees it, read-only
    slows = sleeps_after(f"        if __import__('os').path.exists({str(bomb)!r}):\n"
                         "            _t.sleep(0.10 * (_t.perf_counter() - _t0))\n", STOCK)
    proj = research_project(pytester, tmp_path_factory, mutable_source=REDUNDANT, config={"perf": PERF})
    first = experiment_judged(proj, slows, "Drop the redundant pass")
    assert first.status == "KEEP", first.show()  # a real 2x: its bomb not set yet
    kept = proj.head()
    bomb.write_text("the champion is 10% slower from now on\n")
    second = experiment(proj, STOCK, "The same pass, without the sleep")
    figures = _anchor_figures(proj, second.sha)
    anchor = figures.get("anchor") or {}
    print(f"[anchor] kept ratio {anchor.get('kept_ratio')}, now {anchor.get('champion_ratio')}, "
          f"drift {json.dumps(anchor.get('drift'))}, lane {figures.get('outcome', {}).get('verdict')}")
    assert second.status != "KEEP", second.show()
    assert proj.head() == kept
    assert anchor.get("kept_ratio") and anchor.get("champion_ratio"), figures  # the anchor was timed
    # the win the sleep handed the candidate is voided naming the drift; a lane its rounds did not
    # call faster by the median had nothing to void
    if figures.get("outcome", {}).get("cause") == "drift" or "champion drift against the anchor" in second.reason:
        assert "champion drift against the anchor: kept at" in second.reason, second.show()
    else:
        assert figures["outcome"]["verdict"] != "FASTER", figures


_BURSTS = """
import time, torch
torch.set_num_threads(2)
a = torch.randn(384, 384)
end = time.time() + {seconds}
while time.time() < end:
    t = time.perf_counter()
    while time.perf_counter() - t < 0.02:
        a @ a
    time.sleep(0.03)
"""


@pytest.fixture
def torch_bursts():
    """Starts two processes of short two-thread torch bursts (20 ms on, 30 ms off) when called;
    each is ended by its pid at teardown. (Three at 30/20 ms, beside the other helpers' tests on this
    2-core box, left a 1.2x undecidable twice in 20 s: a spread of 34% a round.)"""
    procs: list[subprocess.Popen] = []

    def start(seconds: float = 400.0) -> None:
        for _ in range(2):
            procs.append(subprocess.Popen([sys.executable, "-c", _BURSTS.format(seconds=seconds)],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    yield start
    for p in procs:
        p.kill()
        p.wait()


@pytest.mark.solo
def test_under_a_load_started_after_the_baseline_a_real_1_2x_is_kept_and_an_aa_is_not(pytester, model_cache,
                                                                                       tmp_path_factory, torch_bursts):
    from candidates import STOCK, slowed

    proj = research_project(pytester, tmp_path_factory, mutable_source=slowed(0.2),
                            config={"perf": {**PERF, "lane_budget_s": 90.0, "max_rounds": 128}})
    torch_bursts()  # the load starts after the baseline stored its samples
    win = experiment(proj, STOCK, "Drop the sleep: an exact 1.2x")
    for n in range(2):  # the re-run rule: a run not judged because of the host never counts, it runs again
        if win.status == "KEEP" or proj.ledger()[-1].get("unjudged") != "host":
            break
        win = experiment(proj, STOCK, f"Drop the sleep: an exact 1.2x, again ({n + 2})")
    figures = _anchor_figures(proj, win.sha)
    stored = figures.get("stored") or {}
    slowdown = stored.get("champion_in_run_median_s", 0.0) / (stored.get("champion_kept_median_s") or 1.0)
    print(f"[load] the champion's in-run median over its stored one: {slowdown:.2f}x; verdict: {win.last}")
    assert win.status == "KEEP", win.show()
    aa = experiment(proj, STOCK + "\n# the champion's code again\n", "The same code again")
    figures = _anchor_figures(proj, aa.sha)
    stored = figures.get("stored") or {}
    slowdown = stored.get("champion_in_run_median_s", 0.0) / (stored.get("champion_kept_median_s") or 1.0)
    print(f"[load] A/A: the champion's in-run median over its stored one: {slowdown:.2f}x; verdict: {aa.last}")
    assert aa.status != "KEEP", aa.show()
