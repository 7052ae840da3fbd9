"""`dit-ar profile --json` (issue 53): the profile's summary.json as one document on stdout, where it
lies, and the next step its table ends with; the table itself on stderr."""
import json
from pathlib import Path

from pytest_ditar.core.documents import PROFILE_NEXT

from jsonschemas import available, validate


def test_profile_json_is_the_summary_it_wrote(project):
    res = project.ditar("profile", "--json", "--steps", "2")
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(res.stdout)
    if available():
        validate(doc, "profile")
    assert doc["kind"] == "profile" and doc["exit_status"] == 0 and doc["error"] is None
    written = json.loads((Path(doc["out_dir"]) / "summary.json").read_text())
    assert doc["summary"] == written and written["steps"] == 2, doc["summary"]
    assert doc["next"] == PROFILE_NEXT and f"ditar: next: {PROFILE_NEXT}" in res.stderr
    assert "call (wall)" in res.stderr  # the phase table, off stdout
