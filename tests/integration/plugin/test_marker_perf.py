"""`pytest -m perf` and the gated lanes on CPU: faster, unchanged, slower and noisy candidates."""
import diffusers  # noqa: F401 - preloaded so pytester's in-process runs do not re-import torch
import torch  # noqa: F401

from candidates import NOISY, REDUNDANT, STOCK


def test_header_names_device_target_and_match(research):
    res = research.pytest("-m", "perf", "--collect-only")
    res.stdout.fnmatch_lines(["ditar: device=* target=a5500 (sm_86) OFF-TARGET*"])


def test_slower_candidate_is_discarded(research):
    proj = research
    base = proj.head()
    proj.commit_candidate(REDUNDANT, "exact", "Batch-invariant double pass")
    res = proj.ditar("experiment", "--classification", "exact", "--description", "double pass")
    line = res.stdout.strip().splitlines()[-1]
    assert line.startswith("DITAR VERDICT: DISCARD") and "quality=6/6" in line
    speedup = float(line.split("speedup=")[1].split("x")[0])
    assert speedup < 0.8 and ("not faster" in line or "unstable" in line), line
    assert proj.head() == base


def test_lane_with_random_sleeps_is_never_kept(research):
    """Random sleeps make a lane noisy AND slower: the lane either decides that it is not faster (the
    noise does not hide an effect that clears it) or stays undecided and says it was too noisy."""
    proj = research
    proj.commit_candidate(NOISY, "exact", "jittery")
    res = proj.ditar("experiment", "--classification", "exact", "--description", "jittery")
    line = res.stdout.strip().splitlines()[-1]
    assert line.startswith("DITAR VERDICT: DISCARD"), line
    decided = "not faster beyond" in line or "slower, upper bound below" in line
    assert decided or ("unstable" in line and "too noisy to decide" in line), line


def test_lanes_time_with_the_gc_off_and_pin_the_thread_when_configured(pytester, model_cache, tmp_path_factory,
                                                                       tmp_path):
    """Inside a timed lane the garbage collector is off and, with `perf.pin_cpu`, the launching
    thread runs on one core; the quality phase runs as usual. The candidate reports what it saw,
    in a file: a report-only run keeps no worker log, so its workers run unsandboxed here
    (`"sandbox": "off"` before the baseline)."""
    import os

    from conftest import research_project

    proj = research_project(pytester, tmp_path_factory, config={"sandbox": "off"})
    log = tmp_path / "host.log"
    probe = STOCK.replace(
        "    def generate(self, request: Request) -> Generated:\n",
        "    def generate(self, request: Request) -> Generated:\n"
        f"        import gc, os; open({str(log)!r}, 'a').write(f'{{len(request.seeds)}} {{gc.isenabled()}} "
        "{len(os.sched_getaffinity(0))}\\n')\n", 1)
    assert probe != STOCK
    proj.commit_candidate(probe, "exact", "report the host state")
    cfg = proj.config()
    proj.set_config(perf={**cfg.get("perf", {}), "pin_cpu": True})
    res = proj.pytester.runpytest_subprocess("-p", "no:cacheprovider", "-m", "perf", "-k", "latency_b1", timeout=300)
    assert "ditar: lane latency_b1:" in res.stdout.str(), res.stdout.str()[-2000:]
    calls = [line.split() for line in log.read_text().splitlines()]
    lane = [c for c in calls if c[0] == "1"]  # latency_b1 requests one image
    assert lane and all(gc == "False" for _, gc, _ in lane)
    if len(os.sched_getaffinity(0)) > 1:  # pinning is only visible with more than one core
        assert all(cpus == "1" for _, _, cpus in lane)


def test_steady_host_restores_the_gc_and_the_cpu_mask():
    """The judge's half of a steady lane (the worker's runs the same helpers through its steady op)."""
    import gc
    import os

    from pytest_ditar.runtime.harness import no_gc, pin_to_current_cpu

    before = os.sched_getaffinity(0)
    assert gc.isenabled()
    with no_gc():
        assert not gc.isenabled()
        old = pin_to_current_cpu()
        assert old == before and len(os.sched_getaffinity(0)) == 1 and os.sched_getaffinity(0) <= before
        os.sched_setaffinity(0, old)
    assert gc.isenabled() and os.sched_getaffinity(0) == before
