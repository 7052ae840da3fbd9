"""`dit-ar doctor --json` (issue 53): the table as one JSON document on stdout, its rows the text's
rows, with the step that comes next; and `dit-ar status --json` carries the same kind of `next`. A
project not started yet: both send the user to `dit-ar init`."""
import json

from jsonschemas import available, validate


def _doc(res, kind: str) -> dict:
    doc = json.loads(res.stdout)  # the whole of stdout: one document
    if available():
        validate(doc, kind)
    return doc


def test_doctor_json_is_the_table_as_values_with_its_next_step(project):
    text = project.ditar("doctor", "--no-probe")
    res = project.ditar("doctor", "--no-probe", "--json")
    doc = _doc(res, "doctor")
    assert doc["kind"] == "doctor" and doc["exit_status"] == res.returncode == text.returncode == 1, res.stderr
    width = max(len(c["name"]) for c in doc["checks"])  # the text's rows, made from the document's
    rows = [f"{c['name']:<{width}}  {c['result']:<4}  {c['detail']}" for c in doc["checks"]]
    assert rows == text.stdout.splitlines()[:doc["total"]], text.stdout
    failed = [c["name"] for c in doc["checks"] if c["result"] == "FAIL"]
    assert doc["failed"] == failed and {"branch", "baseline"} <= set(failed), doc["checks"]
    assert doc["passed"] == doc["total"] - len(failed) and doc["host"] is None  # no probe
    assert doc["next"].startswith("`dit-ar init --tag T`"), doc["next"]
    assert f"doctor: {doc['passed']}/{doc['total']} checks pass" in text.stdout

    st = project.ditar("status", "--json")
    status = _doc(st, "status")
    assert status["initialised"] is False and "dit-ar init --tag" in status["next"], status["next"]
