"""Group lanes (`gpus: 2`) under the judge (issue 30), on CPU: two gloo ranks a side.

The attacks first, each a candidate that spans two ranks and is judged through `dit-ar experiment`
with a two-rank objective lane on the tiny suite: one that slows its own clock, one that answers
a repeated request from a cache, one whose rank 1 sends garbage to rank 0 only where it is timed
(the quality corpus runs in one process and passes), and ranks that die or hang. Then the
defences they meet: every rank's build() in a worker of the judge's, a call timed on the judge's
clock to the last rank's reply, fresh requests, the audit of every timed output, the caching
probe, and a CRASH that leaves nothing running.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
from pathlib import Path

import pytest
import yaml

from candidates import SLOWER
from conftest import REPO, Project, make_project, small_suite

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bubblewrap and /proc: Linux only")

LANE = "split_b1"
MARK = "DITAR-TEST-RANK "

# Every rank says where its build() and generate() ran: its worker's log, kept beside the run.
PROVENANCE = f'''
import json, os, sys
import torch.distributed as dist
from pytest_ditar.demo.candidates.cfg_split import CfgSplitDiT


def _say(event):
    on = dist.is_available() and dist.is_initialized()
    print("{MARK}" + json.dumps({{"event": event, "pid": os.getpid(), "argv0": sys.argv[0],
                                  "rank": dist.get_rank() if on else None,
                                  "world": dist.get_world_size() if on else None,
                                  "env_rank": os.environ.get("RANK"), "procs": len([p for p in os.listdir("/proc")
                                                                                   if p.isdigit()])}}), flush=True)


class Recorded(CfgSplitDiT):
    def generate(self, request):
        _say("generate")
        return super().generate(request)


def build(spec):
    _say("build")
    return Recorded(spec)
'''

# The stock pipeline with a second full pass (twice its work, in the same pattern as the champion's,
# so no host load can favour it), every clock of its own processes at a tenth of the speed.
CLOCK = SLOWER + '''

_build = build


def build(spec):
    import time

    real_perf, real_mono = time.perf_counter, time.monotonic
    t0 = real_perf()
    time.perf_counter = lambda: t0 + (real_perf() - t0) / 10
    time.monotonic = lambda: t0 + (real_mono() - t0) / 10
    return _build(spec)
'''

# Every rank remembers its answers: a request seen before costs nothing (no collective either).
CACHE = '''
from pytest_ditar.demo.candidates.cfg_split import CfgSplitDiT


class Cached(CfgSplitDiT):
    memo = {}

    def generate(self, request):
        key = (tuple(request.labels), tuple(request.seeds), request.steps)
        if key not in self.memo:
            self.memo[key] = super().generate(request)
        return self.memo[key]


def build(spec):
    return Cached(spec)
'''

# Rank 1's half of every step is noise, only in a group: quality (one process) passes.
GARBAGE = '''
import torch
import torch.distributed as dist
from pytest_ditar.demo.candidates.cfg_split import CfgSplitDiT


class Garbage(CfgSplitDiT):
    def _transformer(self, x, t, class_emb):
        out = super()._transformer(x, t, class_emb)
        if dist.is_initialized() and dist.get_rank() == 1:
            return torch.randn_like(out)
        return out


def build(spec):
    return Garbage(spec)
'''

RANK1 = '''
import os, time
import torch.distributed as dist
from pytest_ditar.demo.candidates.cfg_split import CfgSplitDiT


class Rank1(CfgSplitDiT):
    def generate(self, request):
        if dist.is_initialized() and dist.get_rank() == 1:
            {action}
        return super().generate(request)


def build(spec):
    return Rank1(spec)
'''
DIES = RANK1.format(action="os._exit(3)")
HANGS = RANK1.format(action="time.sleep(3600)")

_TEMPLATE: dict[str, Path] = {}


def group_project(pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory) -> Project:
    """A research project whose objective lane runs two ranks a side, its baseline stored (built
    once, then copied: the baseline is deterministic)."""
    if "t" not in _TEMPLATE:
        root = tmp_path_factory.mktemp("group-template")
        proj = make_project(pytester, root=root, config={"objective_lane": LANE})
        suite = small_suite()
        suite["lanes"] = [{"name": LANE, "batch": 1, "repeats": 12, "warmup": 1, "gpus": 2}]
        proj.write("suites/tiny/suite.yaml", yaml.safe_dump(suite, sort_keys=False))
        proj.git("commit", "-qam", "a two-rank objective lane")
        for cmd in (("init", "--tag", "t"), ("baseline",)):
            res = proj.ditar(*cmd)
            assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        _TEMPLATE["t"] = root
    shutil.copytree(_TEMPLATE["t"], pytester.path, symlinks=True, dirs_exist_ok=True)
    proj = Project(pytester.path, pytester)
    # the baseline's A/A of the lane ran the stock group against itself, two ranks a side
    lanes = json.loads((proj.root / ".autoresearch/t/baseline/lanes.json").read_text())
    assert lanes[LANE]["measurement"]["ranks"] == 2
    return proj


@pytest.fixture
def proj(pytester, model_cache, tmp_path_factory, monkeypatch) -> Project:
    # no zygote kept between its runs: _leftovers reads every process of the package whose environment
    # names the project (a kept zygote's HOME is pytester's, the project's root)
    monkeypatch.setenv("DITAR_ZYGOTE_IDLE_S", "0")
    return group_project(pytester, tmp_path_factory)


def _summary(proj: Project) -> dict:
    run = sorted((proj.root / ".autoresearch/t/runs").glob("*/summary.json"), key=lambda p: p.stat().st_mtime)[-1]
    return json.loads(run.read_text())


def _lane(proj: Project) -> dict:
    return _summary(proj)["lanes"][LANE]


def _leftovers(root: Path) -> list[str]:
    """Processes of this project's workers still alive: a worker's environment names the
    project's state directory (its compile cache), the judge's test process's does not."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            env = Path(f"/proc/{p}/environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "pytest_ditar.runtime" in cmd + " " or "worker_main" in cmd:
            if str(root) in env:
                out.append(f"{p}: {cmd}")
    return out


