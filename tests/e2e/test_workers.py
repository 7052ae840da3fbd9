"""Candidate workers: candidate code runs in a process of its own, never in the judge's.

The attack first: a candidate that looks for the judge's process (to reach its clock, its threads
or its state) records where its code runs. Then the defences: a worker that dies or hangs is a
CRASH with its reason, and a paused worker runs nothing while the other side is timed.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
import yaml

from candidates import STOCK
from conftest import research_project

RECORDER = '''
import json as _json, os as _os, sys as _sys

MARK = "DITAR-TEST-WHERE "


def _where(event, **extra):
    # Inside its sandbox the candidate sees no judge: its parent is outside its PID namespace
    # (getppid() is 0) and /proc shows only the sandbox's own processes. What it saw goes to its
    # stdout, the worker's log, which the judge keeps beside the run (it can write nowhere else).
    procs = sorted(int(p) for p in _os.listdir("/proc") if p.isdigit())
    print(MARK + _json.dumps({"event": event, "pid": _os.getpid(), "ppid": _os.getppid(), "argv": _sys.argv,
                              "procs": procs, **extra}), flush=True)
'''


def recording() -> str:
    """The stock pipeline, plus a record of the process every build() and generate() runs in."""
    src = STOCK.replace("class StockDiT:", f"{RECORDER}\n\nclass StockDiT:")
    src = src.replace("    def generate(self, request: Request) -> Generated:\n",
                      "    def generate(self, request: Request) -> Generated:\n"
                      "        _where('generate', seeds=list(request.seeds))\n")
    return src.replace("def build(spec: PipelineSpec) -> StockDiT:\n",
                       "def build(spec: PipelineSpec) -> StockDiT:\n    _where('build')\n")


def records(root: Path) -> list[dict]:
    """What the recording candidate printed, from the worker logs the runs kept
    (runs/<run>/workers/<judge>/<worker>.log), each with the judge and worker it came from."""
    out = []
    for log in sorted(root.glob(".autoresearch/t/runs/*/workers/*/*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("DITAR-TEST-WHERE "):
                out.append({**json.loads(line[len("DITAR-TEST-WHERE "):]), "judge": log.parent.name,
                            "worker": log.stem})
    return out


def assert_outside_judge(recs: list[dict]) -> None:
    assert recs
    for r in recs:
        assert r["argv"][0].endswith("worker_main.py"), r["argv"]  # a worker, never pytest itself
        assert r["ppid"] == 0, r  # its parent (the sandbox's keeper) is outside its PID namespace
        assert len(r["procs"]) <= 8, r  # its /proc: the sandbox's PID 1, itself and its own children only


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_candidate_code_runs_in_a_worker_in_every_path_of_a_gated_run(pytester, model_cache, tmp_path_factory):
    proj = research_project(pytester, tmp_path_factory)
    sha, res, line = proj.experiment(recording(), "exact", "record where the candidate runs")
    assert "quality=6/6" in line, res.stdout[-3000:]
    recs = records(proj.root)
    assert_outside_judge(recs)
    assert len({r["judge"] for r in recs}) == 1  # one judge: the gated pytest run
    corpus = {it["seed"] for it in yaml.safe_load((proj.root / "suites/tiny/suite.yaml").read_text())["corpus"]}
    gens = [r for r in recs if r["event"] == "generate"]
    quality = [r for r in gens if set(r["seeds"]) <= corpus and len(r["seeds"]) > 1]
    fresh = [r for r in gens if not set(r["seeds"]) & corpus]  # the holdout's and the timed lane rounds'
    assert [r["event"] for r in recs].count("build") == 1  # built once, served every path
    assert quality and len(fresh) >= 12, (len(quality), len(fresh))


def test_worker_that_dies_is_a_crash_with_its_exit_code(research):
    dies = STOCK.replace("    def generate(self, request: Request) -> Generated:\n",
                         "    def generate(self, request: Request) -> Generated:\n        import os; os._exit(7)\n")
    sha, res, line = research.experiment(dies, "exact", "exit in generate")
    assert line.startswith("DITAR VERDICT: CRASH"), line
    assert "exited with code 7" in res.stdout, res.stdout[-3000:]
    assert research.head() != sha  # reverted like any crash


def test_worker_killed_by_a_signal_is_a_crash_naming_it(research):
    killed = STOCK.replace("    def generate(self, request: Request) -> Generated:\n",
                           "    def generate(self, request: Request) -> Generated:\n"
                           "        import os, signal; os.kill(os.getpid(), signal.SIGKILL)\n")
    sha, res, line = research.experiment(killed, "exact", "killed in generate")
    assert line.startswith("DITAR VERDICT: CRASH"), line
    assert "killed by signal 9" in res.stdout, res.stdout[-3000:]


# ---- the worker itself, through its judge-side handle ------------------------------------------

TICKER = '''
import os, threading, time
from pytest_ditar.interface import Generated


class Ticker:
    """Counts in a file from a background thread, so a test can see whether the process runs."""
    def __init__(self, path):
        self.path, self.n = path, 0
        threading.Thread(target=self.tick, daemon=True).start()

    def tick(self):
        while True:
            self.n += 1
            with open(self.path + ".tmp", "w") as fh:
                fh.write(str(self.n))
            os.replace(self.path + ".tmp", self.path)  # whole: a reader never sees it half written
            time.sleep(0.01)

    def generate(self, request):
        import numpy as np
        n = len(request.seeds)
        return Generated(latents=np.zeros((n, 4, 2, 2), np.float32), images=np.zeros((n, 8, 8, 3), np.uint8))


def build(spec):
    return Ticker(os.environ["TICKS"])
'''


def _worker(tmp_path: Path, source: str):
    from pytest_ditar.interface import PipelineSpec
    from pytest_ditar.runtime.worker import CandidateWorker

    cand = tmp_path / "cand"
    cand.mkdir()
    (cand / "pipeline.py").write_text(source)
    spec = PipelineSpec(model_dir=tmp_path, device="cpu", dtype="float32", scheduler="x", guidance=1.0, resolution=8)
    # tmp_path writable in its sandbox: the ticks are how these tests see the worker run
    return CandidateWorker("candidate", cand, spec, log_path=tmp_path / "worker.log", writable=[tmp_path])


def test_paused_worker_runs_nothing_until_resumed(tmp_path, monkeypatch):
    ticks = tmp_path / "ticks"
    monkeypatch.setenv("TICKS", str(ticks))
    w = _worker(tmp_path, TICKER).start()
    try:
        w.built(60)
        time.sleep(0.2)
        w.pause()
        time.sleep(0.1)  # a tick already under way may finish
        frozen = ticks.read_text()
        time.sleep(0.5)
        assert ticks.read_text() == frozen  # not one tick of its thread while paused
        from pytest_ditar.interface import Request

        out = w.generate(Request(labels=(1, 2), seeds=(3, 4), steps=1), timeout_s=30)  # a call resumes it
        assert out.images.shape == (2, 8, 8, 3) and out.latents.dtype.name == "float32"
        # an empty call's reply carries that call's arrays again: its round trip is a call's, less the work
        assert w.empty() == out.images.nbytes + out.latents.nbytes
        time.sleep(0.2)
        assert int(ticks.read_text()) > int(frozen)
        assert w.info["pid"] != os.getpid()
    finally:
        w.close()
    assert w.proc.poll() is not None


def test_hung_worker_is_killed_with_its_process_group(tmp_path, monkeypatch):
    from pytest_ditar.core.errors import CandidateError
    from pytest_ditar.interface import Request

    hangs = TICKER.replace("        import numpy as np\n", "        import subprocess, sys, numpy as np\n"
                           "        subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                           "        time.sleep(600)\n")
    monkeypatch.setenv("TICKS", str(tmp_path / "ticks"))
    w = _worker(tmp_path, hangs).start()
    try:
        w.built(60)
        t0 = time.monotonic()
        with pytest.raises(CandidateError) as err:
            w.generate(Request(labels=(1,), seeds=(3,), steps=1), timeout_s=1.0)
        assert err.value.kind == "timeout" and time.monotonic() - t0 < 15
        assert w.proc.poll() is not None
        assert not _group_alive(w.proc.pid)  # the grandchild it started went with it
    finally:
        w.close()


def _group_alive(pgid: int, wait_s: float = 5.0) -> bool:
    """Whether any process of the group is still there (killed members take a moment to be reaped)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.05)
    return True


