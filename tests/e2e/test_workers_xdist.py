"""Candidate code runs in a worker under pytest-xdist too (long: a sharded gated run)."""
from __future__ import annotations

import sys

import pytest

from conftest import research_project, verdict_line
from e2e.test_workers import assert_outside_judge, recording, records


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_candidate_code_runs_in_a_worker_under_xdist(pytester, model_cache, tmp_path_factory):
    proj = research_project(pytester, tmp_path_factory)
    proj.commit_candidate(recording(), "exact", "record where the candidate runs")
    # a gated run (its worker logs are kept) whose quality phase is sharded over two xdist workers
    res = proj.ditar("experiment", "--workers", "2", "--classification", "exact", "--description", "where")
    verdict_line(res.stdout)
    recs = records(proj.root)
    assert_outside_judge(recs)
    builds = [r for r in recs if r["event"] == "build" and r["worker"] == "candidate"]
    assert {"gw0", "gw1"} <= {r["judge"] for r in builds}, builds  # one worker per xdist worker
