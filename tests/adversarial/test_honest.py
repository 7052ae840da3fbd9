"""The controls beside the attacks: an honest faster candidate is KEPT, and candidates that
compute exactly what the champion computes are never KEPT, however often they are judged."""
from __future__ import annotations

import pytest

from .attacks import COMMENT_ONLY, COMMENT_ONLY_2, REFACTORED, REFACTORED_2, STOCK
from .conftest import KEYS, assert_decided_and_reverted, assert_verdict, experiment, experiment_judged

pytestmark = pytest.mark.adversarial


def test_honest_faster_candidate_is_kept(slow_research):
    proj = slow_research
    j = experiment_judged(proj, STOCK, "Drop the redundant pass")
    assert j.status == "KEEP" and j.res.returncode == 0, j.show()
    assert "quality=6/6" in j.last
    assert proj.head() == j.sha
    rows = proj.ledger()
    assert [r["status"] for r in rows][::len(rows) - 1] == ["BASELINE", "KEEP"] and rows[-1]["commit"] == j.sha


@pytest.mark.parametrize("sources", [(COMMENT_ONLY, COMMENT_ONLY_2), (REFACTORED, REFACTORED_2)],
                         ids=["comment-only", "refactored"])
def test_unchanged_computation_is_never_kept(research_twin, sources):
    proj = research_twin  # the product's lane: twin on
    for n, source in enumerate(sources, 1):
        base, before = proj.head(), proj.ledger()
        j = experiment(proj, source, f"A/A, run {n}")
        assert_verdict(j, ("DISCARD",), KEYS["aa"])
        assert "quality=6/6" in j.last, j.show()
        assert_decided_and_reverted(proj, j, base, before)
