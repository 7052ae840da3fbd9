"""`-n N` (pytest-xdist): sharded quality, one decision on the controller, perf refused in workers."""
import json
import re

from pytest_ditar.plugin.xdist import PERF_REFUSAL, device_for_worker

from candidates import ALTERS, COMMENT_ONLY, STOCK


def _last(out: str) -> str:
    return out.strip().splitlines()[-1]


def test_worker_id_pins_a_gpu_only_when_cuda_is_there():
    assert device_for_worker("gw1", cuda_available=True, count=2) == "cuda:1"
    assert device_for_worker("gw3", cuda_available=True, count=2) == "cuda:1"  # more workers than GPUs: wrap
    assert device_for_worker("gw1", cuda_available=False, count=0) is None  # CPU: stays cpu
    assert device_for_worker(None, cuda_available=True, count=2) is None


def _both(proj, source, subject):
    """Judge one change serially, then sharded over 2 workers (no revert in between). The gate
    judges a change once per champion (core.rerun), so the sharded run's commit adds a comment."""
    proj.commit_candidate(source, "exact", subject)
    args = ("experiment", "--classification", "exact", "--description", subject, "--no-revert")
    serial = proj.ditar(*args)
    proj.write("mutable/pipeline.py", source + "\n# the same change, judged sharded\n")
    proj.git("commit", "-q", "--amend", "-a", "--no-edit")
    sharded = proj.ditar(*args, "--workers", "2")
    assert _last(serial.stdout).startswith("DITAR VERDICT: "), serial.stdout[-2000:] + serial.stderr[-2000:]
    assert _last(sharded.stdout).startswith("DITAR VERDICT: "), sharded.stdout[-3000:] + sharded.stderr[-2000:]
    assert "ditar: quality phase recorded" in sharded.stdout  # phase 1 ran under xdist and recorded
    assert "ditar: time on 2 workers: start-up " in sharded.stdout  # and said where its time went
    assert not (proj.root / ".autoresearch/t/phase-quality.json").exists()  # the record was decided once
    a, b = proj.ledger()[-2:]
    proj.git("reset", "-q", "--hard", "HEAD^")  # back to the champion for the next candidate
    return serial, sharded, a, b


def test_sharded_decision_equals_serial_decision(research):
    """Quality-decided and crash-decided candidates: identical verdict line and ledger fields; a
    passing candidate: identical quality outcome (its perf verdict is noise-dependent)."""
    proj = research
    for source in (ALTERS,):  # (RAISES, a crash, decides the same way; left out to keep the suite short)
        serial, sharded, a, b = _both(proj, source, "idea")
        def same(line: str) -> str:  # the two commits differ by the comment: their ids, not their verdicts
            return re.sub(r" commit=[0-9a-f]+", "", line)

        assert same(_last(sharded.stdout)) == same(_last(serial.stdout))
        assert serial.returncode == sharded.returncode == 1
        for key in ("status", "reason", "quality_pass", "quality_total", "class"):
            assert a[key] == b[key], key
    assert [r["status"] for r in proj.ledger()[1:]] == ["DISCARD", "DISCARD"]
    serial, sharded, a, b = _both(proj, COMMENT_ONLY, "same code")
    assert "quality=6/6" in _last(serial.stdout) and "quality=6/6" in _last(sharded.stdout)
    assert (a["quality_pass"], a["quality_total"]) == (b["quality_pass"], b["quality_total"]) == (6, 6)
    runs = sorted((proj.root / ".autoresearch/t/runs").glob("*/summary.json"), key=lambda p: p.stat().st_mtime)
    q = [json.loads(p.read_text())["quality"] for p in runs[-2:]]
    assert q[0].keys() == q[1].keys() and all(q[0][k]["passed"] == q[1][k]["passed"] for k in q[0])
    # the controller had the workers' outputs: the class claim against the champion passed
    assert "differs from the champion" not in _last(sharded.stdout)


def test_perf_lane_refuses_to_run_inside_a_worker(research):
    proj = research
    res = proj.pytest("-m", "perf", "-n", "2")  # report mode: the lanes fail with the reason
    out = res.stdout.str()
    assert res.ret == 1
    assert out.count(PERF_REFUSAL) >= 2 and "2 failed" in out, out[-3000:]
    sha = proj.commit_candidate(ALTERS, "exact", "idea")
    res = proj.pytest("-n", "2")  # a full gate under -n: refused before the candidate runs
    out = res.stdout.str()
    assert res.ret == 4 and _last(out).startswith("DITAR REFUSED: " + PERF_REFUSAL), out[-3000:]
    assert proj.head() == sha and [r["status"] for r in proj.ledger()] == ["BASELINE"]


def test_each_batch_is_generated_once_across_workers(research, tmp_path):
    """Items of one harness batch share a worker: no batch is generated twice, both workers work."""
    proj = research
    # The candidate's stdout is its worker's log (its sandbox lets it write nowhere else outside);
    # a gated quality phase keeps every worker's log beside the run, one folder per xdist worker.
    logging = STOCK.replace(
        "    def generate(self, request: Request) -> Generated:\n",
        "    def generate(self, request: Request) -> Generated:\n"
        "        print(f'DITAR-TEST-GENERATE {list(request.seeds)}', flush=True)\n", 1)
    assert logging != STOCK
    proj.commit_candidate(logging, "exact", "log each generate call")
    res = proj.pytest("-m", "quality", "-n", "2", "--ditar-phase=quality")
    assert res.ret == 0, res.stdout.str()[-3000:]
    calls = [(log.parent.name, line.split(" ", 1)[1])
             for log in proj.root.glob(".autoresearch/t/runs/*/workers/*/candidate.log")
             for line in log.read_text().splitlines() if line.startswith("DITAR-TEST-GENERATE ")]
    seeds = [s for _, batch in calls for s in json.loads(batch)]
    assert sorted(seeds) == sorted(set(seeds)) and len(seeds) == 6  # every corpus item once
    assert len({who for who, _ in calls}) == 2  # the batches were spread over both workers
    # the header names each worker's device and target instead of fingerprinting the controller
    out = res.stdout.str()
    assert "ditar: device=one per xdist worker (gwN -> cuda:N where CUDA is) target=" in out
    for wid in ("gw0", "gw1"):
        assert re.search(rf"^ditar: {wid}: device=.+ target=\S+ \(.+\) (ON|OFF)-TARGET$", out, re.M), out[-3000:]
    # the controller's time line folds in both workers' clocks: windows, busy time, start-up
    line = next(ln for ln in res.stdout.lines if ln.startswith("ditar: time"))
    assert line.startswith("ditar: time on 2 workers: start-up ") and " quality " in line and " busy)" in line, line
