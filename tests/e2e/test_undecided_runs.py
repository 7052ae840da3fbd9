"""No gated run is left undecided (issue 17): whatever fails in the judge after the candidate ran
(another plugin's hook, pytest itself, our own record) ends in a CRASH verdict whose reason starts
"internal:" and names the log, a ledger row, the candidate reverted, and the next experiment
judged. And when HEAD is not one commit above the champion, the refusal says what the state is
and the one command that fixes it; running that command lets the next experiment through.

The failures come from a plugin installed as any pytest plugin is (a distribution with a pytest11
entry point, in an environment layered over the test one: tests/venvs.py), present since the
baseline (a plugin installed after it is REFUSED: tests/adversarial/test_judge_environment.py) and
inert until a test gives it the hooks to fail with."""
import os
import re
from pathlib import Path

import pytest
from venvs import install_plugin, layered_venv, site_packages

from candidates import ALTERS, COMMENT_ONLY, STOCK
from conftest import research_project

PLUGIN = "ditar_test_plugin"
# the installed plugin: runs the hooks the file named by DITAR_TEST_FAULT defines, none without it
PLUGIN_SOURCE = ("import os\n"
                 "_FAULT = os.environ.get('DITAR_TEST_FAULT')\n"
                 "if _FAULT:\n"
                 "    with open(_FAULT) as _f:\n"
                 "        exec(compile(_f.read(), _FAULT, 'exec'))\n")
COMMENT = "\n# a comment: same code, a different commit\n"  # appended: rebases onto the champion cleanly
INTERNAL = re.compile(r'reason="internal: (.*) \(traceback in (\S+/internal\.log)\)"')
_LAYER: list[Path] = []  # this process's layered environment, made once


@pytest.fixture
def plugged(pytester, model_cache, tmp_path_factory, monkeypatch):
    """`research`, its baseline and every later dit-ar run in the environment where PLUGIN is installed."""
    if not _LAYER:
        where = tmp_path_factory.mktemp("plugin-layer") / "venv"
        _LAYER.append(layered_venv(where))
        install_plugin(site_packages(where), PLUGIN, PLUGIN_SOURCE)
    monkeypatch.setenv("PATH", f"{_LAYER[0]}{os.pathsep}{os.environ['PATH']}")
    return research_project(pytester, tmp_path_factory)


@pytest.fixture
def load_plugin(monkeypatch, tmp_path):
    """Give the installed plugin `source`'s hooks in every pytest that dit-ar starts from now on."""
    def load(source: str) -> None:
        (tmp_path / "fault.py").write_text(source)
        monkeypatch.setenv("DITAR_TEST_FAULT", str(tmp_path / "fault.py"))

    def unload() -> None:
        monkeypatch.delenv("DITAR_TEST_FAULT")

    load.unload = unload
    return load


def _crashed_internally(proj, base: str, sha: str, res, line: str) -> tuple[str, Path]:
    """The run is a CRASH with an internal reason naming its log, recorded and reverted."""
    assert res.returncode == 10, res.stdout[-3000:] + res.stderr[-3000:]  # an internal CRASH exits as any CRASH
    m = INTERNAL.search(line)
    assert line.startswith("DITAR VERDICT: CRASH") and m, line
    log = Path(m.group(2))
    assert log.is_file() and "Traceback" in log.read_text(), log
    assert log.parent.parent == proj.root / ".autoresearch/t/runs"
    row = proj.ledger()[-1]
    assert row["status"] == "CRASH" and row["commit"] == sha and row["reason"].startswith("internal: ")
    assert proj.head() == base  # reverted, as for any CRASH
    return m.group(1), log


def _next_is_judged(proj) -> None:
    _, res, line = proj.experiment(ALTERS, "exact", "Next idea")
    assert line.startswith("DITAR VERDICT: DISCARD") and "quality=0/6" in line, res.stdout[-3000:]


