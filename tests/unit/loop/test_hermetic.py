"""loop.integrity.hermetic: which pytest arguments and environment variables a gated run takes (issue 39)."""
from __future__ import annotations

from pathlib import Path

import pytest

from pytest_ditar.loop.integrity import hermetic

ROOT = Path("/p")
SUITES = ROOT / "suites"


def refusal(*args: str) -> str | None:
    return hermetic.option_refusal(list(args), ROOT, SUITES, ROOT / ".autoresearch", ("mutable/", "config/"),
                                   here=ROOT)


@pytest.mark.parametrize("args", [
    (), ("-q",), ("-xvv",), ("-n", "2"), ("-n2",), ("--tb=short",), ("--tb", "line"), ("-rA",), ("-m", "perf"),
    ("-k", "latency and not b8"), ("-p", "no:cacheprovider"), ("-p", "pytest_ditar.plugin.hooks"),
    ("--ditar-tag", "t", "--ditar-gate"), ("suites/tiny",), ("suites/tiny/test_perf.py::test_lane",),
    ("--basetemp=/tmp/x",), ("--basetemp", "runpytest-0"), ("--color=yes", "--durations", "5"),
])
def test_allowed(args):
    assert refusal(*args) is None


@pytest.mark.parametrize(("args", "named"), [
    (("-p", "mutable.evil"), "-p mutable.evil"), (("-xpmutable.evil",), "-p mutable.evil"),
    (("mutable/",), "collection path mutable/"), (("suites", "--", "tests"), "collection path tests"),
    (("-c", "x.ini"), "-c"), (("-o", "a=b"), "-o"), (("--override-ini=a=b",), "--override-ini"),
    (("--rootdir=mutable",), "--rootdir"), (("--confcutdir", "/"), "--confcutdir"), (("--pyargs",), "--pyargs"),
    (("--import-mode=importlib",), "--import-mode"), (("-W", "error"), "-W"), (("-Werror",), "-W"),
    (("--tx", "popen//python=/x"), "--tx"), (("--junitxml=.autoresearch/t/ledger.jsonl",), "--junitxml"),
    (("--basetemp=.",), "--basetemp"), (("--basetemp=.autoresearch",), "--basetemp"),
    (("--basetemp", "mutable"), "--basetemp"), (("--lf",), "--lf"),
    (("-p", "no:ditar"), "turns the judge off"), (("-pno:pytest_ditar.plugin.hooks",), "turns the judge off"),
])
def test_refused_naming_the_option(args, named):
    why = refusal(*args)
    assert why is not None and named in why, why


def test_environment_classes():
    env = {"PYTHONPATH": "/x", "PYTHONUNBUFFERED": "1", "LD_PRELOAD": "/x.so", "LD_LIBRARY_PATH": "/l",
           "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "4", "CUDA_VISIBLE_DEVICES": "0",
           "TORCHINDUCTOR_CACHE_DIR": "/c",
           "HOME": "/h"}
    assert hermetic.code_env(env) == ["LD_PRELOAD", "PYTHONPATH", "PYTHONWARNINGS"]
    assert hermetic.code_env({"PYTHONPATH": "/p"}, allowed_paths=[ROOT]) == []  # what python -m puts there anyway
    assert hermetic.pinned_env(env) == {"LD_LIBRARY_PATH": "/l", "OMP_NUM_THREADS": "4"}
    assert hermetic.pinned_env_changes({"OMP_NUM_THREADS": "4"}, {"OMP_NUM_THREADS": "7", "TORCH_X": "1"}) == [
        "TORCH_X set ('1')", "OMP_NUM_THREADS changed ('4' -> '7')"]
    assert "PYTEST_PLUGINS" in str(hermetic.env_refusal({"PYTEST_PLUGINS": "m"}, ROOT, SUITES, ROOT / ".a"))
    assert "-p m" in str(hermetic.env_refusal({"PYTEST_ADDOPTS": "-q -p m"}, ROOT, SUITES, ROOT / ".a"))
    assert hermetic.env_refusal({"PYTEST_ADDOPTS": "-q -x"}, ROOT, SUITES, ROOT / ".a") is None
    # a gated run whose judge is turned off ended as pytest's usage error (exit 4, as a refusal) with no outcome
    assert "turns the judge off" in str(hermetic.env_refusal({"PYTEST_ADDOPTS": "-p no:ditar"}, ROOT, SUITES,
                                                             ROOT / ".a"))
