"""runtime.boxdir: the judge's folder for its workers, and what a killed judge left (issue 38/39)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from pytest_ditar.runtime import boxdir


def test_folders_are_named_by_chance_never_by_role(tmp_path, monkeypatch):
    monkeypatch.setattr(boxdir, "base", lambda: str(tmp_path))
    monkeypatch.setattr(boxdir, "_OURS", [])
    a, b = boxdir.new("work"), boxdir.new("work")
    assert a != b and a.parent == b.parent and a.parent.parent.name.startswith(f"ditar-run-{os.getpid()}-")
    assert len(a.name) == 12 and all(c in "0123456789abcdef" for c in a.name)
    assert boxdir.hidden_outside_shm() == (str(boxdir.judge_dir()),)  # no /dev/shm here: masked instead
    boxdir.remove()
    assert not a.exists()


def test_a_dead_judges_folder_is_swept_and_a_live_ones_kept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = tmp_path / f"ditar-run-{int(dead.stdout)}-abc"
    (gone / "io").mkdir(parents=True)
    live = tmp_path / f"ditar-run-{os.getpid()}-def"
    live.mkdir()
    other = tmp_path / "ditar-something-else"
    other.mkdir()
    assert boxdir.sweep(str(tmp_path)) == [gone.name]
    assert not gone.exists() and live.exists() and other.exists()


def test_a_killed_judge_not_yet_reaped_and_a_reused_pid_are_swept(tmp_path):
    """A SIGKILLed judge stays a zombie until its new parent reaps it, and the next run's sweep came
    in that window (its folders outlived it: tests/e2e/test_kill_mid_run.py); a pid handed to a
    later process is no sign that the judge lives."""
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    while open(f"/proc/{zombie.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
        time.sleep(0.01)  # exited, not yet waited for
    killed = tmp_path / f"ditar-run-{zombie.pid}-abc"
    killed.mkdir()
    later = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        reused = tmp_path / f"ditar-run-{later.pid}-def"  # made an hour before its pid's process started
        reused.mkdir()
        os.utime(reused, (time.time() - 3600, time.time() - 3600))
        live = tmp_path / f"ditar-run-{later.pid}-ghi"
        live.mkdir()
        assert sorted(boxdir.sweep(str(tmp_path))) == sorted([killed.name, reused.name])
        assert live.exists()
    finally:
        later.kill()
        later.wait()
        zombie.wait()