def test_another_plugins_session_finish_raising_before_ours_is_an_internal_crash(plugged, load_plugin):
    proj = plugged
    base = proj.head()
    load_plugin("def pytest_sessionfinish(session, exitstatus):\n"
                "    raise RuntimeError('report server unreachable')\n")
    sha, res, line = proj.experiment(ALTERS, "exact", "Lower guidance")
    what, log = _crashed_internally(proj, base, sha, res, line)
    assert what == f"pytest_sessionfinish of plugin '{PLUGIN}' raised RuntimeError: report server unreachable"
    assert "report server unreachable" in log.read_text() and "Traceback" not in res.stdout + res.stderr
    assert (log.parent / "candidate.patch").is_file() and (log.parent / "summary.json").is_file()
    load_plugin.unload()
    _next_is_judged(proj)


def test_a_bug_in_our_own_record_is_an_internal_crash_recorded_bare(plugged, load_plugin):
    """The record itself raises (a bug of ours, injected): the full record of the CRASH raises
    too, so the bare record (plain ledger fields) takes over."""
    proj = plugged
    base = proj.head()
    load_plugin("from pytest_ditar.loop.judge import record\n"
                "def _broken(gate, d):\n"
                "    raise TypeError('injected bug in the summary')\n"
                "record._summary = _broken\n")
    sha, res, line = proj.experiment(ALTERS, "exact", "Lower guidance")
    what, log = _crashed_internally(proj, base, sha, res, line)
    assert what == "pytest-ditar's decision and record raised TypeError: injected bug in the summary"
    assert log.read_text().count("injected bug in the summary") >= 2  # the decision's, then the full record's
    assert "quality=n/a" in line  # the bare record: plain fields only
    load_plugin.unload()
    _next_is_judged(proj)


def test_an_internal_error_during_the_tests_is_an_internal_crash(plugged, load_plugin):
    proj = plugged
    base = proj.head()
    load_plugin("def pytest_runtest_logfinish(nodeid, location):\n"
                "    raise OSError(28, 'No space left on device')\n")
    sha, res, line = proj.experiment(ALTERS, "exact", "Lower guidance")
    what, _ = _crashed_internally(proj, base, sha, res, line)
    assert what == (f"pytest internal error: pytest_runtest_logfinish of plugin '{PLUGIN}' raised OSError: "
                    "[Errno 28] No space left on device")
    load_plugin.unload()
    _next_is_judged(proj)


def test_a_plugin_raising_after_our_record_leaves_the_verdict_standing(plugged, load_plugin):
    """A wrapper that raises after every plugin's session finish, ours included: the run is decided
    and recorded already; the error is that plugin's to report, and the verdict stays last."""
    proj = plugged
    base = proj.head()
    load_plugin("import pytest\n"
                "@pytest.hookimpl(wrapper=True)\n"
                "def pytest_sessionfinish(session, exitstatus):\n"
                "    yield\n"
                "    raise RuntimeError('late plugin')\n")
    sha, res, line = proj.experiment(ALTERS, "exact", "Lower guidance")
    assert line.startswith("DITAR VERDICT: DISCARD") and "quality=0/6" in line
    assert "RuntimeError: late plugin" in res.stderr and res.returncode != 0
    assert proj.ledger()[-1]["status"] == "DISCARD" and proj.ledger()[-1]["commit"] == sha and proj.head() == base


# ---- HEAD not one commit above the champion: the state and the one command -------------------

def _refusal(proj) -> str:
    res = proj.ditar("experiment", "--classification", "exact", "--description", "x")
    line = res.stdout.strip().splitlines()[-1]
    assert res.returncode == 4 and line.startswith("DITAR REFUSED: guard one_commit: "), res.stdout[-2000:]
    return line


def _fix_and_run(proj, line: str) -> None:
    """Run the command the refusal names (after its last ': '), then the experiment it lets through."""
    cmd = line.rsplit(": ", 1)[1]
    for part in cmd.split(" && "):
        args = part.split()
        assert args[0] == "git", cmd
        if args[1] == "commit":
            args += ["-m", "squashed\n\nDitar-Class: exact"]
        proj.git(*args[1:])
    res = proj.ditar("experiment", "--classification", "exact", "--description", "fixed")
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith("DITAR VERDICT: "), res.stdout[-3000:]


