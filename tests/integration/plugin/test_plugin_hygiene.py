"""An installed pytest-ditar changes nothing in a project without a ditar config: its items keep
their order, no warning filter of ours applies, the exit status is pytest's own; only the
`ditar_quality` and `ditar_perf` markers (and the --ditar-* options) are there: the short `quality`
and `perf` are registered in a ditar run only, so a project's own `perf` marker stays its own."""
import pytest

from pytest_ditar.loop.run.options import Exit

ORDERED = """
import warnings

import pytest


@pytest.mark.ditar_perf
def test_1_perf():
    pass


def test_2_plain():
    pass


@pytest.mark.ditar_quality
def test_3_quality():
    pass


def test_4_no_gate_here(pytestconfig):
    hooks = [p for p in pytestconfig.pluginmanager.get_plugins()
             if getattr(p, "__name__", "") == "pytest_ditar.plugin.hooks"]
    assert hooks, "pytest-ditar is not loaded: this test would prove nothing"
    assert pytestconfig.pluginmanager.get_plugin("ditar-gate") is None
    assert pytestconfig.getini("filterwarnings") == []


def test_5_diffusers_warnings_are_shown():
    warnings.warn_explicit("old api", DeprecationWarning, "x.py", 1, module="diffusers.models")
    warnings.warn_explicit("new default", FutureWarning, "x.py", 2, module="diffusers.pipelines")
"""


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=120)


def test_exit_codes_mirror_pytest():
    """The gate's exit codes (the loop does not import pytest) are pytest's, by name and value, and
    the one of its own (CRASH) is none of pytest's."""
    assert all(Exit[c.name] == c.value for c in pytest.ExitCode)
    own = [e for e in Exit if e.name not in pytest.ExitCode.__members__ and e.value not in set(pytest.ExitCode)]
    assert [e.name for e in own] == ["CRASH"]


def test_project_without_config_is_left_alone(pytester: pytest.Pytester):
    pytester.makepyfile(test_order=ORDERED)
    res = _run(pytester, "-v", "--strict-markers")  # strict: the markers must still be registered
    out = res.stdout.str()
    assert res.ret == pytest.ExitCode.OK, out
    res.assert_outcomes(passed=5, warnings=2)
    res.stdout.fnmatch_lines(["*test_1_perf PASSED*", "*test_2_plain PASSED*", "*test_3_quality PASSED*",
                              "*test_4_no_gate_here PASSED*", "*test_5_diffusers_warnings_are_shown PASSED*"])
    res.stdout.fnmatch_lines(["*DeprecationWarning: old api*", "*FutureWarning: new default*"])
    ours = [line for line in res.stdout.lines if line.startswith(("ditar", "DITAR"))]
    assert not ours, ours  # no header, summary or verdict line of ours


def test_markers_are_registered(pytester: pytest.Pytester):
    res = _run(pytester, "--markers")
    res.stdout.fnmatch_lines(["@pytest.mark.ditar_quality: a pytest-ditar quality contract*",
                              "@pytest.mark.ditar_perf: a pytest-ditar performance lane*"])
    assert not [line for line in res.stdout.lines if line.startswith(("@pytest.mark.perf:", "@pytest.mark.quality:"))]


def test_a_projects_own_perf_marker_is_its_own(pytester: pytest.Pytester):
    """Outside a ditar run `perf` is not ours: a project that registers it describes it, and one
    that does not is told so by --strict-markers, as without the plugin."""
    pytester.makepyfile(test_own="import pytest\n\n@pytest.mark.perf\ndef test_fast():\n    pass\n")
    res = _run(pytester, "--strict-markers")
    assert res.ret == pytest.ExitCode.INTERRUPTED and "'perf' not found in `markers`" in res.stdout.str(), \
        res.stdout.str()
    pytester.makeini("[pytest]\nmarkers =\n    perf: this project's own timing tests\n")
    res = _run(pytester, "--strict-markers", "--markers")
    assert "@pytest.mark.perf: this project's own timing tests" in res.stdout.str()
    assert "in a ditar run" not in res.stdout.str()


@pytest.mark.parametrize("source, status", [
    ("def test_ok():\n    pass\n", pytest.ExitCode.OK),
    ("def test_bad():\n    assert False\n", pytest.ExitCode.TESTS_FAILED),
    ("", pytest.ExitCode.NO_TESTS_COLLECTED),
])
def test_exit_status_is_pytests_own(pytester: pytest.Pytester, source: str, status: pytest.ExitCode):
    pytester.makepyfile(test_one=source)
    assert _run(pytester).ret == status


def test_baseline_option_still_needs_a_config(pytester: pytest.Pytester):
    pytester.makepyfile(test_one="def test_ok():\n    pass\n")
    res = _run(pytester, "--ditar-baseline")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "--ditar-baseline needs a config: pass --ditar-config PATH" in res.stderr.str()
