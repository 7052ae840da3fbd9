"""The package's functions stay simple enough to read (issue 51): McCabe complexity as ruff's C901
counts it. None over 15 (pyproject.toml's [tool.ruff.lint.mccabe], so `ruff check` fails CI on one),
and at most MAX_OVER_10 over 10, counted here. The count also runs on a planted tree, so a check that
stopped seeing anything fails here."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
MAX_OVER_10 = 12
LIMIT = 15  # pyproject.toml's max-complexity

_MESSAGE = re.compile(r"`(?P<name>[^`]+)` is too complex \((?P<n>\d+) > \d+\)")


def over(paths: list[Path], threshold: int) -> list[tuple[str, str, int]]:
    """(file, function, complexity) of every function above `threshold`, by ruff's C901."""
    res = subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "C901", "--config",
                          f"lint.mccabe.max-complexity={threshold}", "--output-format", "json", "--exit-zero",
                          *map(str, paths)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    found = []
    for d in json.loads(res.stdout):
        m = _MESSAGE.search(d["message"])
        assert m, d["message"]
        found.append((Path(d["filename"]).name, m.group("name"), int(m.group("n"))))
    return sorted(found)


def test_at_most_twelve_functions_are_over_10_and_none_over_15():
    found = over([REPO / "pytest_ditar"], 10)
    listed = "\n".join(f"  {f}:{name} {n}" for f, name, n in found)
    assert not [x for x in found if x[2] > LIMIT], f"functions over {LIMIT}:\n{listed}"
    assert len(found) <= MAX_OVER_10, (f"{len(found)} functions over McCabe 10 (at most {MAX_OVER_10}): split one "
                                       f"into named steps\n{listed}")


def test_ruff_fails_ci_on_a_package_function_over_15():
    lint = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert "C901" in lint["select"] and lint["mccabe"]["max-complexity"] == LIMIT
    assert not any("C901" in rules for glob, rules in lint.get("per-file-ignores", {}).items()
                   if glob.startswith("pytest_ditar")), "the package's own files never skip C901"


def test_the_count_sees_a_planted_complex_function(tmp_path):
    branches = "\n".join(f"    if x == {i}:\n        return {i}" for i in range(11))  # 11 ifs: complexity 12
    (tmp_path / "planted.py").write_text(f"def tangled(x):\n{branches}\n    return -1\n\n\n"
                                         "def plain(x):\n    return x + 1\n")
    assert over([tmp_path], 10) == [("planted.py", "tangled", 12)]
    assert over([tmp_path], 12) == []
