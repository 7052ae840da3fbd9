"""How a run's config is read (issue 26): JSON as JSON and YAML as YAML, with errors that name the
file, line and column ($DITAR_CONFIG's precedence: tests/e2e/test_config_precedence.py)."""
import json
from pathlib import Path

import pytest

from pytest_ditar.config.project import load_config
from pytest_ditar.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]


def test_a_json_config_is_read_as_json(tmp_path):
    cfg = json.loads((REPO / "config/autoresearch.json").read_text())
    cfg["perf"]["min_speedup"] = 1e-2
    text = json.dumps(cfg).replace('"min_speedup": 0.01', '"min_speedup": 1e-2')
    assert '"min_speedup": 1e-2' in text  # YAML 1.1 reads this as the string '1e-2'
    path = tmp_path / "config/autoresearch.json"
    path.parent.mkdir()
    path.write_text(text)
    (tmp_path / "suites").symlink_to(REPO / "suites")
    assert load_config(path).perf.min_speedup == pytest.approx(0.01)
    path.write_text(text[:-1] + ",}")
    with pytest.raises(ConfigError, match=r"autoresearch\.json: malformed config at line 1, column \d+: "):
        load_config(path)


def test_the_shipped_config_says_what_the_dataclasses_default_to(tmp_path):
    """One source of defaults: config/autoresearch.json loads to the same Config as one that names
    only the project's own choices (its suite and fixed paths), so the file, the dataclasses and
    DEFAULT_THRESHOLDS cannot drift apart unnoticed."""
    import dataclasses

    from pytest_ditar.config.project import load_config

    shipped_path = REPO / "config/autoresearch.json"
    raw = json.loads(shipped_path.read_text())
    (tmp_path / "config").mkdir()
    minimal = tmp_path / "config/autoresearch.json"
    minimal.write_text(json.dumps({"suite": raw["suite"], "fixed_paths": raw["fixed_paths"]}))
    shipped, bare = load_config(shipped_path), load_config(minimal)
    assert dataclasses.replace(shipped, path=bare.path, root=bare.root) == bare
