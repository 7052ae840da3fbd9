"""The plugin activates for a ditar run only (issue 25): a `--ditar-*` option, or a collection that
reaches the config's suites folder. A project's own `pytest tests`, beside a ditar config at the
default path, opens no session, starts no zygote or worker and prints nothing of ours; the entry
module loads without pytest, numpy or the rest of the package."""
import json
import subprocess
import sys

import pytest

# written by the inner run's conftest at its end: what of ours the process imported and registered
PROBE = """
import json
import sys


def pytest_unconfigure(config):
    mods = sorted(m for m in sys.modules if m.startswith(("pytest_ditar", "numpy", "torch")))
    gate = config.pluginmanager.get_plugin("ditar-gate") is not None
    with open("probe.json", "w") as fh:
        json.dump({"modules": mods, "gate": gate}, fh)
"""
OWN_TEST = "def test_own():\n    assert 1 + 1 == 2\n"


def _probe(proj, *args: str):
    res = proj.pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=300)
    return res, json.loads((proj.root / "probe.json").read_text())


@pytest.fixture
def with_own_tests(project):
    project.write("tests/test_own.py", OWN_TEST)
    project.write("conftest.py", (project.root / "conftest.py").read_text() + PROBE)
    return project


def test_a_projects_own_tests_start_no_ditar_session(with_own_tests):
    res, probe = _probe(with_own_tests, "tests")
    assert res.ret == pytest.ExitCode.OK, res.stdout.str()
    res.assert_outcomes(passed=1)
    assert not probe["gate"]
    started = [m for m in probe["modules"] if m.startswith(("pytest_ditar.loop.judge.gate",
                                                            "pytest_ditar.loop.run.session",
                                                            "pytest_ditar.runtime", "numpy", "torch"))]
    assert not started, started  # no session, no zygote (runtime.zygote), no worker, not even numpy
    assert not [line for line in res.stdout.lines if line.startswith(("ditar", "DITAR"))], res.stdout.str()


def test_the_suites_folder_or_a_ditar_option_make_a_ditar_run(with_own_tests):
    """A ditar run started as plain `pytest` is handed to the judge's pytest (issue 49): it shows the
    gate's header, reads the judge's ini, and loads no conftest, the probe's included."""
    # a collection that reaches suites/ (here the suite's own file) is a ditar run: its header shows
    res = with_own_tests.pytester.runpytest_subprocess("-p", "no:cacheprovider", "suites/tiny/test_quality.py", "--co",
                                                       timeout=300)
    assert any(line.startswith("ditar:") for line in res.stdout.lines), res.stdout.str()
    assert any(line.startswith("configfile: ") and line.endswith("ditar-judge.ini") for line in res.stdout.lines)
    assert not (with_own_tests.root / "probe.json").exists(), "the judge's pytest loaded the root conftest"
    # so is a run that names an option of ours
    res = with_own_tests.pytester.runpytest_subprocess("-p", "no:cacheprovider", "suites", "--ditar-device=cpu", "--co",
                                                       timeout=300)
    assert any(line.startswith("ditar:") for line in res.stdout.lines), res.stdout.str()
    assert not (with_own_tests.root / "probe.json").exists()


def test_either_marker_name_selects_the_same_suite_tests(with_own_tests):
    short = with_own_tests.pytester.runpytest_subprocess("-p", "no:cacheprovider", "suites", "--co", "-q",
                                                         "-m", "quality")
    long = with_own_tests.pytester.runpytest_subprocess("-p", "no:cacheprovider", "suites", "--co", "-q",
                                                        "-m", "ditar_quality")
    ids = [[line for line in r.stdout.lines if "::test_quality[" in line] for r in (short, long)]
    assert ids[0] and ids[0] == ids[1], (short.stdout.str(), long.stdout.str())


def test_the_entry_module_imports_nothing_heavy():
    """What `import pytest_ditar.plugin.hooks` loads: pluggy and the package's own two modules,
    never pytest, numpy or the gate (benchmarks/plugin_import.py times it)."""
    code = ("import sys, json; before = set(sys.modules); import pytest_ditar.plugin.hooks; "
            "print(json.dumps(sorted(set(sys.modules) - before)))")
    new = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    ours = [m for m in new if m.startswith("pytest_ditar")]
    assert ours == ["pytest_ditar", "pytest_ditar.plugin", "pytest_ditar.plugin.hooks"], ours
    heavy = [m for m in new if m.split(".")[0] in {"pytest", "_pytest", "numpy", "torch", "yaml", "git"}]
    assert not heavy, heavy


def test_a_config_another_tool_builds_is_never_a_ditar_run(project):
    """`pytest-benchmark compare` builds a pytest Config (`Config.fromdictargs`) in whatever folder
    it runs in, plugins and all, and runs no session. In a research project's root, where a plain
    `pytest` is a ditar run handed to the judge, it must stay a table: no pytest of the judge's,
    no header, nothing of ours (it once started a whole gated run and took its exit status)."""
    bench = {"machine_info": {}, "commit_info": {}, "datetime": "2026-01-01T00:00:00", "version": "5.1.0",
             "benchmarks": [{"group": "g", "name": "test_x", "fullname": "t.py::test_x", "params": None,
                             "param": None, "extra_info": {}, "options": {},
                             "stats": {"min": 1.0, "max": 1.0, "mean": 1.0, "stddev": 0.0, "rounds": 1,
                                       "median": 1.0, "iqr": 0.0, "q1": 1.0, "q3": 1.0, "iqr_outliers": 0,
                                       "stddev_outliers": 0, "outliers": "0;0", "ld15iqr": 1.0,
                                       "hd15iqr": 1.0, "ops": 1.0, "total": 1.0, "iterations": 1,
                                       "data": [1.0]}}]}
    out = project.root.parent / "bench.json"
    out.write_text(json.dumps(bench))
    cli = [sys.executable, "-c", "from pytest_benchmark.cli import main; main()"]
    res = subprocess.run([*cli, "compare", str(out), "--columns", "median"], cwd=project.root,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "test_x" in res.stdout, res.stdout
    assert not [line for line in res.stdout.splitlines() if line.startswith(("ditar", "DITAR"))], res.stdout
    assert "test session starts" not in res.stdout, res.stdout
