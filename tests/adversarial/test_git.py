"""Attacks through git: the champion's worktree, the candidate commit, the branch."""
from __future__ import annotations

import pytest

from .attacks import (
    A09_SABOTAGE_WORKTREE,
    A15_AMEND_SWITCH,
    A15B_DODGE_REVERT,
    COMMENT_ONLY_2,
    arm,
)
from .conftest import (
    KEYS,
    assert_decided_and_reverted,
    assert_not_kept,
    assert_rows_kept,
    engaged,
    evidence,
    experiment,
)

pytestmark = pytest.mark.adversarial


def test_09_sabotaged_champion_worktree_is_not_kept_and_does_not_linger(research, scratch):
    proj = research
    base, before = proj.head(), proj.ledger()
    j = experiment(proj, arm(A09_SABOTAGE_WORKTREE, scratch), "the stock pipeline (and a slower champion)")
    sabotaged = any(engaged(scratch, ev, "files") for ev in ("worktree_sabotaged_at_import", "worktree_sabotaged"))
    assert_not_kept(j, KEYS["worktree"] + (() if sabotaged else KEYS["aa"]), scratch)
    assert_decided_and_reverted(proj, j, base, before)
    # the sabotage must not outlive its run: the next unchanged candidate is no faster either
    after = experiment(proj, COMMENT_ONLY_2, "an unchanged candidate after the sabotage")
    assert_not_kept(after, KEYS["aa"] + KEYS["worktree"], scratch)


def test_15_amended_commit_after_judging_is_not_kept(slow_research, scratch):
    """Judged: the honest faster pipeline. Left on the branch: an amended commit with half the steps."""
    proj = slow_research
    base, before = proj.head(), proj.ledger()
    j = experiment(proj, arm(A15_AMEND_SWITCH, scratch), "Drop the redundant pass")
    amended = [e for e in evidence(scratch) if e["event"] == "amended" and e["before"] != e["after"]]
    if not amended:  # the worker could not touch git: the honest judged commit may be kept, as itself
        assert j.status in ("KEEP", "DISCARD", "CRASH"), j.show(scratch)
        assert proj.head() == (j.sha if j.status == "KEEP" else base), proj.git("log", "--oneline", "-3")
        return
    assert_not_kept(j, KEYS["git"], scratch)
    assert proj.git("rev-parse", "autoresearch/t") == base, "the branch does not end on the champion"
    assert proj.head() == base and proj.git("status", "--porcelain") == ""
    rows = assert_rows_kept(proj, before)
    assert [r["commit"] for r in rows[len(before):]] == [j.sha]  # the judged commit's verdict, nothing else


def test_15b_moving_head_does_not_keep_a_discarded_commit_on_the_branch(research, scratch):
    proj = research
    base, before = proj.head(), proj.ledger()
    j = experiment(proj, arm(A15B_DODGE_REVERT, scratch), "lower guidance (then commit on top)")
    assert_not_kept(j, KEYS["git"] + ("quality",), scratch)
    assert proj.git("rev-parse", "autoresearch/t") == base, \
        "the discarded commit is still on the branch: " + proj.git("log", "--oneline", "-3")
    assert proj.git("status", "--porcelain") == ""
    assert_decided_and_reverted(proj, j, base, before)
