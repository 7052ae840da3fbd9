"""Issue 26: ruff and mypy pass, with the settings in pyproject.toml ([tool.ruff], [tool.mypy]); here
with the long runs, as mypy from a cold cache takes two minutes of the main suite's ten.

The same commands as .ci/run's lint steps, through this interpreter; skipped where the test extra
(which installs both) is not installed.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_passes() -> None:
    pytest.importorskip("ruff")
    res = _run("ruff", "check", "pytest_ditar", "tests", "benchmarks")
    assert res.returncode == 0, res.stdout + res.stderr


def test_mypy_passes() -> None:
    pytest.importorskip("mypy")
    res = _run("mypy", "pytest_ditar")
    assert res.returncode == 0, res.stdout + res.stderr