ZYGOTE_PROBE = '''
import json, os, sys, tempfile
from pathlib import Path
from pytest_ditar.interface import PipelineSpec
from pytest_ditar.runtime.worker import CandidateWorker

cand, out = Path(sys.argv[1]), Path(sys.argv[2])
spec = PipelineSpec(model_dir=cand, device="cpu", dtype="float32", scheduler="x", guidance=1.0, resolution=8)
ws = [CandidateWorker(f"w{i}", cand, spec, log_path=out.parent / f"w{i}.log", writable=[out.parent]).start()
      for i in range(2)]
info = []
for w in ws:
    w.built(120)
    # w.proc is the sandbox's keeper (the fork, or the interpreter the judge spawned); the worker
    # itself is its child in the sandbox's PID namespace, where its own pid (hello's) is small
    parent = int(open(f"/proc/{w.proc.pid}/stat").read().rsplit(")", 1)[1].split()[1])
    info.append({"kind": type(w.proc).__name__, "parent": parent, "inner": w.info["pid"], "outer": w.proc.pid,
                 "parent_cmd": open(f"/proc/{parent}/cmdline", "rb").read().replace(b"\\0", b" ").decode()})
    w.close()
out.write_text(json.dumps({"judge": os.getpid(), "workers": info}))
'''


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote is Linux only")
@pytest.mark.parametrize("zygote", ["1", "0"])
def test_workers_fork_from_a_clean_zygote_unless_turned_off(tmp_path, zygote):
    import subprocess

    cand = tmp_path / "cand"
    cand.mkdir()
    (cand / "pipeline.py").write_text(TICKER)
    out = tmp_path / "out.json"
    env = {**os.environ, "DITAR_ZYGOTE": zygote, "TICKS": str(tmp_path / "ticks")}
    res = subprocess.run([sys.executable, "-c", ZYGOTE_PROBE, str(cand), str(out)], env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(out.read_text())
    assert all(w["inner"] != w["outer"] for w in got["workers"])  # in a PID namespace of its own
    kinds = {w["kind"] for w in got["workers"]}
    parents = {w["parent"] for w in got["workers"]}
    if zygote == "1":  # both forked by one zygote, itself a fresh interpreter the judge started
        assert kinds == {"ZygoteChild"} and len(parents) == 1 and got["judge"] not in parents
        assert all("--zygote" in w["parent_cmd"] for w in got["workers"])
    else:  # spawned directly by the judge
        assert kinds == {"Popen"} and parents == {got["judge"]}


def test_a_worker_whose_clock_disagrees_with_the_judges_is_a_crash(tmp_path, monkeypatch):
    """The attack: a candidate patches time.perf_counter in its own process to look fast (or slow).
    The judge never reads that clock for a verdict, and a worker account longer than the judge's
    own measurement of the same call is refused."""
    from pytest_ditar.core.errors import CandidateError
    from pytest_ditar.interface import Request

    warps = TICKER.replace("def build(spec):\n", "def build(spec):\n    import time\n"
                           "    real = time.perf_counter\n    time.perf_counter = lambda: real() * 2\n")
    warps = warps.replace("        import numpy as np\n",
                          "        import time, numpy as np\n        time.sleep(0.05)\n")
    monkeypatch.setenv("TICKS", str(tmp_path / "ticks"))
    w = _worker(tmp_path, warps).start()
    try:
        w.built(60)
        with pytest.raises(CandidateError, match="clock was tampered with"):
            w.generate(Request(labels=(1,), seeds=(3,), steps=1), timeout_s=30)
    finally:
        w.close()


def test_a_build_that_hangs_is_a_timeout_after_the_item_timeout(tmp_path, monkeypatch):
    from pytest_ditar.core.errors import CandidateError

    hangs = TICKER.replace("def build(spec):\n", "def build(spec):\n    import time; time.sleep(600)\n")
    monkeypatch.setenv("TICKS", str(tmp_path / "ticks"))
    w = _worker(tmp_path, hangs).start()
    try:
        w.hello()  # start-up has its own allowance; the build gets the item timeout
        t0 = time.monotonic()
        with pytest.raises(CandidateError) as err:
            w.built(1.0)
        assert err.value.kind == "timeout" and time.monotonic() - t0 < 15
        assert w.proc.poll() is not None
    finally:
        w.close()
