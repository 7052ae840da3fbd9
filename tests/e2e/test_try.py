"""`dit-ar try` (issues 27, 42): the agent's "does this help?" before it commits. The working tree is
timed against the champion with the gate's own lanes and checked against the class's floors, with
the margin to each; no verdict is given, no ledger row written, git is not touched, even with a
candidate committed on top of the champion (a plain full pytest run there would be a gated one).
It ends `DITAR TRY: <outcome> ...` with an exit status by outcome and a next step that follows
the outcome, and notes the try where `dit-ar status` shows it to a later session."""
import re

from pytest_ditar.loop.run.tryout import EXIT

from candidates import REDUNDANT, STOCK
from conftest import research_project

TRY_LINE = re.compile(r"^DITAR TRY: (\w+) lane=latency_b1 speedup=\S+ ci95=\[\S+\] quality=6/6 class=exact$")


def _try(proj, *args):
    res = proj.ditar("try", "--classification", "exact", *args)
    last = res.stdout.strip().splitlines()[-1]
    m = TRY_LINE.match(last)
    assert m, res.stdout[-3000:] + res.stderr[-2000:]
    assert res.returncode == EXIT[m.group(1)] and "DITAR VERDICT" not in res.stdout, (res.returncode, last)
    nxt = [ln for ln in res.stdout.splitlines() if ln.startswith("ditar: next: ")]
    assert len(nxt) == 1, res.stdout[-2000:]  # one next step, above the outcome line
    return m.group(1), nxt[-1], res.stdout


def test_try_reports_lanes_quality_and_margins_and_records_nothing(pytester, model_cache, tmp_path_factory):
    proj = research_project(pytester, tmp_path_factory, mutable_source=REDUNDANT)
    base, rows = proj.head(), proj.ledger()
    proj.write("mutable/pipeline.py", STOCK)  # drop the redundant pass, not committed
    outcome, nxt, out = _try(proj, "--description", "Drop the redundant pass")
    assert "ditar: lane latency_b1: " in out and "ditar: lane throughput_b8: " in out, out[-3000:]
    assert "ditar: quality 6/6 passed (class exact) - report only, nothing recorded" in out, out[-3000:]
    assert "ditar: margins to the 'exact' floors: latent rel-L2 worst " in out and "PSNR worst " in out, out[-3000:]
    assert outcome in ("FASTER", "UNSTABLE"), out[-3000:]  # a 2x win, or a host too noisy to say
    if outcome == "FASTER":
        assert "commit with the trailer `Ditar-Class: exact`, then `dit-ar experiment" in nxt, nxt
    assert proj.ledger() == rows and proj.head() == base
    assert proj.git("status", "--porcelain") == "M mutable/pipeline.py"  # the edit is still the agent's
    assert not (proj.root / ".autoresearch/t/runs").exists() or not list((proj.root / ".autoresearch/t/runs").iterdir())

    # committed on top of the champion: still only a report, and the commit stays
    proj.git("commit", "-qam", "Drop the redundant pass", "-m", "Ditar-Class: exact")
    sha = proj.head()
    _try(proj)
    assert proj.ledger() == rows and proj.head() == sha


def test_a_try_that_is_not_faster_says_to_drop_it_and_a_later_status_shows_it(research):
    research.write("mutable/pipeline.py", STOCK + "\n# a comment: nothing faster\n")
    outcome, nxt, _ = _try(research, "--description", "Comment only")
    assert outcome in ("NOT_FASTER", "UNSTABLE", "SLOWER"), outcome  # an A/A is never FASTER
    if outcome == "UNSTABLE":
        assert "`dit-ar try` once more as it is" in nxt, nxt
    else:
        assert "drop the edit (`git checkout -- mutable/`" in nxt and "commit" not in nxt, nxt
    st = research.ditar("status").stdout
    assert re.search(rf"^  \S+Z [0-9a-f]{{7}} {outcome} +\S+  Comment only$", st, flags=re.M), st
    assert "tried     1 idea(s) timed by `dit-ar try`" in st, st
