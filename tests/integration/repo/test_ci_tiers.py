"""The two tiers of tests/e2e and tests/adversarial (issue 50): .ci/run runs the core tier inside 30
minutes beside a CPU hog, .ci/run-long the long one (marker `long`: tests/conftest.py LONG and every
solo test). Together they run every test once, and each names its tier by marker, not by a list of
its own."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import LONG, listed_long

REPO = Path(__file__).resolve().parents[3]


# one collection, each item with the tier markers it ends up with (after tests/conftest.py adds `long`)
_DUMP = """
import json
def pytest_collection_finish(session):
    print("TIERS " + json.dumps({i.nodeid: sorted(m for m in ("long", "solo") if i.get_closest_marker(m))
                                 for i in session.items}))
"""


def _collected(tmp_path: Path) -> dict[str, list[str]]:
    (tmp_path / "tier_dump.py").write_text(_DUMP)
    args = [sys.executable, "-m", "pytest", "tests/e2e", "tests/adversarial", "--collect-only", "-q",
            "-p", "no:cacheprovider", "-p", "tier_dump"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    res = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("TIERS "))
    return json.loads(line.removeprefix("TIERS "))


def test_each_long_entry_is_a_test_file_of_e2e_or_adversarial_or_one_of_its_tests():
    for entry, why in LONG.items():
        rel, _, test = entry.partition("::")
        assert (REPO / rel).is_file() and re.fullmatch(r"tests/(e2e|adversarial)/test_\w+\.py", rel), entry
        assert not test or re.search(rf"^def {re.escape(test)}\(", (REPO / rel).read_text(), flags=re.M), entry
        assert why.strip(), entry


def test_long_is_the_listed_files_and_every_solo_test_and_nothing_else(tmp_path):
    tiers = _collected(tmp_path)
    long_ = {t for t, m in tiers.items() if "long" in m}
    solo = {t for t, m in tiers.items() if "solo" in m}
    assert len(tiers) > len(long_) > 0 and solo  # the core tier is the larger
    assert solo <= long_
    assert long_ == {t for t in tiers if listed_long(t)} | solo
    # .ci/run's `-m 'not long'` and .ci/run-long's `long` then split every test once


def test_ci_runs_the_core_tier_and_ci_long_the_long_one():
    run = (REPO / ".ci/run").read_text()
    steps = [ln for ln in run.splitlines() if ln.startswith("python -m pytest tests/e2e tests/adversarial")]
    assert len(steps) == 1 and "-m 'not long'" in steps[0], steps
    long_ = (REPO / ".ci/run-long").read_text()
    steps = [ln for ln in long_.splitlines() if ln.startswith("python -m pytest tests/e2e tests/adversarial")]
    assert len(steps) == 2 and "-m 'long and not solo'" in steps[0] and "-m solo" in steps[1], steps
    assert (REPO / ".ci/run-long").stat().st_mode & 0o111
