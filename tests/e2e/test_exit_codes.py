"""A gated run's exit status follows its decision (issue 27): 0 KEEP, even where pytest itself saw a
guard lane go unmeasured (the verdict line names it instead); 1 DISCARD (a win voided by the
champion's drift against the anchor too: tests/e2e/test_rerun_once.py); 10 CRASH, whose reason and
worker log name the candidate's own file, line and exception, said once however many items hit it;
4 REFUSED. A script driven by `$?` reads the verdict, never pytest's count of failed tests."""

import pytest

from pytest_ditar.loop.run.options import Exit

from candidates import ALTERS, GEN_CALL, STOCK, _patch

# The candidate's own bug, as an agent writes one: a name from an earlier draft.
NAME_ERROR = _patch(GEN_CALL, "        x0 = prev_x0  # noqa: F821\n" + GEN_CALL)
NAME_ERROR_LINE = NAME_ERROR.splitlines().index("        x0 = prev_x0  # noqa: F821") + 1


def test_each_verdict_has_an_exit_status_of_its_own():
    assert [Exit.of_verdict(s) for s in ("KEEP", "DISCARD", "CRASH")] == [0, 1, 10]
    assert Exit.REFUSED == 4
    # CRASH is no code pytest itself ends with (0-5): `$?` alone tells it from a failed or broken run
    assert int(Exit.CRASH) not in {int(c) for c in pytest.ExitCode}
    assert len({Exit.KEEP, Exit.DISCARD, Exit.CRASH, Exit.REFUSED}) == 4


# Issue 38: a real win beside a champion slowed on a guard lane is KEPT. The champion's batch-1 calls
# run the pipeline four times (dropping three passes is a ~4x win); once the marker exists its
# batch-4 calls run it six times. Guard lanes time no anchor and no longer judge drift against
# stored samples (issue 49): the win stands.
_EXTRA_PASS = ("        self.pipe(class_labels=list(request.labels), guidance_scale=self.spec.guidance,\n"
               "                  generator=[torch.Generator('cpu').manual_seed(s) for s in request.seeds],\n"
               "                  num_inference_steps=request.steps, output_type='np')\n")


@pytest.fixture
def guard_drift_research(pytester, model_cache, tmp_path_factory):
    from conftest import host_visible_dir, research_project, shared_perf

    marker = host_visible_dir("guard-drift") / "busy"
    passes = ("        import os\n"
              f"        for _ in range(5 if len(request.labels) >= 4 and os.path.exists({str(marker)!r}) else 3):\n"
              + "".join("    " + ln + "\n" for ln in _EXTRA_PASS.splitlines()))
    source = _patch(GEN_CALL, passes + GEN_CALL)
    proj = research_project(pytester, tmp_path_factory, mutable_source=source,
                            config={"perf": shared_perf(drift_tolerance=0.05)})  # the product's own tolerance
    marker.write_text("the champion's guard lane drifts now\n")
    return proj


def test_a_real_win_beside_a_guard_lanes_smaller_drift_is_kept_exit_0(guard_drift_research):
    proj = guard_drift_research
    sha, res, line = proj.experiment_judged(STOCK, "exact", "Drop three redundant passes")
    out = res.stdout
    assert line.startswith("DITAR VERDICT: KEEP lane=latency_b1 "), out[-3000:]
    assert res.returncode == Exit.KEEP and proj.head() == sha, out[-3000:]


