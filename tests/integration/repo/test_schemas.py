"""The JSON Schemas the package ships (issue 43): draft 2020-12, in the wheel as package data, and
held to the code they describe, so neither drifts alone: the verdict's and summary's enums are
core.vocabulary's, the config schema's keys are config.project's dataclass fields, and the loader
and the schema agree on what a config may say. (Every document the tests produce validates too:
tests/conftest.py's _documents_validate.)"""
import dataclasses
import fnmatch
import json
import tomllib
from pathlib import Path

import pytest

from pytest_ditar.config.project import Config, HoldoutConfig, PerfConfig, SemanticConfig, load_config
from pytest_ditar.core.errors import ConfigError
from pytest_ditar.core.thresholds import Thresholds
from pytest_ditar.core.vocabulary import CLASSES, ERROR_KINDS, LANE_VERDICTS, STATUSES

from jsonschemas import KINDS, available, problems, schema

REPO = Path(__file__).resolve().parents[3]
SCHEMAS = REPO / "pytest_ditar/schemas"

needs_jsonschema = pytest.mark.skipif(not available(), reason="jsonschema (the test extra) is not installed")


@needs_jsonschema
def test_each_schema_is_draft_2020_12_and_shipped_as_package_data():
    import jsonschema

    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["pytest_ditar"]
    shipped = sorted(p.name for p in SCHEMAS.iterdir())
    assert shipped == sorted(f"{k}.schema.json" for k in KINDS)
    for kind in KINDS:
        s = schema(kind)
        assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        jsonschema.Draft202012Validator.check_schema(s)
        assert any(fnmatch.fnmatch(f"schemas/{kind}.schema.json", pat) for pat in data), data


def test_the_verdicts_and_summarys_words_are_the_vocabularys():
    gate = schema("verdict")["$defs"]["gate"]["properties"]
    assert gate["verdict"]["enum"] == [*STATUSES, "REFUSED", None]
    lane = schema("verdict")["$defs"]["gate"]["properties"]["lanes"]["additionalProperties"]["properties"]
    assert lane["verdict"]["enum"] == [*LANE_VERDICTS, None]
    errors = schema("verdict")["$defs"]["guard"]["properties"]["errors"]["items"]["properties"]
    assert errors["kind"]["enum"] == list(ERROR_KINDS)
    summary = schema("summary")["properties"]
    assert summary["decision"]["enum"] == list(STATUSES)
    outcome = summary["lanes"]["additionalProperties"]["properties"]["outcome"]
    assert outcome["properties"]["verdict"]["enum"] == list(LANE_VERDICTS)
    from pytest_ditar.core.decision import LaneOutcome

    assert set(outcome["properties"]) == {f.name for f in dataclasses.fields(LaneOutcome)}


def test_the_config_schemas_keys_are_the_loaders():
    s = schema("config")
    top = {f.name for f in dataclasses.fields(Config)} - {"path"}  # `root` is a key too, read apart
    assert set(s["properties"]) == top
    assert s["required"] == ["suite"]
    for key, cls in (("perf", PerfConfig), ("semantic", SemanticConfig), ("holdout", HoldoutConfig)):
        assert set(s["properties"][key]["properties"]) == {f.name for f in dataclasses.fields(cls)}, key
    thresholds = s["properties"]["thresholds"]
    assert thresholds["propertyNames"]["enum"] == list(CLASSES)
    assert set(thresholds["additionalProperties"]["properties"]) == {f.name for f in dataclasses.fields(Thresholds)}


@needs_jsonschema
def test_the_repositorys_configs_validate():
    for path in [REPO / "config/autoresearch.json", *sorted((REPO / "examples").rglob("*.json"))]:
        doc = json.loads(path.read_text())
        if "suite" in doc:  # a project config (examples hold other JSON too)
            assert problems(doc, "config") == [], path


@needs_jsonschema
@pytest.mark.parametrize("edit", [
    {"suit": "tiny"},  # an unknown key
    {"item_timeout_s": "600"},  # a wrong type
    {"mutable_paths": "mutable/"},
    {"perf": {"alpha": 0.7}},  # out of range
    {"perf": {"max_rounds": 2}},
    {"perf": {"guard_tolerance": 1.0}},
    {"build_timeout_s": 0},
    {"sandbox": "maybe"},
    {"thresholds": {"exotic": {}}},
    {"thresholds": {"exact": {"psnr_floor": 1}}},
    {"semantic": {"clip_model": 3}},
    {"holdout": {"count": 1.5}},
])
def test_the_loader_and_the_schema_refuse_the_same_configs(tmp_path, edit):
    base = json.loads((REPO / "config/autoresearch.json").read_text())
    doc = {**base, **{k: ({**base.get(k, {}), **v} if isinstance(v, dict) and k != "thresholds" else v)
                      for k, v in edit.items()}}
    (tmp_path / "config").mkdir()
    path = tmp_path / "config/autoresearch.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError):
        load_config(path)
    assert problems(doc, "config"), edit
    path.write_text(json.dumps(base))
    assert load_config(path).suite == "tiny" and problems(base, "config") == []
