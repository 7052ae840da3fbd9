"""A run's two classes, under two names. `claimed_class`: the class the commit claims (`--ditar-class`,
else its `Ditar-Class:` trailer), the one the output audit holds timed outputs to and the ledger's
`class`. `judged_class`: the loosest of the kept commits' classes and the claim, the one the quality
contract applies and the ledger's `cumulative_class`.

A claim is validated once per run, by `read_claim`; from then on it travels as a `Claim`, never as
the option's string, so no later step can validate (or misread) it again."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from pytest_ditar.core.decision import CLASS_ORDER, cumulative_class, validate_class
from pytest_ditar.core.quality import ContractResult, Metrics, check_contract
from pytest_ditar.core.vocabulary import TRAILER
from pytest_ditar.loop.run.session import DitarSession


@dataclass(frozen=True)
class Claim:
    """A run's class claim once validated (only `read_claim` makes one): canonical, or None where the
    run names no class."""
    claimed_class: str | None


def read_claim(option: str | None, trailer: str | None) -> Claim:
    """The option's class, else the trailer's. ValueError: a name that is no class, or an option and a
    trailer that name different classes (the ledger would record one class and the git history another)."""
    named = option or trailer
    if not named:
        return Claim(None)
    claimed_class = validate_class(named)
    if option and trailer and validate_class(trailer) != claimed_class:
        raise ValueError(f"its trailer '{TRAILER} {trailer}' and the class given ({claimed_class}) differ, so the "
                         f"ledger and the git history would disagree: run it as '{trailer}' (`--classification "
                         f"{trailer}`), or change the trailer to '{TRAILER} {claimed_class}' (`git commit --amend`)")
    return Claim(claimed_class)


def judged_class_of(kept_classes: Iterable[str], claim: Claim) -> str:
    """The class the run is judged under: the loosest of the kept commits' (the ledger's, validated as
    read) and the claim's, taken as validated."""
    kept = cumulative_class(kept_classes)
    if claim.claimed_class is None:
        return kept
    return CLASS_ORDER[max(CLASS_ORDER.index(kept), CLASS_ORDER.index(claim.claimed_class))]


def contract(sess: DitarSession, item_id: str, metrics: Metrics) -> ContractResult:
    """One item's quality contract, under the run's judged class."""
    return check_contract(item_id, sess.judged_class, metrics, sess.cfg.thresholds_for(sess.judged_class))
