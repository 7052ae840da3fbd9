"""A run reads its config more than once (the plugin's activation, then the session) and parses
it once: the text is read each time, so an edit between two reads is seen, never a stale copy."""
import json
from pathlib import Path

from pytest_ditar.config import project

REPO = Path(__file__).resolve().parents[3]


def _project(tmp_path: Path) -> Path:
    path = tmp_path / "config/autoresearch.json"
    path.parent.mkdir()
    path.write_text((REPO / "config/autoresearch.json").read_text())
    (tmp_path / "suites").symlink_to(REPO / "suites")
    return path


def test_the_same_text_is_parsed_once_and_an_edit_is_seen(tmp_path, monkeypatch):
    path = _project(tmp_path)
    parsed = []
    real = json.loads
    monkeypatch.setattr(project.json, "loads", lambda text, *a, **k: (parsed.append(1), real(text, *a, **k))[1])
    first = project.load_config(path)
    assert project.load_config(path) is first and len(parsed) == 1
    raw = real(path.read_text())
    raw["perf"]["min_speedup"] = 0.07
    path.write_text(json.dumps(raw))
    edited = project.load_config(path)
    assert edited.perf.min_speedup == 0.07 and first.perf.min_speedup != 0.07 and len(parsed) == 2
