"""Attacks through what the judge itself takes in (issue 39): its command line and its environment.
A 2x slower candidate brings a pytest plugin of its own under `mutable/` that turns every DISCARD
into a KEEP, and asks the judge to load it: `-p mutable.evil` after `--`, an extra collection path
whose `conftest.py` lies in `mutable/`, `PYTEST_PLUGINS`, `PYTHONPATH` naming a folder with a
`sitecustomize`, `LD_PRELOAD`, a changed `OMP_NUM_THREADS` / `TORCH_*`. Through `dit-ar experiment`
and a gated `pytest`, each is REFUSED naming what it asked for (nothing recorded, nothing
reverted), or never reaches the judge; none of the planted code runs where the judge could see it
first (a marker file says where it ran)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .attacks import COMMENT_ONLY
from .conftest import Judged, parse, summary_reasons

pytestmark = pytest.mark.adversarial

GENERATE = "    def generate(self, request: Request) -> Generated:\n"
SLOWER = COMMENT_ONLY.replace(GENERATE, GENERATE + "        import time; time.sleep(0.02)\n", 1)

# what an agent rewarded for a KEEP writes once: loaded into the judge, it turns a DISCARD into a KEEP
FLIP = '''
import os as _os
from pathlib import Path as _Path

import sys as _sys; _Path({marker!r}).write_text(str(_os.getpid()) + " " + " ".join(_sys.argv))  # where it ran
import pytest_ditar.core.decision as _d

_real = _d.decide


def _decide(**kw):
    d = _real(**kw)
    return _d.Decision("KEEP", "forged", ("forged",)) if d.status == "DISCARD" else d


_d.decide = _decide
'''


def plant(proj, scratch: Path, *names: str) -> Path:
    """Commit the slower candidate with FLIP as each of `names` under mutable/; the marker it writes."""
    marker = scratch / "ran-in"
    for name in names:
        proj.write(f"mutable/{name}", FLIP.format(marker=str(marker)))
    proj.git("add", "-A")
    proj.commit_candidate(SLOWER, "exact", "Slower, with a plugin of its own")
    return marker


def ditar_env(proj, *args: str, env: dict | None = None) -> Judged:
    exe = shutil.which("dit-ar") or str(Path(sys.executable).parent / "dit-ar")
    sha = proj.head()
    res = subprocess.run([exe, "--config", "config/autoresearch.json", "experiment", "--classification", "exact",
                          "--description", "slower", *args], cwd=proj.root, capture_output=True, text=True,
                         timeout=300, env={**os.environ, **(env or {})})
    last, status, reason = parse(res.stdout)
    return Judged(sha, res, last, status, reason, summary_reasons(proj, sha))


def gated_pytest(proj, *args: str) -> Judged:
    sha = proj.head()
    res = proj.pytest("--ditar-gate", "--ditar-class", "exact", *args)
    out = subprocess.CompletedProcess(res.args if hasattr(res, "args") else [], int(res.ret),
                                      "\n".join(res.outlines), "\n".join(res.errlines))
    last, status, reason = parse(out.stdout)
    return Judged(sha, out, last, status, reason, [])


def assert_refused_naming(proj, j: Judged, rows: list, *names: str) -> None:
    assert j.status == "REFUSED" and j.res.returncode == 4, j.show()
    for name in names:
        assert name in j.last, j.show()
    assert proj.head() == j.sha and proj.ledger() == rows, "a refused run records and reverts nothing"


@pytest.mark.parametrize(("extra", "said"), [
    (("-p", "mutable.evil"), "-p mutable.evil"),
    (("-pmutable.evil",), "-p mutable.evil"),
    (("mutable/",), "collection path mutable/"),
    (("suites/tiny", "--rootdir=mutable"), "--rootdir"),
    (("-o", "python_files=*.py"), "-o"),
    (("-W", "ignore::mutable.evil.Warn"), "-W"),
], ids=["p", "p-joined", "extra-path", "rootdir", "override-ini", "warning-category"])
def test_extra_pytest_arguments_that_load_code_are_refused_before_pytest_starts(research, scratch, extra, said):
    rows = research.ledger()
    marker = plant(research, scratch, "evil.py", "conftest.py")
    j = ditar_env(research, "--", *extra)
    assert_refused_naming(research, j, rows, said)
    assert not marker.exists(), "the planted plugin ran"


def test_pytest_plugins_and_addopts_naming_code_are_refused(research, scratch):
    rows = research.ledger()
    marker = plant(research, scratch, "evil.py")
    j = ditar_env(research, env={"PYTEST_PLUGINS": "mutable.evil"})
    assert_refused_naming(research, j, rows, "PYTEST_PLUGINS")
    j = ditar_env(research, env={"PYTEST_ADDOPTS": "-q -p mutable.evil"})
    assert_refused_naming(research, j, rows, "PYTEST_ADDOPTS", "-p mutable.evil")
    assert not marker.exists(), "the planted plugin ran"
    # the judge turned off: pytest's usage error was exit 4 too, with no outcome; now a refusal naming it
    j = ditar_env(research, env={"PYTEST_ADDOPTS": "-p no:ditar"})
    assert_refused_naming(research, j, rows, "PYTEST_ADDOPTS", "turns the judge off")


@pytest.mark.parametrize(("extra", "said"), [
    (("-p", "mutable.evil"), "-p mutable.evil"),
    (("suites", "mutable"), "collection path mutable"),
], ids=["p", "extra-path-with-a-conftest"])
def test_a_gated_pytest_refuses_them_too(research, scratch, extra, said):
    """In a gated `pytest` the refusal comes before any conftest loads (so mutable/conftest.py never
    runs); a `-p` module was imported by pytest before any plugin of ours (its marker exists), and
    the run is still refused."""
    rows = research.ledger()
    marker = plant(research, scratch, "evil.py", "conftest.py")
    j = gated_pytest(research, *extra)
    assert_refused_naming(research, j, rows, said)
    if extra[0] != "-p":
        assert not marker.exists(), "mutable/conftest.py ran in the judge"


def test_a_conftest_under_a_mutable_path_is_a_guard_failure(research, scratch):
    """Never loaded by the judge (it collects only the suites), and judged as the attempt it is."""
    base = research.head()
    marker = plant(research, scratch, "conftest.py")
    j = ditar_env(research)
    assert j.status == "DISCARD" and "judge_code" in j.reason + " ".join(j.reasons), j.show()
    assert "mutable/conftest.py" in j.last, j.show()
    assert research.head() == base and not marker.exists(), marker.read_text()


# ---- environment variables -------------------------------------------------------------------------------

SITECUSTOMIZE = '''
import sys
if "pytest" in " ".join(sys.argv):  # the judge, never the dit-ar command itself
    exec(open({flip!r}).read())
'''


def test_pythonpath_never_reaches_the_judge_through_dit_ar(research, scratch):
    """dit-ar experiment clears Python's code-loading variables before it starts the judge: the
    sitecustomize on PYTHONPATH never runs there, and the slower candidate is judged as it is."""
    base = research.head()
    marker = plant(research, scratch)
    site = scratch / "site"
    site.mkdir()
    (scratch / "flip.py").write_text(FLIP.format(marker=str(marker)))
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(flip=str(scratch / "flip.py")))
    j = ditar_env(research, env={"PYTHONPATH": str(site)})
    assert "not passed to the judge: PYTHONPATH" in j.res.stderr, j.show()
    assert not marker.exists(), "the sitecustomize ran in the judge"
    assert j.status in ("DISCARD", "CRASH") and j.status != "KEEP", j.show()
    assert research.head() == base


@pytest.mark.parametrize(("name", "value"), [("PYTHONPATH", "{scratch}"), ("LD_PRELOAD", "{scratch}/none.so"),
                                             ("PYTHONWARNINGS", "ignore::mutable.evil.Warn")])
def test_a_gated_pytest_refuses_pythons_code_loading_variables(research, scratch, monkeypatch, name, value):
    rows = research.ledger()
    plant(research, scratch, "evil.py")
    monkeypatch.setenv(name, value.format(scratch=scratch))
    j = gated_pytest(research)
    assert_refused_naming(research, j, rows, f"environment variable {name}")


@pytest.mark.parametrize(("name", "value"), [("OMP_NUM_THREADS", "7"), ("TORCH_COMPILE_DISABLE", "1")])
def test_torch_variables_changed_since_the_baseline_are_refused(research, scratch, name, value):
    rows = research.ledger()
    plant(research, scratch)
    j = ditar_env(research, env={name: value})
    assert_refused_naming(research, j, rows, f"environment variable {name} set", "since the baseline")
