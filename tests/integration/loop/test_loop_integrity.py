"""Tampering and kills: the ledger chain, the snapshot hashes, and recovery after kill -9."""
import json

from candidates import ALTERS, STOCK


def _last(res) -> str:
    return res.stdout.strip().splitlines()[-1]


def test_edited_ledger_row_is_detected_by_status_and_the_next_run(research):
    proj = research
    proj.commit_candidate(ALTERS, "exact", "Lower guidance")
    proj.ditar("experiment", "--classification", "exact", "--description", "Lower guidance")
    led = proj.root / ".autoresearch/t/ledger.jsonl"
    lines = led.read_text().splitlines()
    row = json.loads(lines[-1])
    row["status"] = "KEEP"  # an agent "fixing" its record
    lines[-1] = json.dumps(row)
    led.write_text("\n".join(lines) + "\n")
    st = proj.ditar("status")
    assert st.returncode == 1 and "CHAIN BROKEN" in st.stdout and "row 2" in st.stdout
    sha = proj.commit_candidate(STOCK + "\n# next\n", "exact", "next")
    res = proj.ditar("experiment", "--classification", "exact", "--description", "next")
    assert res.returncode == 4 and _last(res).startswith("DITAR REFUSED: ledger chain broken")
    assert proj.head() == sha


def test_edited_baseline_file_is_detected_by_status_and_the_next_run(research, tmp_path):
    proj = research
    img = proj.root / ".autoresearch/t/baseline/items/tiny-002.png"
    img.write_bytes(img.read_bytes()[:-8] + b"\0" * 8)
    st = proj.ditar("status")
    assert st.returncode == 1 and "CORRUPTED: items/tiny-002.png hash mismatch" in st.stdout
    marker = tmp_path / "ran"
    src = STOCK.replace("class StockDiT:", f"open({str(marker)!r}, 'w').close()\n\n\nclass StockDiT:", 1)
    sha = proj.commit_candidate(src, "exact", "candidate")
    res = proj.ditar("experiment", "--classification", "exact", "--description", "candidate")
    line = _last(res)
    assert res.returncode == 4 and line.startswith("DITAR REFUSED: baseline files broken: items/tiny-002.png hash "
                                                   "mismatch (edited?); restore it with `dit-ar recover --force`"), line
    assert not marker.exists() and proj.head() == sha  # refused: the commit stays


def test_kill_between_ledger_row_and_revert_is_finished_next_run(research):
    """The one window a kill can leave git behind the ledger: the next run completes the revert."""
    from pytest_ditar.store.ledger import Ledger

    proj = research
    base = proj.head()
    sha = proj.commit_candidate(ALTERS, "exact", "Lower guidance")
    Ledger(proj.root / ".autoresearch/t").append({"commit": sha, "parent": base, "class": "exact",
                                                  "status": "DISCARD", "reason": "quality failed"})
    res = proj.ditar("experiment", "--classification", "exact", "--description", "again")
    assert "recovered: finished the revert of " + sha[:7] in res.stdout
    assert proj.head() == base
