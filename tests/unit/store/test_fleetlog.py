"""The fleet's ledger (issue 44): a lost push race rebuilds its rows on the winner's, and an
edited, dropped or reordered row breaks the chain."""
from __future__ import annotations

import json

from pytest_ditar.core import fleet as rules
from pytest_ditar.core.vocabulary import ANNOUNCE, DECLINED, PROMOTION, REFERENCE, SCREENING, UNJUDGED
from pytest_ditar.store import fleetlog


def _rows() -> list[dict]:
    return [fleetlog.new_row(kind=REFERENCE, host="b", card={"tf32_matmul": False}),
            fleetlog.new_row(kind=ANNOUNCE, host="a", commit="c1")]


def test_a_lost_race_keeps_both_hosts_rows_in_one_chain():
    base = _rows()
    mine = [*base, fleetlog.new_row(kind=ANNOUNCE, host="b", commit="p1")]
    theirs = [*base, fleetlog.new_row(kind=ANNOUNCE, host="a", commit="c2")]
    remote, problems = fleetlog.read(fleetlog.chained(theirs))
    assert not problems
    merged = fleetlog.merge(remote, mine)
    rows, problems = fleetlog.read(fleetlog.chained(merged))
    assert not problems and [(r["host"], r.get("commit")) for r in rows] == \
        [("b", None), ("a", "c1"), ("a", "c2"), ("b", "p1")]
    assert fleetlog.merge(rows, mine) == [fleetlog.content(r) for r in rows]  # nothing twice


def test_an_edited_dropped_or_reordered_row_is_named():
    text = fleetlog.chained([*_rows(), fleetlog.new_row(kind=PROMOTION, host="b", source_commit="c1", speedup=1.5)])
    lines = text.splitlines()
    edited = lines[:2] + [json.dumps({**json.loads(lines[2]), "speedup": 9.9})]
    assert fleetlog.read("\n".join(edited))[1] == ["row 3: hash mismatch (edited?)"]
    assert "row 2: prev_hash does not match row 1" in fleetlog.read("\n".join([lines[0], lines[2]]))[1]
    assert fleetlog.read("\n".join([lines[1], lines[0], lines[2]]))[1]


def test_only_a_keep_on_the_reference_card_promotes():
    same, other = {"tf32_matmul": False, "torch": "2.14"}, {"tf32_matmul": True, "torch": "2.14"}
    assert rules.card_diff(same, same) == ()
    diff = rules.card_diff(same, other)
    assert diff == ("tf32_matmul: False vs True",)
    assert rules.outcome_kind("KEEP", ()) == PROMOTION
    assert rules.outcome_kind("KEEP", diff) == SCREENING
    assert rules.outcome_kind("DISCARD", ()) == DECLINED and rules.outcome_kind("CRASH", diff) == DECLINED
    # an UNSTABLE run judged nothing: not a decline of the champion, which runs once more
    assert rules.outcome_kind("DISCARD", (), judged=False) == UNJUDGED
    assert rules.split_tag("lab.box1") == ("lab", "box1") and rules.split_tag("t") is None
    assert rules.split_tag("lab.box/1") is None
