"""An installed pytest-ditar changes nothing in a project without a ditar config: its items keep
their order, no warning filter of ours applies, the exit status is pytest's own; only the
`quality` and `perf` markers (and the --ditar-* options) are there."""
import pytest

from pytest_ditar.loop.options import Exit

ORDERED = """
import warnings

import pytest


@pytest.mark.perf
def test_1_perf():
    pass


def test_2_plain():
    pass


@pytest.mark.quality
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
    """The gate's exit codes (the loop does not import pytest) are pytest's, by name and value."""
    assert all(pytest.ExitCode[e.name] == e.value for e in Exit)


def test_project_without_config_is_left_alone(pytester: pytest.Pytester):
    pytester.makepyfile(test_order=ORDERED)
    res = _run(pytester, "-v", "--strict-markers")  # strict: the markers must still be registered
    out = res.stdout.str()
    assert res.ret == pytest.ExitCode.OK, out
    res.assert_outcomes(passed=5, warnings=2)
    res.stdout.fnmatch_lines(["*test_1_perf PASSED*", "*test_2_plain PASSED*", "*test_3_quality PASSED*",
                              "*test_4_no_gate_here PASSED*", "*test_5_diffusers_warnings_are_shown PASSED*"])
    res.stdout.fnmatch_lines(["*DeprecationWarning: old api*", "*FutureWarning: new default*"])
    ours = [l for l in res.stdout.lines if l.startswith(("ditar", "DITAR"))]
    assert not ours, ours  # no header, summary or verdict line of ours


def test_markers_are_registered(pytester: pytest.Pytester):
    res = _run(pytester, "--markers")
    res.stdout.fnmatch_lines(["@pytest.mark.quality: a pytest-ditar quality contract*",
                              "@pytest.mark.perf: a pytest-ditar performance lane*"])


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