def test_two_new_commits_are_counted_and_squashed(research):
    proj = research
    champ = proj.head()
    proj.commit_candidate(STOCK + "\n# one\n", "exact", "one")
    proj.commit_candidate(ALTERS, "exact", "two")
    line = _refusal(proj)
    assert line == (f"DITAR REFUSED: guard one_commit: HEAD {proj.head()[:7]} is 2 commits above the champion "
                    f"{champ[:7]} (none of them judged yet; one hypothesis per commit): squash them into one: "
                    f"git reset --soft {champ[:7]} && git commit")
    _fix_and_run(proj, line)


def test_a_commit_kept_by_no_revert_is_named_and_dropped(research):
    proj = research
    champ = proj.head()
    left = proj.commit_candidate(ALTERS, "exact", "Lower guidance")
    res = proj.ditar("experiment", "--classification", "exact", "--description", "x", "--no-revert")
    assert res.stdout.strip().splitlines()[-1].startswith("DITAR VERDICT: DISCARD") and proj.head() == left
    top = proj.commit_candidate(ALTERS + COMMENT, "exact", "A comment")
    line = _refusal(proj)
    assert line == (f"DITAR REFUSED: guard one_commit: HEAD {top[:7]} is 2 commits above the champion {champ[:7]}; "
                    f"{left[:7]} below it is recorded as DISCARD but never reverted (a revert that failed, or "
                    f"--ditar-no-revert): drop it (and what lies below it), keeping the commits after it: "
                    f"git rebase --onto {champ[:7]} {left[:7]}")
    _fix_and_run(proj, line)
    assert proj.ledger()[-1]["description"] == "fixed" and proj.ledger()[-1]["parent"] == champ


def test_the_candidate_of_an_interrupted_run_is_named_and_dropped(plugged, load_plugin):
    """The issue's case: a run stopped without a verdict leaves its commit; the next hypothesis is
    committed on top of it."""
    proj = plugged
    champ = proj.head()
    load_plugin("import pytest\n"
                "def pytest_runtest_logfinish(nodeid, location):\n"
                "    pytest.exit('stopped by the operator', returncode=2)\n")
    left = proj.commit_candidate(COMMENT_ONLY, "exact", "A comment")
    res = proj.ditar("experiment", "--classification", "exact", "--description", "x")
    assert res.returncode == 2 and proj.head() == left and [r["status"] for r in proj.ledger()] == ["BASELINE"]
    load_plugin.unload()
    top = proj.commit_candidate(ALTERS + COMMENT, "exact", "Lower guidance")
    line = _refusal(proj)
    assert line == (f"DITAR REFUSED: guard one_commit: HEAD {top[:7]} is 2 commits above the champion {champ[:7]}; "
                    f"{left[:7]} below it is the candidate of a run that ended without a verdict (interrupted or "
                    f"killed): drop it (and what lies below it), keeping the commits after it: "
                    f"git rebase --onto {champ[:7]} {left[:7]}")
    _fix_and_run(proj, line)
    assert proj.ledger()[-1]["status"] == "DISCARD" and proj.ledger()[-1]["parent"] == champ
    assert "quality=0/6" in proj.ledger()[-1]["reason"] or proj.ledger()[-1]["quality_pass"] == 0


def test_a_branch_without_the_champion_gets_its_candidate_moved_onto_it(research):
    proj = research
    champ = proj.head()
    proj.git("checkout", "-q", "--orphan", "rebuilt")  # a history of its own, without the champion
    proj.write("mutable/NOTES.md", "rebuilt\n")  # inside the mutable paths: the tree check passes it
    proj.git("add", "mutable/NOTES.md")
    other = proj.commit_candidate(STOCK, None, "unrelated base")
    proj.git("checkout", "-q", "autoresearch/t")
    proj.git("reset", "-q", "--hard", other)
    top = proj.commit_candidate(ALTERS, "exact", "Lower guidance")
    line = _refusal(proj)
    assert line == (f"DITAR REFUSED: guard one_commit: HEAD {top[:7]}'s parent {other[:7]} is not the champion "
                    f"{champ[:7]}, and the champion is not in HEAD's history (the branch was moved or rebuilt): put "
                    f"the candidate on the champion: git rebase --onto {champ[:7]} {other[:7]}")
    _fix_and_run(proj, line)
