"""A heavy tail is never a win (issue 39): the genuine lean loop with 10% of its batch-1 calls
sleeping 30 times their own time (its median call 2x faster, its mean call 1.5x slower) was KEPT or
passed `--ditar-guard` in 7 of 8 tries: a dozen rounds often hold one slow call or none, and a
bootstrap that only vetoes a loss shown never sees it. A lane that wins by its median must now
show its total time within the guard tolerance too (core.meantime.total_unproven), and the
objective lane's first look comes after the rounds that hit a 10% share at least once with
1 - alpha (core.meantime.tail_rounds). A real pipeline shows this shape by accident (a recompile
on a shape it has not seen, an allocator that defragments now and then), and the user pays the
mean.

Two shapes: every tenth call 30x (the issue's share and size, as an accident repeats: no run is
lucky enough to miss it), and a fifth of the calls at random 10x their own time."""
from __future__ import annotations

import pytest

from .attacks import REDUNDANT, sleeps_after
from .conftest import experiment
from conftest import research_project, shared_perf

pytestmark = pytest.mark.adversarial

EVERY_TENTH = sleeps_after("        if len(request.labels) == 1:\n"
                           "            self._calls = getattr(self, '_calls', 0) + 1\n"
                           "            if self._calls % 10 == 0:\n"
                           "                _t.sleep(30.0 * (_t.perf_counter() - _t0))\n")
A_FIFTH = sleeps_after("        if len(request.labels) == 1:\n"
                       "            if int.from_bytes(__import__('os').urandom(2), 'big') < 65536 // 5:\n"
                       "                _t.sleep(10.0 * (_t.perf_counter() - _t0))\n")

# the battery's slow baseline (dropping its redundant pass is a real 2x), with room for the tail
# rounds: alpha 0.01 puts the first look at 44 rounds, a budget that reaches them on a loaded box
PERF = shared_perf(max_rounds=64, lane_budget_s=60.0, alpha=0.01)  # its baseline taken whatever the load


@pytest.fixture
def tail_research(pytester, model_cache, tmp_path_factory):
    return research_project(pytester, tmp_path_factory, mutable_source=REDUNDANT, config={"perf": PERF})


@pytest.mark.parametrize("source", [EVERY_TENTH, A_FIFTH], ids=["every-tenth-call-30x", "a-fifth-at-random-10x"])
def test_a_median_win_with_a_heavy_tail_is_not_kept(tail_research, source):
    proj = tail_research
    base = proj.head()
    j = experiment(proj, source, "Drop the redundant pass")
    assert j.status != "KEEP", j.show()
    assert any("total time" in r for r in j.reasons), j.show()
    assert proj.head() == base


def test_the_guard_fails_it(tail_research):
    proj = tail_research
    proj.git("checkout", "-q", "-b", "feature")
    proj.write("mutable/pipeline.py", EVERY_TENTH)
    res = proj.pytest("--ditar-guard", "--ditar-tag=t")
    last = res.stdout.lines[-1] if res.stdout.lines else ""
    assert res.ret == 1 and last.startswith("DITAR GUARD: FAIL: lane latency_b1"), res.stdout.str()[-3000:]
    assert "total time" in last, last
