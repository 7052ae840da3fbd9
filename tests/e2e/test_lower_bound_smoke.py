"""The lower-bound smoke set (marker `lowerbound`): gated runs that end KEEP, DISCARD and CRASH,
one sharded over `-n 2`, and pytest-benchmark's JSON filed with them. .ci/run runs it in an
environment installed at the lower bound of every range pyproject.toml declares
(.ci/lower-bounds.txt); in the main environment it is in the long tier (.ci/run-long), where the
rest of the e2e runs cover the same at the current releases."""
import importlib.metadata as md
import json
import subprocess
import sys
from pathlib import Path

import pytest

from candidates import ALTERS, RAISES, REDUNDANT, STOCK
from conftest import research_project

pytestmark = pytest.mark.lowerbound


def test_benchmark_json_is_what_the_command_line_would_give(pytester, tmp_path):
    """The value pytest-ditar gives --benchmark-json is made by pytest-benchmark's own option type:
    an open file before 5.3, a Path from 5.3 on, whichever release is installed."""
    from pytest_ditar.plugin.artifacts import benchmark_json_value, option_path

    config = pytester.parseconfig(f"--benchmark-json={tmp_path / 'user.json'}")
    ours = benchmark_json_value(config, tmp_path / "ours.json")
    theirs = config.option.benchmark_json
    assert ours is not None and type(ours) is type(theirs)
    assert option_path(ours) == tmp_path / "ours.json" and option_path(theirs) == tmp_path / "user.json"
    for value in (ours, theirs):
        if hasattr(value, "close"):
            value.close()


def _run_dir(proj, sha: str):
    runs = proj.root / ".autoresearch/t/runs"
    (found,) = [d for d in runs.iterdir() if (d / "summary.json").is_file()
                and json.loads((d / "summary.json").read_text())["commit"] == sha]
    return found


def test_keep_files_junit_and_pytest_benchmark_json(pytester, model_cache, tmp_path_factory):
    proj = research_project(pytester, tmp_path_factory, mutable_source=REDUNDANT)
    sha, res, line = proj.experiment_judged(STOCK, "exact", "Drop the redundant pass")  # a real 2x
    assert res.returncode == 0 and line.startswith("DITAR VERDICT: KEEP"), res.stdout[-3000:] + res.stderr[-2000:]
    assert proj.head() == sha and [r["status"] for r in proj.ledger()][-1] == "KEEP"
    run = _run_dir(proj, sha)
    assert (run / "junit.xml").is_file()
    bench = json.loads((run / "benchmark.json").read_text())
    assert bench["version"] == md.version("pytest-benchmark")  # written by the release under test
    # its machine_info through its public hook, without py-cpuinfo (1.2 s a run on an H200 host)
    info = bench["machine_info"]
    assert info["cpu"]["source"].startswith("pytest-ditar") and info["cpu"]["brand_raw"], info
    assert {"node", "machine", "python_version", "python_implementation", "system", "release"} <= set(info), info
    assert {b["extra_info"]["lane"] for b in bench["benchmarks"]} == {"latency_b1", "throughput_b8"}
    assert all(b["stats"]["data"] for b in bench["benchmarks"])
    # and it tells the verdict's story, as summary.json has it: the judged rounds, not only its own
    lanes = json.loads((run / "summary.json").read_text())["lanes"]
    for b in bench["benchmarks"]:
        x, lane = b["extra_info"], lanes[b["extra_info"]["lane"]]
        assert x["clock"] == "judge" and x["verdict"] == lane["outcome"]["verdict"], x
        assert x["speedup"] == lane["outcome"]["speedup"] \
            and x["rounds_judged"] == len(lane["measurement"]["samples"]), x
        assert x["rounds_judged"] >= len(b["stats"]["data"]) and "first rounds" in x["scope"], x
    # `pytest-benchmark compare` on the file says what its table holds (the lanes' groups)
    cli = Path(sys.executable).parent / "pytest-benchmark"
    shown = subprocess.run([str(cli), "compare", str(run / "benchmark.json"), "--columns", "median,rounds"],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stdout[-2000:] + shown.stderr[-2000:]
    for lane in ("latency_b1", "throughput_b8"):
        assert f"ditar {lane}: candidate's first rounds, pytest-benchmark's timer (verdict: summary.json)" \
            in shown.stdout, shown.stdout[-3000:]
    assert not list((proj.root / ".autoresearch/t/.pending").glob("*"))


def test_discard_crash_and_a_run_sharded_over_two_workers(research):
    proj = research
    base = proj.head()
    sha, res, line = proj.experiment(ALTERS, "exact", "Lower guidance")
    assert res.returncode == 1 and line.startswith("DITAR VERDICT: DISCARD") and "quality=0/6" in line, line
    assert proj.head() == base
    # nothing timed: no pytest-benchmark JSON, and no empty file an older release opened for it
    assert not (_run_dir(proj, sha) / "benchmark.json").exists()
    sha, res, line = proj.experiment(RAISES, "exact", "A broken kernel")
    assert res.returncode == 10 and line.startswith("DITAR VERDICT: CRASH") and "kernel exploded" in line, line
    assert proj.head() == base
    proj.commit_candidate(ALTERS + "\n# sharded\n", "exact", "Lower guidance, sharded")  # a change is judged once
    res = proj.ditar("experiment", "--classification", "exact", "--description", "sharded", "--workers", "2")
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith("DITAR VERDICT: DISCARD") and "quality=0/6" in last, res.stdout[-3000:] + res.stderr[-2000:]
    assert "ditar: quality phase recorded" in res.stdout  # phase 1 ran under pytest-xdist (-n 2)
    assert proj.head() == base
    assert [r["status"] for r in proj.ledger()] == ["BASELINE", "DISCARD", "CRASH", "DISCARD"]
