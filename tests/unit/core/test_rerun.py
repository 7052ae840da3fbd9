"""core.rerun: one judgment per change on a champion, one more run for a change the gate could not
judge. Pure functions over format-patch text and ledger rows."""
from dataclasses import replace

from pytest_ditar.core import rerun
from pytest_ditar.core.decision import LaneOutcome, QualityOutcome, RunError, decide
from pytest_ditar.core.vocabulary import (
    CANDIDATE_ERROR,
    FASTER,
    GUARD_LANE,
    INTERNAL,
    NOT_FASTER,
    OBJECTIVE_UNSTABLE,
    QUALITY,
)
from pytest_ditar.store.records import LedgerRow as Row

DIFF = ("diff --git a/mutable/pipeline.py b/mutable/pipeline.py\nindex 1111111..2222222 100644\n"
        "--- a/mutable/pipeline.py\n+++ b/mutable/pipeline.py\n@@ -1 +1 @@\n-a\n+b\n")


def _patch(subject: str, date: str, version: str = "2.43.0") -> str:
    return (f"From 0123456789abcdef Mon Sep 17 00:00:00 2001\nFrom: agent <a@b>\nDate: {date}\n"
            f"Subject: [PATCH] {subject}\n\n---\n mutable/pipeline.py | 2 +-\n\n{DIFF}-- \n{version}\n\n")


def test_a_change_is_its_diff_not_its_message_date_or_git():
    key = rerun.patch_key(_patch("Lean loop", "Tue, 1 Dec 2026 10:00:00 +0000"))
    assert len(key) == rerun.KEY_CHARS
    assert rerun.patch_key(_patch("Lean loop, second try", "Wed, 2 Dec 2026 11:00:00 +0000", "2.50.1")) == key
    assert rerun.patch_key(_patch("Lean loop", "Tue, 1 Dec 2026 10:00:00 +0000").replace("+b\n", "+c\n")) != key
    assert rerun.patch_key("") == "" and rerun.patch_key("From x\nSubject: empty\n") == ""


def test_only_an_unstable_objective_lane_or_a_judge_crash_leaves_a_change_unjudged():
    """Read from the objections' causes, never their words: a reason that merely reads like an
    unstable lane or an internal error judges the change all the same."""
    assert not rerun.judged("DISCARD", [OBJECTIVE_UNSTABLE])
    assert rerun.judged("DISCARD", [OBJECTIVE_UNSTABLE, QUALITY])
    assert rerun.judged("DISCARD", [NOT_FASTER])
    assert rerun.judged("DISCARD", [GUARD_LANE])  # a guard lane slowed by interference: a judgment
    assert not rerun.judged("CRASH", [INTERNAL])
    assert rerun.judged("CRASH", [INTERNAL, CANDIDATE_ERROR])
    assert rerun.judged("CRASH", [CANDIDATE_ERROR])
    assert rerun.judged("KEEP", [FASTER])
    assert rerun.judged("DISCARD", []) and rerun.judged("CRASH", [])  # nothing said: a judgment


def test_a_candidate_whose_exception_reads_like_the_judge_is_still_judged():
    """A candidate that raises "internal: ..." (or an unstable lane's words) must not earn a re-run."""
    d = decide(guards=(), quality=QualityOutcome(1, 1), lanes=[LaneOutcome("latency_b1", True, "FASTER", 2.0, 1.9,
                                                                           2.1)],
               errors=[RunError("exception", "internal: the judge failed (traceback in x)")],
               vram_budget_gib=None, expected_items=1)
    assert d.status == "CRASH" and d.causes == (CANDIDATE_ERROR,) and rerun.judged(d.status, d.causes)


