"""Candidates that raise, return NaN or hang: a CRASH, reverted, and the next experiment runs
(long: a hang waits out its timeout)."""

import pytest

from candidates import ALTERS, HANG, NAN, RAISES


@pytest.mark.parametrize("source,kind", [(RAISES, "candidate raised: RuntimeError: kernel exploded"),
                                         (NAN, "non-finite output in item tiny-000"),
                                         (HANG, "timeout after 10s")], ids=["raises", "nan", "hang"])
def test_crashes_are_reverted_and_the_next_experiment_runs(research, source, kind):
    proj = research
    base = proj.head()
    _, res, line = proj.experiment(source, "exact", "A broken idea")
    assert res.returncode == 10  # CRASH: its own exit status (pytest_ditar.loop.run.options.Exit)
    assert line.startswith("DITAR VERDICT: CRASH") and kind in line, line
    assert proj.head() == base
    _, _, line = proj.experiment(ALTERS, "exact", "Next idea")
    assert line.startswith("DITAR VERDICT: DISCARD")  # judged normally, not a crash
    assert [r["status"] for r in proj.ledger()][-2:] == ["CRASH", "DISCARD"]
