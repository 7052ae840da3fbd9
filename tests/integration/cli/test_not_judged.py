"""A run the gate could not judge (a DISCARD whose only objection is its UNSTABLE objective lane) is
counted and shown as "not judged" by `dit-ar status` and the report, never as a DISCARD, while its
ledger row keeps the seed's verdict word. The report's header names no absolute path of the
machine, says the host, gives the baseline's medians in ms, shows no interval when nothing is kept,
and its page is readable by others (0644)."""
import stat

from pytest_ditar.loop.judge.nextstep import NOT_JUDGED_RULE
from pytest_ditar.store.ledger import Ledger

UNSTABLE = ("lane latency_b1 unstable: champion drift against the anchor: kept at 0.500x the anchor's time, now 0.553x "
            "(1.106x, upper bound 1.140x, p=0.0006 over 32 paired rounds; minimum 5%)")


def test_status_and_the_report_count_an_unjudged_run_as_not_judged(research):
    state = research.root / ".autoresearch/t"
    Ledger(state).append({"commit": "c" * 40, "parent": research.head(), "status": "DISCARD", "class": "exact",
                          "description": "Fuse qkv", "lane": "latency_b1", "metric": 2.44, "ci_low": 2.39,
                          "ci_high": 2.57, "reason": UNSTABLE, "judged": 0, "unjudged": "champion"})
    Ledger(state).append({"commit": "d" * 40, "parent": research.head(), "status": "DISCARD", "class": "exact",
                          "description": "Lower guidance", "lane": "latency_b1", "reason": "quality 6/6 failed",
                          "judged": 1})
    out = research.ditar("status").stdout
    # explained in the words of the experiment's next: line (loop.judge.nextstep), the rule said once
    assert f"experiments  KEEP 0  DISCARD 1  CRASH 0  not judged 1 ({NOT_JUDGED_RULE})\n" in out, out
    # status --all counts it as not judged too, never as a DISCARD
    rows = {ln.split()[0]: ln.split() for ln in research.ditar("status", "--all").stdout.splitlines()[1:]}
    assert rows["t"][4:8] == ["0", "1", "0", "1"], rows
    assert f"(not judged: {UNSTABLE})" in out and "Fuse qkv" in out, out

    res = research.ditar("report", "--out", "rep")
    assert res.returncode == 0, res.stderr
    index = research.root / "rep/index.html"
    page = index.read_text()
    assert "not judged<b>1</b>" in page and "discarded<b>1</b>" in page, page[:4000]
    assert page.count('<span class="nj">not judged</span>') == 1
    assert "nothing kept yet" in page and "[1.000, 1.000]" not in page
    assert str(research.root) not in page and "state <code>.autoresearch/t</code>" in page
    assert "host " in page and "host unknown" not in page
    assert "baseline latency_b1 median<b>" in page and " ms</b>" in page
    assert stat.S_IMODE(index.stat().st_mode) == 0o644
