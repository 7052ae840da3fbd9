"""`dit-ar try --json` (issue 53): one document on stdout (kind "try" of verdict.schema.json), pytest's
output on stderr. Refused by the judge's own pytest (no baseline yet) and refused before pytest starts
(an environment variable that loads code): both an outcome REFUSED with the reason and the next step."""
import json

from jsonschemas import available, validate


def _try(project, env=None):
    res = project.ditar("try", "--classification", "exact", "--description", "nothing yet", "--json", env=env)
    doc = json.loads(res.stdout)
    if available():
        validate(doc, "verdict")
    return res, doc


def test_try_json_says_refused_with_the_reason_and_the_next_step(project):
    res, doc = _try(project)
    assert doc["kind"] == "try" and doc["outcome"] == "REFUSED" and doc["exit_status"] == res.returncode == 4
    assert "baseline missing" in doc["reason"] and doc["line"] == f"DITAR REFUSED: {doc['reason']}", doc
    assert doc["next"].startswith("nothing was judged or recorded") and doc["speedup"] is None
    assert "DITAR REFUSED" in res.stderr  # pytest's own output went to stderr, as it came

    res, doc = _try(project, env={"PYTEST_ADDOPTS": "--rootdir=/"})  # refused before pytest reads a file
    assert doc["outcome"] == "REFUSED" and res.returncode == 4 and "PYTEST_ADDOPTS" in doc["reason"], doc
