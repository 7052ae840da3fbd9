"""runtime.boxdir: the judge's folder for its workers, and what a killed judge left (issue 38/39)."""
from __future__ import annotations

import os
import subprocess
import sys

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
