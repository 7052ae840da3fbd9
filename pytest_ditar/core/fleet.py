"""The research fleet's rules (issue 44): many hosts, one champion. Pure: no git, files or torch.

A host's tag is `<fleet>.<host>`: its branch, state and backup ref carry the host, so no two loops
write the same ref. The fleet's ledger (store.fleetlog) holds rows of FLEET_KINDS; its first
`reference` row names the reference host and its card (the fingerprint's comparable key). A
host's champion becomes the fleet's only through a `promotion` row, written after the reference
host's gate KEEPs it against the fleet champion; a KEEP on any other card is a `screening` row.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pytest_ditar.core.vocabulary import DECLINED, HOST_SEP, PROMOTION, REFERENCE, SCREENING, UNJUDGED

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

# Why a remote's input was refused (Refusal.cause); rules read these, never the wording.
CHAIN_BROKEN = "chain-broken"  # the host's ledger (or the fleet's) does not verify
NOT_ON_BRANCH = "not-on-branch"  # the champion commit is not on the host's research branch
LINK_IN_TREE = "link-in-tree"  # the champion's mutable paths hold a symlink or a submodule
OTHER_BASELINE = "other-baseline"  # the host's baseline is not the fleet's one original baseline
NO_CHAMPION = "no-champion"  # the host has kept nothing
ALREADY = "already"  # the champion is the fleet's already
NO_HOST = "no-host"  # the remote holds no state for the host
NOT_JOINED = "not-joined"  # this tag is no fleet host's (<fleet>.<host>)


@dataclass(frozen=True)
class Refusal:
    """A remote input refused, named: what (`subject`: a ref, a commit, a path) and why (`cause`)."""
    cause: str
    subject: str
    detail: str

    def line(self) -> str:
        return f"refused {self.subject}: {self.detail}"


@dataclass(frozen=True)
class Promotion:
    """What a promotion attempt came to: the fleet row it wrote (its kind), the gate's verdict."""
    kind: str  # PROMOTION, SCREENING or DECLINED
    verdict: str  # the gate's status (KEEP, DISCARD, CRASH) or "" when it did not decide
    candidate: str  # the commit the gate judged on this host's branch
    source_host: str
    source_commit: str
    card_diff: tuple[str, ...] = ()  # where this host's card differs from the reference's


def check_name(name: str, what: str) -> str | None:
    """Why `name` cannot name a fleet or a host (None: it can)."""
    if not _NAME.match(name):
        return f"{what} {name!r}: letters, digits, '_' and '-' only (the host is split from the fleet at '{HOST_SEP}')"
    return None


def host_tag(fleet: str, host: str) -> str:
    return f"{fleet}{HOST_SEP}{host}"


def split_tag(tag: str) -> tuple[str, str] | None:
    """(fleet, host) of a host's tag; None for a tag that is no fleet host's."""
    fleet, sep, host = tag.partition(HOST_SEP)
    if not sep or check_name(fleet, "fleet") or check_name(host, "host"):
        return None
    return fleet, host


def card_diff(reference: Mapping[str, object], here: Mapping[str, object]) -> tuple[str, ...]:
    """The card fields (a fingerprint's comparable key) where `here` differs from `reference`:
    "field: reference vs here". Empty: the same card, a measurement that can promote."""
    keys = list(reference) + [k for k in here if k not in reference]
    return tuple(f"{k}: {reference.get(k)} vs {here.get(k)}" for k in keys if reference.get(k) != here.get(k))


def reference_row(rows: Sequence[Mapping[str, object]]) -> Mapping[str, object] | None:
    return next((r for r in rows if r.get("kind") == REFERENCE), None)


def fleet_champion(rows: Sequence[Mapping[str, object]]) -> Mapping[str, object] | None:
    """The last promotion; None while the fleet champion is the original baseline."""
    return next((r for r in reversed(rows) if r.get("kind") == PROMOTION), None)


def lineage(rows: Sequence[Mapping[str, object]]) -> list[Mapping[str, object]]:
    """Every promotion, oldest first: how the fleet champion came to be."""
    return [r for r in rows if r.get("kind") == PROMOTION]


def outcome_kind(verdict: str, differs: Sequence[str], judged: bool = True) -> str:
    """The fleet row a gate's verdict on a promotion writes: a KEEP on the reference card promotes;
    a KEEP measured on another card is a screening result; a run that could not judge the change
    (core.rerun) is said so, to be run once more; anything else declines it."""
    if not judged:
        return UNJUDGED
    if verdict != "KEEP":
        return DECLINED
    return SCREENING if differs else PROMOTION
