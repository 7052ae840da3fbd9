"""`dit-ar suite --json` (issue 53): the active suite as values, the ones its text prints, with the
step that comes next; nothing else on stdout."""
import json

import yaml

from jsonschemas import available, validate


def test_suite_json_holds_the_suite_its_text_describes(project):
    res = project.ditar("suite", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    if available():
        validate(doc, "suite")
    spec = yaml.safe_load((project.root / "suites/tiny/suite.yaml").read_text())
    assert doc["kind"] == "suite" and doc["name"] == spec["name"] == "tiny"
    assert [ln["name"] for ln in doc["lanes"]] == [ln["name"] for ln in spec["lanes"]]
    assert [ln["name"] for ln in doc["lanes"] if ln["objective"]] == [doc["objective_lane"]]
    assert doc["corpus"]["items"] == len(spec["corpus"]) == len(doc["corpus"]["seeds"])
    assert set(doc["classes"]) == {"exact", "numerical", "approximate", "quantization"}
    text = project.ditar("suite").stdout
    for cls, c in doc["classes"].items():  # each class's floors, as the text prints them
        assert f"  {cls:<12}  {c['floors']}  [" in text, text
    assert doc["pipeline"]["steps"] == spec["pipeline"]["steps"] and doc["next"].startswith("`dit-ar doctor`")
