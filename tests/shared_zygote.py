"""One zygote per xdist worker, kept warm from test to test (tests/conftest.py research_project).

Each gated run after the worker's first skips the torch and diffusers imports (4 s quiet, 8 s on a
loaded 2-core box): the record a research template's baseline handed over is written into each
research project's state backup the way the judge's record step writes it (loop.integrity.backup.save),
so the project's first run adopts it as a tag's next run does. A kept zygote's key holds the
environment, so every project of the worker gets one $HOME (one_home).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

SHARED: dict[str, Any] = {}  # "rec": the shared zygote's record; "key": the worker's own key


def alive(rec: dict) -> bool:
    from pytest_ditar.runtime import zygote

    try:
        return zygote.start_ticks(int(rec["pid"])) == int(rec["start"])
    except (KeyError, TypeError, ValueError):
        return False


def shares(rec: dict) -> bool:
    """Whether `rec` is (now) the worker's shared zygote: the one already shared, or, where none is
    alive, a live one of the key a gated run of this worker's own environment computes (a template's
    baseline or a test's run started it)."""
    held = SHARED.get("rec")
    if held is not None and rec.get("pid") == held.get("pid") and rec.get("start") == held.get("start"):
        return True
    if (held is None or not alive(held)) and alive(rec) and rec.get("key") == SHARED.get("key"):
        SHARED["rec"] = rec
        return True
    return False


def end_unless_shared(record: Path) -> None:
    """End the zygote a tag's `zygote.json` names, unless it is (now) the worker's shared one (shares)."""
    from pytest_ditar.runtime import zygote

    try:
        rec = json.loads(record.read_text())
    except (OSError, ValueError):
        return
    if isinstance(rec, dict) and not shares(rec):
        zygote.retire(rec)


def hand_over(root: Path) -> None:
    """Name the worker's shared zygote in `root`'s tag t, as a recorded run hands its zygote over."""
    held = SHARED.get("rec")
    if held is None or not alive(held):
        return
    from pytest_ditar.loop.integrity import backup
    from pytest_ditar.store.paths import TagPaths

    paths = TagPaths.of(root, ".autoresearch", "t")
    paths.zygote_file.write_text(json.dumps(held))
    backup.save(root, paths, "ditar: the test worker's shared zygote")


def one_home(pytester: pytest.Pytester) -> None:
    """Every project of this worker under one $HOME, the session's temporary root that holds each
    test's folder (pytester makes each test's folder its $HOME, and a kept zygote's key holds the
    environment); pytester puts back the outer one at teardown. The projects still lie under $HOME,
    as a user's do."""
    os.environ["HOME"] = os.environ["USERPROFILE"] = str(pytester.path.parent)
    if "key" not in SHARED:  # what a gated run started from this environment computes
        from pytest_ditar.runtime import zygote

        SHARED["key"] = zygote.daemon_key()


def retire_shared() -> None:
    held = SHARED.get("rec")
    if held is not None:
        from pytest_ditar.runtime import zygote

        zygote.retire(held)