def test_every_rank_builds_in_a_worker_and_the_group_is_timed_beside_a_champion_group(proj):
    sha, res, line = proj.experiment(PROVENANCE, "exact", "CFG split over two ranks")
    assert line.startswith(("DITAR VERDICT: KEEP", "DITAR VERDICT: DISCARD")) and "quality=6/6" in line, \
        res.stdout[-3000:] + res.stderr[-2000:]
    recs = []
    for log in sorted(proj.root.glob(".autoresearch/t/runs/*/workers/*/*.log")):
        recs += [{**json.loads(x[len(MARK):]), "worker": log.stem} for x in log.read_text().splitlines()
                 if x.startswith(MARK)]
    builds = [r for r in recs if r["event"] == "build"]
    assert all(r["argv0"].endswith("worker_main.py") for r in recs), recs  # a worker, never the judge
    grouped = sorted(r["rank"] for r in builds if r["worker"].startswith("candidate-2ranks.rank"))
    assert grouped == [0, 1], builds  # each rank built once, in the group's worker
    assert all(r["world"] == 2 and str(r["rank"]) == r["env_rank"] for r in builds if r["rank"] is not None)
    assert any(r["worker"] == "candidate" and r["rank"] is None for r in builds), builds  # quality: one process
    assert all(r["procs"] <= 10 for r in recs), recs  # the group's sandbox: its own PID namespace
    lane = _lane(proj)
    m = lane["measurement"]
    assert lane["outcome"]["verdict"] != "REJECTED", lane["outcome"]  # every timed output passed its audit
    assert m["ranks"] == 2, m
    assert lane["champion_source"] == "interleaved" and len(m["champion_samples"]) == len(m["samples"]) >= 12, lane
    assert len({tuple(s) for s in m["seeds"]}) == len(m["seeds"]), m["seeds"]  # a fresh request every round
    assert m["looks"], m  # the objective lane's sequential rule
    # the judge-side cost of a group call: its clock minus the slowest rank's own account, typically
    # (a loaded host may stall one round trip; the clock-slowing attack below is judged per call)
    assert statistics.median(m["overhead_s"]) < 0.05, m["overhead_s"]
    assert not _leftovers(proj.root)
    print(line, lane["outcome"], sep="\n")


