"""A gated run's zygote, chosen before pytest's configure (so before the gate's own imports load):
the one the tag's last recording run handed over, where it may serve, else a new one, kept warm
for the next run where this run records (runtime.zygote says why that is safe).

The record is read from the state's backup ref (`refs/ditar/<tag>:zygote.json`), which only the
judge's record step writes, never from the working file: a record planted by hand names nothing
a judge will use.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pytest_ditar.config.project import load_config
from pytest_ditar.core.errors import DitarError
from pytest_ditar.loop.integrity.tags import resolve_tag
from pytest_ditar.runtime import zygote
from pytest_ditar.store.atomic import write_json_atomic
from pytest_ditar.store.paths import ZYGOTE_FILE, TagPaths
from pytest_ditar.vcs import trees


def begin(config_path: Path, tag: str | None, records: bool) -> None:
    """Adopt the handed-over zygote of the run's tag, or start one (kept warm when the run
    `records` and its workers are sandboxed). A config that does not load starts the run's own
    zygote; the gate reports the config's error itself."""
    record, keep = None, False
    try:
        cfg = load_config(config_path)
        keep = records and cfg.sandboxed
        if cfg.sandboxed:  # unsandboxed candidates share the judge's namespaces: nothing is kept for them
            record = handed_over(cfg.root, resolve_tag(cfg, tag))
    except (DitarError, OSError, ValueError):
        pass
    zygote.begin(record, keep)


def handed_over(root: Path, tag: str) -> dict[str, Any] | None:
    """The zygote record of the tag's newest backup, or None."""
    text = trees.file_at(root, trees.state_ref(tag), ZYGOTE_FILE)
    try:
        rec = json.loads(text) if text else None
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None


def hand_over(paths: TagPaths) -> None:
    """Before the record step's backup: name this run's kept zygote for the next run (the file is
    left as it is when there is none: what it names is checked again before any use)."""
    rec = zygote.handover()
    if rec is not None:
        write_json_atomic(paths.zygote_file, rec)
