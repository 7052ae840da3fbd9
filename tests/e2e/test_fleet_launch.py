"""Issue 44: `dit-ar fleet launch` runs one research loop a GPU as scheduler jobs (submitit; its
local executor here, Slurm's on a cluster). Two tags, each in its own worktree with a committed
candidate, are judged by two jobs, each job holding one card of its own (CUDA_VISIBLE_DEVICES),
and each verdict lands in its tag's ledger."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pytest_ditar.core.vocabulary import STATUSES

from candidates import REDUNDANT, STOCK
from conftest import research_project


def test_two_experiments_run_as_submitit_jobs_and_record_their_verdicts(pytester, model_cache, tmp_path_factory):
    proj = research_project(pytester, tmp_path_factory, mutable_source=REDUNDANT)
    res = proj.ditar("init", "--tag", "u")
    assert res.returncode == 0, res.stdout + res.stderr
    other = proj.root.parent / f"{proj.root.name}-u"  # init's worktree for tag u, on branch autoresearch/u
    dit = str(Path(sys.executable).parent / "dit-ar")
    base = subprocess.run([dit, "--config", "config/autoresearch.json", "baseline"], cwd=other, capture_output=True,
                          text=True, timeout=600)
    assert base.returncode == 0, base.stdout[-2000:] + base.stderr[-2000:]
    for root in (proj.root, other):
        (root / "mutable/pipeline.py").write_text(STOCK)
        subprocess.run(["git", "commit", "-qam", "Drop the redundant pass\n\nDitar-Class: exact"], cwd=root, check=True)

    res = proj.ditar("fleet", "launch", "--cluster", "local", "--tags", "t,u", "--gpus", "0,1", "--wait",
                     "--folder", str(tmp_path_factory.mktemp("jobs")), "--command",
                     f"{dit} --config config/autoresearch.json experiment --classification exact "
                     "--description 'launched as a job'", timeout=900)
    out = res.stdout + res.stderr
    lines = {ln.split()[3]: ln for ln in out.splitlines() if ln.startswith("fleet launch: tag ") and " exit " in ln}
    assert set(lines) == {"t", "u"}, out[-3000:]
    for tag, root in (("t", proj.root), ("u", other)):
        ledger = [json.loads(r) for r in (root / f".autoresearch/{tag}/ledger.jsonl").read_text().splitlines()]
        assert len(ledger) == 1 and ledger[0]["status"] in STATUSES, ledger
        assert ledger[0]["description"] == "launched as a job"
        assert f"DITAR VERDICT: {ledger[0]['status']} " in lines[tag], lines[tag]
    gpus = sorted(ln.split("gpu ")[1].split(":")[0] for ln in lines.values())
    assert gpus == ["0", "1"], lines  # one card a job, none shared
