"""Tampering and kills: the ledger chain, the snapshot hashes, and recovery after kill -9."""
import json
import os
import signal
import subprocess
import time

from candidates import ALTERS, REDUNDANT, STOCK
from conftest import research_project


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


def test_kill_9_mid_run_leaves_a_state_the_next_run_accepts(pytester, model_cache, tmp_path_factory):
    proj = research_project(pytester, tmp_path_factory, mutable_source=REDUNDANT)
    sha = proj.commit_candidate(STOCK, "exact", "Drop the redundant pass")
    runs = proj.root / ".autoresearch/t/runs"
    # first kill: early (start-up or quality); second: once the quality tests have logged, i.e. in the lanes
    for ready in (lambda: True, lambda: any("test_quality" in p.read_text() for p in runs.glob("*/tests.log"))):
        p = subprocess.Popen(["dit-ar", "--config", "config/autoresearch.json", "experiment", "--classification",
                              "exact", "--description", "x"], cwd=proj.root, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        time.sleep(1.5)
        while not ready() and time.time() < deadline and p.poll() is None:
            time.sleep(0.05)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        st = proj.ditar("status")
        assert st.returncode == 0, st.stdout  # ledger chain and baseline still verify
        assert not list((proj.root / ".autoresearch/t").glob("champions/.*tmp*")), "half-written champion"
    decided = [r for r in proj.ledger() if r["commit"] == sha]
    if not decided:  # both kills landed before the decision: the next run judges the commit normally
        res = proj.ditar("experiment", "--classification", "exact", "--description", "Drop the redundant pass")
        assert _last(res).startswith("DITAR VERDICT: "), res.stdout[-2000:]  # KEEP on a quiet machine
        decided = [r for r in proj.ledger() if r["commit"] == sha]
    assert len(decided) == 1  # exactly one verdict for the commit, however the kills landed
    assert proj.ditar("status").returncode == 0
    if decided[0]["status"] == "KEEP":
        assert proj.head() == sha


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
