"""What `dit-ar demo` says when a step did not come out as shown (tests/e2e/test_demo.py runs it)."""
from pytest_ditar.cli.demo import showcase_problem

UNSTABLE = {"verdict": "DISCARD", "judged": False, "reason": "lane latency_b1 unstable: ci half-width 31% > 20%"}
DRIFT = {"verdict": "DISCARD", "judged": True, "reason": "champion drift: the champion timed 1.4x its record"}


def test_a_kept_showcase_and_a_discarded_mislabel_are_no_problem():
    assert showcase_problem({"verdict": "KEEP"}, "KEEP") is None
    assert showcase_problem({"verdict": "DISCARD"}, "DISCARD") is None


def test_a_showcase_not_kept_says_why_with_the_reason_and_to_run_again_on_a_quieter_host():
    why, todo = showcase_problem(UNSTABLE, "KEEP")
    assert "could not judge" in why and "unstable: ci half-width 31%" in why
    assert "`dit-ar demo` again" in todo and "stop other jobs" in todo
    why, todo = showcase_problem(DRIFT, "KEEP")
    assert "champion drift" in why and "could not judge" not in why and "`dit-ar demo` again" in todo


def test_a_crash_or_a_kept_mislabel_is_a_bug_to_report_not_a_noisy_host():
    for doc, want in (({"verdict": "CRASH", "reason": "worker died"}, "KEEP"), ({"verdict": "KEEP"}, "DISCARD")):
        why, todo = showcase_problem(doc, want)
        assert "report it" in todo and "again" not in todo
    why, todo = showcase_problem({"verdict": "REFUSED", "reason": "tree dirty"}, "KEEP")
    assert "tree dirty" in why and "dit-ar doctor" in todo
