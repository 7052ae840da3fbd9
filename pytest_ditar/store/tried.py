"""`tried.jsonl`: the ideas `dit-ar try` timed and that were not committed, one row per try, so a
later session sees in `dit-ar status` what was tried and how it came out. A note for the agent,
not a verdict: the ledger stays the record of truth, and nothing judged reads this file.
"""
from __future__ import annotations

import json
from typing import Any

from pytest_ditar.store.atomic import write_text_atomic
from pytest_ditar.store.paths import TRIED_JSONL, TagPaths


def append(paths: TagPaths, row: dict[str, Any]) -> None:
    """Add one try's row (rewritten whole and atomically: a reader never sees half a row)."""
    path = paths.dir / TRIED_JSONL
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    write_text_atomic(path, old + json.dumps(row, sort_keys=True) + "\n")


def rows(paths: TagPaths) -> list[dict[str, Any]]:
    """Every try noted, oldest first; a line that does not parse is skipped (a note, not a record)."""
    path = paths.dir / TRIED_JSONL
    out = []
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            out.append(row)
    return out