def test_crash_exits_10_naming_the_candidates_line_once_then_discard_1_and_refused_4(research):
    proj = research
    base = proj.head()
    _, res, line = proj.experiment(NAME_ERROR, "exact", "Reuse the previous x0")
    where = f"mutable/pipeline.py:{NAME_ERROR_LINE} in generate"
    error = "NameError: name 'prev_x0' is not defined"
    assert line.startswith("DITAR VERDICT: CRASH ") and f'reason="candidate raised: {error} ({where})"' in line, line
    assert res.returncode == Exit.CRASH == 10, res.stdout[-3000:]
    assert proj.head() == base
    (run,) = (proj.root / ".autoresearch/t/runs").iterdir()
    log = (run / "tests.log").read_text()
    # every corpus item failed on the one error: one block that says so, the error written once
    assert log.count(error) == 1 and "the same error on 6 items" in log and where in log, log
    # said once per report, not once per item: the first item's error block, pytest's short-summary line
    # for that item (trimmed to the terminal's width, except where $CI is set), the run summary's verdict
    # and the verdict line; the other five items point at the first
    assert res.stdout.count(error) <= 4, res.stdout[-5000:]
    assert res.stdout.count("the same error as suites/tiny/test_quality.py::test_quality[tiny-000]") >= 5, \
        res.stdout[-5000:]
    workers = "".join(p.read_text() for p in (run / "workers").rglob("*.log"))
    assert where in workers and f"line {NAME_ERROR_LINE}, in generate" in workers and error in workers, workers[-3000:]

    _, res, line = proj.experiment(ALTERS, "exact", "Lower guidance")
    assert line.startswith("DITAR VERDICT: DISCARD ") and res.returncode == Exit.DISCARD == 1, line

    proj.write("mutable/pipeline.py", STOCK + "\n# an edit left uncommitted\n")
    res = proj.ditar("experiment", "--classification", "exact", "--description", "Dirty tree")
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith("DITAR REFUSED: ") and res.returncode == Exit.REFUSED == 4, res.stdout[-2000:]


def test_candidate_frames_name_the_candidates_own_lines_relative_to_the_project(tmp_path):
    import importlib.util

    from pytest_ditar.core.errors import CandidateError
    from pytest_ditar.runtime.harness import candidate_frames

    pkg = tmp_path / "mutable"
    pkg.mkdir()
    (pkg / "pipeline.py").write_text("def generate():\n    return step()\n\n\ndef step():\n    return prev_x0\n")
    spec = importlib.util.spec_from_file_location("frames_probe", pkg / "pipeline.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    try:
        mod.generate()
    except NameError as exc:
        raised = exc
    assert candidate_frames(raised, pkg) == ["mutable/pipeline.py:2 in generate", "mutable/pipeline.py:6 in step"]
    try:  # wrapped as build_candidate wraps a build's error: the cause's frames
        raise CandidateError("exception", "NameError: ...") from raised
    except CandidateError as exc:
        assert candidate_frames(exc, pkg)[-1] == "mutable/pipeline.py:6 in step"
    (pkg / "broken.py").write_text("x = 1\ndef f(:\n")
    try:
        compile((pkg / "broken.py").read_text(), str(pkg / "broken.py"), "exec")
    except SyntaxError as exc:  # no frame in the file, only its line
        assert candidate_frames(exc, pkg) == ["mutable/broken.py:2"]
    assert candidate_frames(raised, tmp_path / "elsewhere") == [] and candidate_frames(raised, None) == []


def test_tests_log_writes_an_error_that_many_items_hit_once(tmp_path):
    from pytest_ditar.loop.run.testlog import TestLog

    log, crash = TestLog(), "CRASH: candidate raised: NameError: x (mutable/pipeline.py:3 in generate)"
    firsts = [log.add(f"q[{i}]", "setup", "failed", crash, tmp_path) for i in range(12)]
    assert firsts == [None] + ["q[0]"] * 11  # pytest's report of a repeat points at the first
    log.add("lane", "call", "skipped", "", tmp_path)
    live = (tmp_path / "tests.log").read_text()
    assert live.count(crash) == 1 and live.count("the same error as q[0]") == 11  # what a killed run leaves
    log.close(tmp_path)
    assert (tmp_path / "tests.log").read_text() == (
        "the same error on 12 items (setup failed): " + ", ".join(f"q[{i}]" for i in range(12)) + f"\n{crash}\n\n"
        "lane call skipped\n")
