"""One judgment per change: a change judged on a champion is not run again; one the gate could not
judge runs once more, linked to the first.

A change is its diff against the champion it sits on: the `git format-patch` body without the
commit's header (message, author, date) or the judge's git version, so a new message does not make
a new idea. A run is *not judged* when the gate could not judge the change itself: a DISCARD whose
only objection is an UNSTABLE objective lane (the host, or work on the device from another process,
not the idea), or a CRASH of the judge ("internal: ..."). Such a change may run once more on the
same champion, and its ledger row names the first (`rerun_of`). Any other verdict is a judgment:
running that change again on that champion would be re-running until noise favours it (program.md
section 2), so the gate refuses it before any candidate code runs, as it refuses a change left
unjudged twice. Pure: ledger rows in, a key, a link or a refusal out.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from pytest_ditar.core.vocabulary import INTERNAL, OBJECTIVE_UNSTABLE

KEY_CHARS = 16  # of the sha256: enough to tell a ledger's changes apart, short in a TSV cell


def patch_key(patch: str) -> str:
    """The change's identity: sha256 of its diff (from the first `diff --git` line to the end,
    without format-patch's `-- ` version trailer); "" for an empty patch."""
    start = patch.find("diff --git ")
    if start < 0:
        return ""
    body = patch[start:]
    trailer = body.rfind("\n-- \n")
    if trailer >= 0:
        body = body[:trailer + 1]
    return hashlib.sha256(body.encode("utf-8", "surrogateescape")).hexdigest()[:KEY_CHARS]


def judged(status: str, causes: Iterable[str]) -> bool:
    """Whether a run judged its change, from what its objections are (Decision.causes): False for a
    DISCARD whose every objection is its UNSTABLE objective lane, and for a CRASH of the judge itself."""
    causes = list(causes)
    if status == "CRASH":
        return not (causes and all(c == INTERNAL for c in causes))
    if status == "DISCARD":
        return not (causes and all(c == OBJECTIVE_UNSTABLE for c in causes))
    return True


def _same(rows: Iterable[Mapping[str, Any]], key: str, parent: str) -> list[Mapping[str, Any]]:
    return [r for r in rows if key and r.get("patch") == key and r.get("parent") == parent]


def rerun_of(rows: Iterable[Mapping[str, Any]], key: str, parent: str) -> int | None:
    """The run that first tried this change on this champion and was not judged, if any."""
    first = next((r for r in _same(rows, key, parent) if str(r.get("judged")) == "0"), None)
    return int(first["run"]) if first is not None else None


def refusal(rows: Iterable[Mapping[str, Any]], key: str, parent: str) -> str | None:
    """Why this change must not run on this champion again; None when it may."""
    same = _same(rows, key, parent)
    done = [r for r in same if str(r.get("judged")) != "0"]
    if done:
        r = done[-1]
        return (f"this change was already judged on this champion (run {r.get('run')}: {r.get('status')}); "
                "it is not run again (program.md section 2): commit a different hypothesis")
    if len(same) >= 2:
        runs = ", ".join(str(r.get("run")) for r in same)
        return (f"this change was not judged twice (runs {runs}: the objective lane UNSTABLE, or the judge "
                "crashed): leave it; if runs keep ending UNSTABLE, the host is the problem (`dit-ar doctor`)")
    return None


def row_judged(row: Mapping[str, Any]) -> bool:
    """Whether a ledger row's run judged its change (its `judged` field; rows from before it: yes)."""
    return str(row.get("judged", 1)).strip() not in ("0", "False", "false")


NOT_JUDGED = "not judged"  # how status and the report name a run that judged nothing (never a verdict word)


def counts(rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """KEEP, DISCARD, CRASH and NOT_JUDGED counts of experiment rows: a run that judged nothing is
    counted as not judged, not as the DISCARD (or CRASH) its verdict line says."""
    out = {"KEEP": 0, "DISCARD": 0, "CRASH": 0, NOT_JUDGED: 0}
    for r in rows:
        status = str(r.get("status"))
        if status in out:
            out[status if row_judged(r) else NOT_JUDGED] += 1
    return out
