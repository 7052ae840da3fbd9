"""Quantization's zero-regression claim over the corpus: pure, no pytest, no git.

Each required score is paired per item (candidate vs the ORIGINAL baseline) and handed to
quality.zero_regression: no item may drop beyond its tolerance, the mean may not drop at all,
and a one-sided paired test may not show a drop. Missing scores fail closed.
"""
from __future__ import annotations

from typing import Sequence

from pytest_ditar.core.quality import ContractResult, RegressionResult, zero_regression
from pytest_ditar.core.thresholds import PAIRED_SCORES, Thresholds

# Which Metrics fields hold a paired score: (candidate field, baseline field, higher is better).
_FIELDS = {"clip_score": ("clip_score", "clip_score_baseline", True)}
assert set(_FIELDS) == set(PAIRED_SCORES)


def tolerance(t: Thresholds, score: str) -> float:
    return float(getattr(t, f"{score}_item_tolerance"))


def check(t: Thresholds, results: Sequence[ContractResult]) -> list[RegressionResult]:
    """One RegressionResult per required score (empty when the class does not demand any)."""
    if not t.zero_regression:
        return []
    out = []
    for score in t.required_scores:
        cand_field, base_field, higher = _FIELDS[score]
        cand = {r.item_id: getattr(r.metrics, cand_field) for r in results}
        base = {r.item_id: getattr(r.metrics, base_field) for r in results}
        missing = sorted(i for i in cand if cand[i] is None or base[i] is None)
        if missing or not results:
            out.append(RegressionResult(score, False, f"{score} unavailable for {len(missing)}/{len(results)} items "
                                        "(semantic evaluators not run)", None, missing[0] if missing else None, 0.0))
            continue
        out.append(zero_regression(score, base, cand, tolerance(t, score), alpha=t.regression_alpha,
                                   higher_is_better=higher))
    return out


def claim(t: Thresholds, results: Sequence[ContractResult]) -> tuple[bool, str]:
    """(ok, reason) for decision.QualityOutcome's class claim."""
    failed = [r for r in check(t, results) if not r.ok]
    if not failed:
        return True, ""
    return False, "zero regression: " + "; ".join(r.reason for r in failed)
