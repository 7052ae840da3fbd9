"""Only the judge chooses the judge's code (issue 49). pytest reads its ini files and conftest.py from
the project before any hook of a plugin runs: a candidate that brings a root `pytest.ini`,
`.pytest.ini`, `tox.ini`, `setup.cfg` or `pyproject.toml` whose `addopts` names a module of its own
under `mutable/`, edits the root `conftest.py`, adds a `conftest.py` to its suite, or sets
`PYTEST_ADDOPTS`, had that code imported into the judge, where it turned a 2x slower candidate's
DISCARD into a KEEP (10 of 10 before) and `dit-ar verify` passed afterwards.

Now `dit-ar experiment` holds the candidate's tree to the baseline's outside the mutable paths
before pytest starts (loop.integrity.judgetree, from git's objects) and REFUSES naming the path; the payload,
which writes a marker file outside the project wherever it is imported, never runs. The same
commit run as a plain gated `pytest` is handed to a pytest the judge starts on its own
configuration, which refuses it too: never KEPT. No timing is needed to refuse, so no lane runs.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from .attacks import COMMENT_ONLY, HALF_STEPS
from .conftest import ditar, parse
from .test_judge_inputs import SLOWER, ditar_env, gated_pytest

pytestmark = pytest.mark.adversarial

# imported anywhere, it leaves a mark outside the project and forces every verdict to KEEP
PAYLOAD = '''
import os as _os, sys as _sys
from pathlib import Path as _Path

_Path({marker!r}).write_text(str(_os.getpid()) + " " + " ".join(_sys.argv))  # where it ran
try:
    import pytest_ditar.core.decision as _d

    _real = _d.decide

    def _decide(**kw):
        d = _real(**kw)
        return _d.Decision("KEEP", "forged", ("forged",)) if d.status != "KEEP" else d

    _d.decide = _decide
except Exception:
    pass
'''

ADDOPTS = {
    "pytest.ini": "[pytest]\naddopts = -p mutable.payload\n",
    ".pytest.ini": "[pytest]\naddopts = -p mutable.payload\n",
    "tox.ini": "[pytest]\naddopts = -p mutable.payload\n",
    "setup.cfg": "[tool:pytest]\naddopts = -p mutable.payload\n",
    "pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-p mutable.payload"\n',
}
CASES = [*ADDOPTS, "conftest.py", "suites/tiny/conftest.py"]


def plant(proj, scratch: Path, path: str | None) -> Path:
    """Commit the slower candidate with the payload as mutable/payload.py, and `path` (an ini naming
    it, the root conftest.py importing it, a suite's conftest.py): the marker it would write."""
    marker = scratch / "payload-ran"
    proj.write("mutable/payload.py", PAYLOAD.format(marker=str(marker)))
    if path in ADDOPTS:
        proj.write(path, ADDOPTS[path])
    elif path == "conftest.py":
        proj.write(path, (proj.root / path).read_text() + "\nimport mutable.payload  # noqa\n")
    elif path is not None:
        proj.write(path, PAYLOAD.format(marker=str(marker)))
    proj.git("add", "-A")
    proj.commit_candidate(SLOWER, "exact", f"Slower, with {path or 'PYTEST_ADDOPTS'}")
    return marker


@pytest.mark.parametrize("path", CASES)
def test_a_file_pytest_reads_before_the_guards_is_refused_before_pytest_starts(research, scratch, path):
    rows = research.ledger()
    marker = plant(research, scratch, path)
    j = ditar_env(research)
    assert j.status == "REFUSED" and j.res.returncode == 4, j.show()
    assert j.last.startswith(f"DITAR REFUSED: judge_tree: {path} ") and "git commit --amend" in j.last, j.show()
    assert not marker.exists(), f"the payload ran: {marker.read_text()}"
    assert research.ledger() == rows and research.head() == j.sha, "a refused run records and reverts nothing"


@pytest.mark.parametrize("path", CASES)
def test_the_same_commit_as_a_plain_gated_pytest_is_never_kept(research, scratch, path):
    """pytest read the ini (and imported the payload, in its own process) before any plugin; the
    run is handed to the judge's pytest, which refuses the tree: nothing decided, nothing recorded.
    A conftest is never loaded at all (the hand-over comes before the first conftest)."""
    rows = research.ledger()
    marker = plant(research, scratch, path)
    j = gated_pytest(research)
    assert j.status == "REFUSED" and j.res.returncode == 4, j.show()
    assert f"DITAR REFUSED: judge_tree: {path} " in j.last, j.show()
    assert research.ledger() == rows and research.head() == j.sha
    if path not in ADDOPTS:
        assert not marker.exists(), f"the payload ran: {marker.read_text()}"


def test_pytest_addopts_naming_the_payload_is_refused(research, scratch, monkeypatch):
    rows = research.ledger()
    marker = plant(research, scratch, None)
    j = ditar_env(research, env={"PYTEST_ADDOPTS": "-p mutable.payload"})
    assert j.status == "REFUSED" and j.res.returncode == 4 and "PYTEST_ADDOPTS" in j.last, j.show()
    assert "-p mutable.payload" in j.last and not marker.exists()
    assert research.ledger() == rows and research.head() == j.sha
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p mutable.payload")
    j = gated_pytest(research)
    assert j.status == "REFUSED" and "PYTEST_ADDOPTS" in j.last and research.ledger() == rows, j.show()


@pytest.mark.parametrize(("path", "text"), [
    ("pytest.ini", ADDOPTS["pytest.ini"]),
    ("suites/tiny/conftest.py", "import mutable.payload\n"),
], ids=["untracked-ini", "ignored-suite-conftest"])
def test_an_uncommitted_file_pytest_reads_is_refused_too(research, scratch, path, text):
    """An honest-looking commit, and the file left beside it untracked (or git-ignored): the judge
    reads the working tree, so it is held to the baseline's by content."""
    rows = research.ledger()
    marker = plant(research, scratch, "none-committed")
    (research.root / "none-committed").unlink()
    research.git("rm", "-q", "none-committed")
    research.git("commit", "-q", "--amend", "--no-edit")
    if path.endswith("conftest.py"):
        (research.root / ".git/info/exclude").write_text(
            (research.root / ".git/info/exclude").read_text() + "conftest.py\n")
    research.write(path, text)
    j = ditar_env(research)
    assert j.status == "REFUSED" and j.res.returncode == 4, j.show()
    assert j.last.startswith(f"DITAR REFUSED: judge_tree: {path} is untracked or git-ignored"), j.show()
    assert f"rm -- {path}" in j.last and not marker.exists() and research.ledger() == rows
    res = ditar(research, "try", "--classification", "exact")
    assert res.returncode == 4 and parse(res.stdout)[1] == "REFUSED" and path in res.stdout, res.stdout[-2000:]
    assert not marker.exists()


def test_a_gated_pytest_is_judged_by_the_judges_pytest(research):
    """A plain `pytest --ditar-try` of an honest tree is handed to the judge's pytest (its own ini,
    no conftest) and reports as before."""
    research.write("mutable/pipeline.py", COMMENT_ONLY)
    res = research.pytest("--ditar-try", "--ditar-class", "exact")
    out = res.stdout.str()
    assert out.strip().splitlines()[-1].startswith("DITAR TRY: "), out[-3000:]
    assert "ditar-judge.ini" in out  # pytest's header names the judge's ini as its configfile


def test_verify_fails_on_a_champion_whose_tree_differs_outside_the_mutable_paths(research):
    """A KEEP written by code the candidate chose (here: by hand, as the payload would have) sits on a
    commit that brought a pytest.ini: `dit-ar verify` names it."""
    from pytest_ditar.store.ledger import Ledger

    research.write("pytest.ini", ADDOPTS["pytest.ini"])
    research.git("add", "-A")
    sha = research.commit_candidate(SLOWER, "exact", "forged keep")
    Ledger(research.root / ".autoresearch/t").append({"commit": sha, "status": "KEEP", "class": "exact",
                                                       "description": "forged"})
    res = research.ditar("verify", "--sample", "0")
    line = next((ln for ln in res.stdout.splitlines() if ln.startswith("FAIL champion trees")), "")
    assert res.returncode == 1 and f"{sha[:7]}: pytest.ini added outside the mutable paths" in line, res.stdout
    assert json.dumps(research.ledger())  # the chain itself verifies: only the tree check caught it


def test_ci_guard_starts_the_judges_way_and_refuses_a_checkout_that_configures_it(research, scratch):
    """`dit-ar guard` (action.yml): an ordinary pull request's checkout judged on the judge's own
    configuration (a broken contract fails it); one that brings a pytest.ini naming a payload is
    REFUSED before pytest starts, the payload never imported."""
    research.git("checkout", "-q", "-b", "feature")
    research.write("mutable/pipeline.py", HALF_STEPS)  # other images: the exact contracts fail
    res = research.ditar("--tag", "t", "guard", "--json", str(scratch / "guard.json"), "--", "-m", "quality")
    last = res.stdout.strip().splitlines()[-1]
    assert res.returncode == 1 and last.startswith("DITAR GUARD: FAIL: quality: "), res.stdout[-3000:]
    assert json.loads((scratch / "guard.json").read_text())["verdict"] == "FAIL"
    marker = plant(research, scratch, "pytest.ini")
    res = research.ditar("--tag", "t", "guard", "--", "-m", "quality")
    last = res.stdout.strip().splitlines()[-1]
    assert res.returncode == 4 and last.startswith("DITAR REFUSED: judge_tree: pytest.ini added in HEAD"), last
    assert not marker.exists()


def test_the_users_own_c_rootdir_and_noconftest_are_still_refused(research, scratch):
    """The judge adds `-c <its ini> --rootdir=<root> --noconftest` after checking the user's
    arguments; the user's own are refused as before, and a forged judge's ini (one that says more
    than the suites and markers) is no judge's: its `-c` is refused before any conftest loads."""
    rows = research.ledger()
    plant(research, scratch, "none")
    (research.root / "none").unlink()
    research.git("rm", "-q", "none")
    research.git("commit", "-q", "--amend", "--no-edit")
    forged = scratch / "ditar-judge.ini"
    forged.write_text("[pytest]\ntestpaths = suites\naddopts = -p mutable.payload\n")
    for extra, said in ((("-c", str(forged)), "-c"), (("--rootdir", str(research.root)), "--rootdir"),
                        (("--noconftest",), "--noconftest")):
        j = ditar_env(research, "--", *extra)
        assert j.status == "REFUSED" and f"pytest option {said} is not allowed" in j.last, j.show()
    j = gated_pytest(research, "-c", str(forged), f"--rootdir={research.root.resolve()}", "--noconftest")
    assert j.status == "REFUSED" and "pytest option -c is not allowed" in j.last, j.show()
    assert research.ledger() == rows and research.head() == j.sha  # (its payload ran in that refused pytest)
