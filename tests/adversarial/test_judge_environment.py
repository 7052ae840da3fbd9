"""A module of the judge's own environment changed by hand between runs (issue 39): not a `.pth`
or a `sitecustomize` (test_planted_by_hand.py), but a third-party module the judge imports, edited
in place, or given a bytecode file that Python's own loader takes for it. The judge runs from a
private environment (test_planted_by_hand's `judge`) whose site-packages holds its own copy of
pluggy, which pytest imports first and which calls every hook of the judge: an edit there could
rewrite any decision. The baseline stamps every file the judge loaded (loop.integrity.stamps.closure_stamp);
a gated run on a changed one is REFUSED naming the file, and judged again once it is restored."""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pluggy
import pytest
from venvs import install_plugin

import pytest_ditar

from .test_planted_by_hand import Judge, OwnProject, _refused, _timestamp_pyc, judged
from candidates import SLOWER
from conftest import make_project

pytestmark = pytest.mark.adversarial


@pytest.fixture
def judge(tmp_path: Path) -> Judge:
    """test_planted_by_hand's private environment, whose path also names every site-packages folder
    of this one (a light venv reaches its packages through a `.pth` of its own, which an added
    folder's `.pth` does not run)."""
    env = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    python = env / "bin" / "python"
    site = Path(subprocess.check_output([str(python), "-c",
                                         "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        text=True).strip())
    copy = tmp_path / "judge"
    shutil.copytree(Path(pytest_ditar.__file__).parent, copy / "pytest_ditar",
                    ignore=shutil.ignore_patterns("__pycache__"))
    ours = [p for p in sys.path if p.endswith("site-packages")]
    (site / "ditar-paths.pth").write_text("\n".join([str(copy), *ours]) + "\n")
    return Judge(python, site, copy / "pytest_ditar", tmp_path / "cache")


def _stamped(pytester: pytest.Pytester, judge: Judge) -> OwnProject:
    """A project whose baseline stamped `judge`'s environment as it is now."""
    base = make_project(pytester)
    proj = OwnProject(base.root, base.pytester)
    proj.judge = judge
    for step in (("init", "--tag", "t"), ("baseline",)):
        res = proj.ditar(*step)
        assert res.returncode == 0, res.stdout + res.stderr
    return proj


@pytest.fixture
def own_pluggy(pytester: pytest.Pytester, judge: Judge) -> OwnProject:
    shutil.copytree(Path(pluggy.__file__).parent, judge.site / "pluggy", ignore=shutil.ignore_patterns("__pycache__"))
    return _stamped(pytester, judge)


@pytest.fixture
def stamped(pytester: pytest.Pytester, judge: Judge) -> OwnProject:
    return _stamped(pytester, judge)


def test_a_third_party_module_edited_between_runs_is_refused_naming_it(own_pluggy: OwnProject):
    src = own_pluggy.judge.site / "pluggy" / "__init__.py"
    text = src.read_text()
    src.write_text(text + "\nimport os as _os\n_os.environ['DITAR_PLANTED'] = '1'\n")
    _refused(own_pluggy, "python environment changed", "pluggy/__init__.py changed")
    src.write_text(text)  # the same bytes again: the stat moved, the content did not
    j = judged(own_pluggy, None, "an honest A/A")
    assert j.status == "DISCARD", j.show()


def test_planted_bytecode_of_a_third_party_module_is_refused_naming_it(own_pluggy: OwnProject):
    src = own_pluggy.judge.site / "pluggy" / "_result.py"
    pyc = Path(importlib.util.cache_from_source(str(src)))
    pyc.parent.mkdir(exist_ok=True)
    pyc.write_bytes(_timestamp_pyc(src, src.read_text() + "\nPLANTED = True\n"))
    _refused(own_pluggy, "python environment changed", "_result.cpython")


# An installed pytest plugin runs in every pytest process, the judge's included, and may replace
# any function of the gate: this one makes every lane's verdict a 2x win.
VERDICT_WRITER = """from dataclasses import replace
from pytest_ditar.loop.judge import gate
_decide = gate.decide
def _every_lane_wins(**kw):
    kw["lanes"] = [replace(lane, verdict="FASTER", speedup=2.0, ci_low=1.9, ci_high=2.1) for lane in kw["lanes"]]
    return _decide(**kw)
gate.decide = _every_lane_wins
"""


def test_a_pytest_plugin_installed_after_the_baseline_is_refused_naming_it(stamped: OwnProject):
    """`pip install` of a plugin between runs: a new distribution whose pytest11 entry point pytest
    loads into the judge. No file the baseline stamped changed; the set of installed plugins did."""
    install_plugin(stamped.judge.site, "verdict_writer", VERDICT_WRITER)
    before = stamped.ledger()
    j = judged(stamped, SLOWER, "A redundant pass, and a plugin")
    assert j.status == "REFUSED" and j.res.returncode == 4, j.show()
    assert "pytest plugin 'verdict_writer'" in j.last and "pip uninstall verdict_writer" in j.last, j.last
    assert stamped.ledger() == before
