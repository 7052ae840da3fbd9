"""Which kept zygote a judge may use (runtime.zygote): the record's key and the live process, read
from /proc, never from the process itself. The end-to-end runs are tests/e2e/test_warm_zygote.py."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pytest_ditar.runtime import zygote

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")


def test_the_key_ignores_what_only_a_shell_or_git_sets_and_follows_the_rest(monkeypatch):
    key = zygote.daemon_key()
    monkeypatch.setenv("PWD", "/elsewhere")
    monkeypatch.setenv("GIT_CONFIG_COUNT", "7")
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "x")
    monkeypatch.setenv("DITAR_ZYGOTE_IDLE_S", "5")
    assert zygote.daemon_key() == key
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # read by torch at import: another image
    assert zygote.daemon_key() != key


@pytest.fixture
def sleeper():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield p
    p.kill()
    p.wait()


def test_a_record_is_refused_unless_the_live_process_is_the_one_it_names(sleeper):
    key = zygote.daemon_key()
    start = zygote.start_ticks(sleeper.pid)
    rec = {"pid": sleeper.pid, "start": start, "key": key, "name": "pytest-ditar/zygote/x", "idle_s": 60}
    assert zygote.adoption_problem({"pid": "x"}, key) == "no usable record"
    assert zygote.adoption_problem({**rec, "key": "0" * 24}, key).startswith("stale")
    assert zygote.adoption_problem({**rec, "start": start + 1}, key) == "gone"  # the pid was reused
    assert zygote.adoption_problem(rec, key) == f"pid {sleeper.pid} runs something else"
    sleeper.kill()
    sleeper.wait()
    assert zygote.adoption_problem(rec, key) == "gone"


def test_the_zygote_a_judge_starts_to_keep_names_itself_in_its_record_and_passes_the_checks():
    z = zygote.Zygote.start(keep_s=30)
    try:
        # once it answers it has exec'd: before that its /proc cmdline can still be the forking
        # judge's (or empty), and a record is only ever adopted by a later run (1 in 18 starts read so)
        assert z.status(-1) == -9
        rec = dict(z.kept or {})
        assert rec["pid"] == z.pid and rec["start"] == zygote.start_ticks(z.pid)
        assert zygote.adoption_problem(rec, zygote.daemon_key()) is None
        assert zygote.adoption_problem(rec, "another-key") is not None
    finally:
        z.close()  # not handed over: killed
    z.proc.wait(timeout=10)
    assert zygote.start_ticks(z.pid) is None
    assert os.environ.get("DITAR_ZYGOTE_IDLE_S") == "0"  # tests/conftest.py: nothing kept by the suite's runs


def test_a_record_whose_pid_is_no_zygote_of_ours_is_passed_over_in_silence(sleeper, monkeypatch):
    """issue 50: every run's time line said "the recorded zygote not used: pid N runs something else"
    about the user's own other zygote; a record left behind is nothing to report, a stale key is."""
    rec = {"pid": sleeper.pid, "start": zygote.start_ticks(sleeper.pid), "key": zygote.daemon_key(),
           "name": "pytest-ditar/zygote/x", "idle_s": 60}
    live = zygote.Zygote.start(keep_s=30)  # a zygote of ours, recorded under an older key
    try:
        stale = {**(live.kept or {}), "key": "0" * 24}
        monkeypatch.setattr(zygote.Zygote, "start", classmethod(lambda cls, keep_s: None))
        for record, said in ((rec, False), (stale, True)):
            monkeypatch.setattr(zygote, "_ZYGOTE", [])
            monkeypatch.setattr(zygote, "_NOT_ADOPTED", [])
            zygote.begin(record, keep=False)
            assert ("the recorded zygote not used" in zygote.state()) == said, zygote.state()
    finally:
        live.close()
