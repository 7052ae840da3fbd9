"""store.tried: `dit-ar try`'s notes, read back oldest first, a damaged line skipped, never a verdict."""
from pytest_ditar.store import tried
from pytest_ditar.store.paths import TagPaths


def test_tries_are_appended_and_read_back_in_order_skipping_what_does_not_parse(tmp_path):
    paths = TagPaths(tmp_path / "t")
    paths.dir.mkdir()
    assert tried.rows(paths) == []
    tried.append(paths, {"outcome": "NOT_FASTER", "description": "Fuse qkv"})
    with open(paths.dir / "tried.jsonl", "a") as fh:
        fh.write("{half a row\n")
    tried.append(paths, {"outcome": "FASTER", "description": "Lean loop"})
    assert [r["description"] for r in tried.rows(paths)] == ["Fuse qkv", "Lean loop"]
