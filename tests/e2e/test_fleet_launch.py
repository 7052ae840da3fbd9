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
from conftest import Project, make_project, research_project


def test_two_experiments_run_as_submitit_jobs_and_record_their_verdicts(pytester, model_cache, tmp_path_factory):
    proj = research_project(pytester, tmp_path_factory, mutable_source=REDUNDANT)
    # a second research project for a second loop (tag u), with its own baseline
    other = make_project(pytester, mutable_source=REDUNDANT, root=tmp_path_factory.mktemp("project-u")).root
    for step in (("init", "--tag", "u"), ("baseline",)):
        res = Project(other, pytester).ditar(*step)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    dit = str(Path(sys.executable).parent / "dit-ar")
    for root in (proj.root, other):
        (root / "mutable/pipeline.py").write_text(STOCK)
        subprocess.run(["git", "commit", "-qam", "Drop the redundant pass\n\nDitar-Class: exact"], cwd=root, check=True)

    res = proj.ditar("fleet", "launch", "--cluster", "local", "--checkouts", f"{proj.root},{other}",
                     "--gpus", "0,1", "--wait",
                     "--folder", str(tmp_path_factory.mktemp("jobs")), "--command",
                     f"{dit} --config config/autoresearch.json experiment --classification exact "
                     "--description 'launched as a job'", timeout=900)
    out = res.stdout + res.stderr
    lines = {ln.split()[3]: ln for ln in out.splitlines() if ln.startswith("fleet launch: tag ") and " exit " in ln}
    assert set(lines) == {"t", "u"}, out[-3000:]
    for tag, root in (("t", proj.root), ("u", other)):
        ledger = [json.loads(r) for r in (root / f".autoresearch/{tag}/ledger.jsonl").read_text().splitlines()]
        assert ledger[-1]["status"] in STATUSES and ledger[-1]["description"] == "launched as a job", ledger
        assert f"DITAR VERDICT: {ledger[-1]['status']} " in lines[tag], lines[tag]  # the job's own verdict line
    gpus = sorted(ln.split("gpu ")[1].split(":")[0] for ln in lines.values())
    assert gpus == ["0", "1"], lines  # one card a job, none shared