def test_a_judged_change_is_refused_and_an_unjudged_one_runs_once_more_linked():
    row = Row(run=4, patch="k1", parent="champ", status="DISCARD", judged=0, unjudged="champion")
    assert rerun.refusal([], "k1", "champ") is None and rerun.rerun_of([], "k1", "champ") is None
    assert rerun.refusal([row], "k1", "champ") is None  # unjudged once: one more run
    assert rerun.rerun_of([row], "k1", "champ") == 4
    again = Row(run=5, patch="k1", parent="champ", status="DISCARD", judged=0, rerun_of=4,
             unjudged="candidate")
    why = rerun.refusal([row, again], "k1", "champ")
    assert why and "not judged twice for the candidate's or the champion's doing (runs 4 (champion), 5 (candidate)" \
        in why
    judged = Row(run=6, patch="k2", parent="champ", status="DISCARD", judged=1)
    why = rerun.refusal([judged], "k2", "champ")
    assert why and "already judged on this champion (run 6: DISCARD)" in why
    # another champion, another change, or a row from before these columns: nothing in the way
    assert rerun.refusal([judged], "k2", "new-champ") is None
    assert rerun.refusal([judged], "k3", "champ") is None
    assert rerun.refusal([Row(run=1, parent="champ", status="DISCARD")], "", "champ") is None
    # a re-run that was then judged is a judgment like any other
    judged_rerun = Row(run=7, patch="k1", parent="champ", status="DISCARD", judged=1, rerun_of=4)
    assert "run 7: DISCARD" in rerun.refusal([row, judged_rerun], "k1", "champ")


def _unstable(cause: str | None) -> LaneOutcome:
    return LaneOutcome("latency_b1", True, "UNSTABLE", 1.1, 0.9, 1.3, "too noisy", cause=cause)


def test_why_a_run_was_not_judged_is_read_from_the_lanes_cause():
    """Issue 49/50: an UNSTABLE objective lane is the host's unless its cause names the candidate's
    doing (interference) or the champion's (drift against the anchor); a judge's CRASH is the host's."""
    def cause_of(lane_cause):
        d = decide(guards=(), quality=QualityOutcome(1, 1), lanes=[_unstable(lane_cause)], errors=[],
                   vram_budget_gib=None, expected_items=1)
        return rerun.unjudged_cause(d.status, d.causes, d.lane_cause)

    assert cause_of(None) == rerun.HOST
    assert cause_of("shared_device") == rerun.HOST
    assert cause_of("interference") == rerun.CANDIDATE
    assert cause_of("drift") == rerun.CHAMPION
    assert rerun.unjudged_cause("CRASH", [INTERNAL], None) == rerun.HOST
    assert rerun.unjudged_cause("DISCARD", [NOT_FASTER], None) == ""  # judged
    assert rerun.unjudged_cause("KEEP", [FASTER], None) == ""


def test_a_run_not_judged_because_of_the_host_never_counts_toward_leaving_the_idea():
    """Under a load that rose after the baseline, an honest 1.2x was not judged in 10 of 11 runs and
    the idea was locked after two. Host runs never count, however many; rows from before the field
    count as the host's; a new baseline lifts a lock; a judged run of the change still ends it."""
    host = [Row(run=n, patch="k1", parent="champ", status="DISCARD", judged=0, unjudged="host",
             time="2026-12-07T06:00:00+00:00") for n in range(1, 6)]
    assert rerun.refusal(host, "k1", "champ") is None
    old = [Row(run=n, patch="k1", parent="champ", status="DISCARD", judged=0) for n in (1, 2, 3)]
    assert rerun.refusal(old, "k1", "champ") is None and rerun.row_unjudged(old[0]) == rerun.HOST
    drifted = [replace(r, unjudged="champion") for r in host[:2]]
    assert rerun.refusal(drifted, "k1", "champ") is not None
    assert rerun.refusal(drifted, "k1", "champ", since="2026-12-07T06:30:00Z") is None  # a new baseline since
    assert rerun.refusal(drifted, "k1", "champ", since="2026-12-07T05:30:00Z") is not None
    judged = Row(run=9, patch="k1", parent="champ", status="DISCARD", judged=1)
    assert "already judged" in rerun.refusal([*host, judged], "k1", "champ")
    assert "host" in rerun.RULE and "new baseline" in rerun.RULE
