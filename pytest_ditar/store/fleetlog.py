"""The fleet's ledger: `fleet.jsonl` in the tree of refs/ditar-fleet/<fleet>, hash-chained like
the experiment ledger (store.ledger's row hash), appended by every host of the fleet.

Rows are chained here, in memory: the file lives in git, not in a state directory. Two hosts
that append at once each build on the remote's rows; the one whose push loses the race rebuilds
its new rows on top of the winner's (`merge`) and pushes again, so no row is lost. No git here.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone

from pytest_ditar.core.vocabulary import FLEET_KINDS, SCHEMA_VERSION
from pytest_ditar.store.ledger import GENESIS_HASH, row_hash

FILE = "fleet.jsonl"
KEYS: tuple[str, ...] = ("kind", "host", "tag", "commit", "source_host", "source_commit", "speedup", "ci_low",
                         "ci_high", "class", "card", "card_diff", "note", "time")
_CHAIN = ("seq", "prev_hash", "hash", "schema_version")


def content(row: Mapping[str, object]) -> dict[str, object]:
    """A row without what the chain assigns: what a host wrote."""
    return {k: v for k, v in row.items() if k not in _CHAIN}


def new_row(**values: object) -> dict[str, object]:
    unknown = set(values) - set(KEYS)
    if unknown or values.get("kind") not in FLEET_KINDS:
        raise ValueError(f"fleet row: unknown keys {sorted(unknown)} or kind {values.get('kind')!r}")
    return {"time": datetime.now(timezone.utc).isoformat(timespec="seconds"), **values}


def chained(rows: Sequence[Mapping[str, object]]) -> str:
    """The rows as fleet.jsonl text, each carrying its place, the previous row's hash and its own."""
    prev, lines = GENESIS_HASH, []
    for i, row in enumerate(rows, start=1):
        stored: dict[str, object] = {**content(row), "seq": i, "schema_version": SCHEMA_VERSION, "prev_hash": prev}
        stored["hash"] = prev = row_hash(stored)
        lines.append(json.dumps(stored, ensure_ascii=False, sort_keys=True, allow_nan=False))
    return "".join(line + "\n" for line in lines)


def read(text: str) -> tuple[list[dict[str, object]], list[str]]:
    """The rows of fleet.jsonl text and what breaks its chain ([]: it verifies)."""
    rows: list[dict[str, object]] = []
    problems: list[str] = []
    prev = GENESIS_HASH
    for i, line in enumerate(text.splitlines(), start=1):
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            return rows, [*problems, f"row {i}: malformed JSON ({exc})"]
        if row.get("hash") != row_hash(row):
            problems.append(f"row {i}: hash mismatch (edited?)")
        if row.get("prev_hash") != prev:
            problems.append(f"row {i}: prev_hash does not match row {i - 1}" if i > 1 else
                            "row 1: prev_hash is not the genesis hash (row deleted?)")
        if row.get("seq") != i or row.get("kind") not in FLEET_KINDS:
            problems.append(f"row {i}: seq {row.get('seq')!r} or kind {row.get('kind')!r} is wrong")
        prev = str(row.get("hash"))
        rows.append(row)
    return rows, problems


def merge(theirs: Sequence[Mapping[str, object]], ours: Sequence[Mapping[str, object]]) -> list[dict[str, object]]:
    """The remote's rows, then those of `ours` it does not hold yet (by content), in order."""
    have = {json.dumps(content(r), sort_keys=True) for r in theirs}
    out = [content(r) for r in theirs]
    out += [content(r) for r in ours if json.dumps(content(r), sort_keys=True) not in have]
    return out