def test_a_group_that_slows_its_own_clock_is_not_faster(proj):
    _, res, line = proj.experiment(CLOCK, "exact", "CFG split, clocks slowed")
    assert line.startswith("DITAR VERDICT: DISCARD") and "quality=6/6" in line, res.stdout[-3000:]
    lane = _lane(proj)
    assert lane["outcome"]["verdict"] != "FASTER", lane["outcome"]
    # the ranks' own clocks saw a tenth of each call; the judge's saw all of it: on every candidate
    # call the round trip (the judge's time less the slowest rank's own account) is most of the call
    m = lane["measurement"]
    seen = [o for o in m["overhead_s"] if o > 0.5 * min(m["samples"])]
    assert len(seen) >= len(m["samples"]), (m["overhead_s"], m["samples"])


def test_a_group_that_answers_a_repeated_request_from_a_cache_is_rejected(proj):
    _, res, line = proj.experiment(CACHE, "exact", "CFG split, memoized")
    assert line.startswith("DITAR VERDICT: DISCARD"), res.stdout[-3000:]
    outcome = _lane(proj)["outcome"]
    assert outcome["verdict"] == "REJECTED" and "cach" in outcome["reason"], outcome


def test_a_rank_that_sends_garbage_only_when_timed_fails_the_audit(proj):
    _, res, line = proj.experiment(GARBAGE, "exact", "CFG split, rank 1 noise")
    assert line.startswith("DITAR VERDICT: DISCARD") and "quality=6/6" in line, res.stdout[-3000:]
    outcome = _lane(proj)["outcome"]
    assert outcome["verdict"] == "REJECTED" and "audit: timed round 1" in outcome["reason"], outcome


@pytest.mark.parametrize("source, said", [(DIES, "rank 1 of 2"), (HANGS, "timeout")], ids=["dies", "hangs"])
def test_a_rank_that_dies_or_hangs_is_a_crash_and_nothing_is_left_running(proj, source, said):
    base = proj.head()
    sha, res, line = proj.experiment(source, "exact", "CFG split, rank 1 fails")
    assert line.startswith("DITAR VERDICT: CRASH") and said in line, res.stdout[-3000:]
    assert proj.ledger()[-1]["status"] == "CRASH" and proj.head() == base
    assert not _leftovers(proj.root)


def test_a_group_worker_that_fails_to_build_names_its_rank(model_cache, tmp_path):
    from pytest_ditar.config.suite import load_suite
    from pytest_ditar.core.errors import CandidateError
    from pytest_ditar.runtime.group import GroupWorker
    from pytest_ditar.runtime.harness import make_spec
    from pytest_ditar.runtime.models import resolve_model_dir

    suite = load_suite(REPO / "suites" / "tiny")
    spec = make_spec(suite, resolve_model_dir(suite), "cpu")
    (tmp_path / "pipeline.py").write_text("import torch.distributed as dist\n"
                                          "def build(spec):\n"
                                          "    if dist.get_rank() == 1:\n"
                                          "        raise RuntimeError('no second GPU today')\n"
                                          "    dist.barrier()\n")
    g = GroupWorker("g", tmp_path, spec, 2, log_path=tmp_path / "g.log")
    try:
        with pytest.raises(CandidateError) as err:
            g.built(60)
    finally:
        g.close()
    assert "rank 1 of 2" in str(err.value) and "no second GPU today" in str(err.value)
    assert g.proc.poll() is not None  # rank 0, blocked in its barrier, went with the group
