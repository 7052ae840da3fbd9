"""What a candidate reaches outside its worker: detached processes, its working directory and
environment, the champion's worktree, and a clock too fast for the host.

Each attack comes first, as the candidate an optimizing agent would write; its defence's test
follows. The detached-process attack was KEPT before the defence (1.8x in issue 15, 1.41x on
the 2-core CI host): a build() that double-forks and calls setsid() leaves a loop outside the
worker's process group, which SIGSTOP of that group never reached, spinning only while the
candidate's worker is stopped, that is, during the champion's timed rounds.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

# Loaded at collection: a module first imported inside another test's in-process pytester run is
# dropped from sys.modules after it, and numpy's extension then refuses to load a second time.
import pytest_ditar.runtime.worker  # noqa: F401

from candidates import STOCK

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")

DETACH = '''
import os as _os, sys as _sys

# The loop runs as a fresh interpreter whose command line names its counter file: that is how a
# test finds it from outside the worker's sandbox, where its own pid means nothing.
_LOOP = """
import os, sys, time
counter, worker = sys.argv[1], int(sys.argv[2])
n = 0
while True:
    n += 1
    try:
        stopped = open(f"/proc/{worker}/stat").read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        stopped = False
    if not stopped:
        time.sleep(0.001)
    if n % 200 == 0:  # written whole (tmp + rename): a reader never sees it half written
        try:
            with open(counter + ".tmp", "w") as fh:
                fh.write(str(n))
            os.replace(counter + ".tmp", counter)
        except OSError:
            pass  # where its sandbox makes the counter's folder read-only, it just spins
"""


def _detach(counter, worker):
    """Double fork + setsid: a loop in a session of its own, re-parented away from the worker. It
    idles while the worker runs and spins while the worker is stopped, which is when the other
    side is timed: only the champion's rounds pay for it."""
    if _os.fork():
        _os.wait()
        return
    _os.setsid()
    if _os.fork():
        _os._exit(0)
    _os.execv(_sys.executable, [_sys.executable, "-c", _LOOP, counter, str(worker)])
'''


# The worker is a child subreaper, so orphans come back to it; a candidate can undo that first.
EVADE = "    import ctypes; ctypes.CDLL(None).prctl(36, 0, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER off\n"


def detaching(source: str, counter: Path, copies: int = 1, evade: bool = False) -> str:
    """`source` whose build() first leaves `copies` detached busy loops behind (counters
    `counter`0, `counter`1, ...)."""
    head, sep, body = source.partition("def build(")
    call = (EVADE if evade else "") + "".join(
        f"    _detach({str(counter) + str(i)!r}, _os.getpid())\n    print('DITAR-TEST-DETACHED', flush=True)\n"
        for i in range(copies))
    return head + DETACH + "\n\n" + sep + body.replace(":\n", ":\n" + call, 1)


TRIVIAL = '''
import numpy as np
from pytest_ditar.interface import Generated


class Trivial:
    def generate(self, request):
        n = len(request.seeds)
        return Generated(latents=np.zeros((n, 4, 2, 2), np.float32), images=np.zeros((n, 8, 8, 3), np.uint8))


def build(spec):
    return Trivial()
'''


def _worker(tmp_path: Path, name: str, source: str, **kwargs):
    from pytest_ditar.interface import PipelineSpec
    from pytest_ditar.runtime.worker import CandidateWorker

    cand = tmp_path / name
    cand.mkdir()
    (cand / "pipeline.py").write_text(source)
    spec = PipelineSpec(model_dir=tmp_path, device="cpu", dtype="float32", scheduler="x", guidance=1.0, resolution=8)
    # tmp_path writable in its sandbox: the counters are how these tests see what runs
    return CandidateWorker(name, cand, spec, log_path=tmp_path / f"{name}.log", writable=[tmp_path], **kwargs)


def _alive(pid: int) -> bool:
    """Running or stopped; a zombie has nothing left to run."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _gone(pids: list[int], wait_s: float = 5.0) -> bool:
    deadline = time.monotonic() + wait_s
    while any(_alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _wait_for(path: Path, wait_s: float = 10.0) -> None:
    deadline = time.monotonic() + wait_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.05)


def _pids(counter: Path, n: int, wait_s: float = 10.0) -> list[int]:
    """The host's pids of the detached loops whose counters start with `counter`, found by their
    command line (the candidate itself only knows their pids in its sandbox's namespace)."""
    deadline = time.monotonic() + wait_s
    while True:
        pids = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if len(argv) > 3 and argv[1] == b"-c" and argv[3].startswith(str(counter).encode()) \
                        and _alive(int(name)):
                    pids.append(int(name))
        if len(pids) >= n or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert len(pids) >= n, f"{counter}*: the candidate's detached processes never started"
    return pids


@linux_only
@pytest.mark.parametrize("evade", [False, True], ids=["orphaned-to-its-worker", "orphaned-past-it"])
def test_a_detached_process_of_the_candidate_is_stopped_while_the_other_side_is_timed(tmp_path, evade):
    from pytest_ditar.runtime.worker_process import background_processes, only_running

    counter = tmp_path / "count"
    cand = _worker(tmp_path, "candidate", detaching(TRIVIAL, counter, evade=evade)).start()
    champ = _worker(tmp_path, "champion", TRIVIAL).start()
    try:
        cand.built(60)
        champ.built(60)
        [pid] = _pids(counter, 1)
        _wait_for(counter.parent / "count0")  # it runs while nothing is timed
        with only_running(champ, [cand, champ]):
            time.sleep(0.1)  # an iteration already under way may finish its write
            frozen = (counter.parent / "count0").read_text()
            time.sleep(0.5)
            assert (counter.parent / "count0").read_text() == frozen  # not one step during the champion's round
        assert any(str(pid) in line for line in background_processes(cand)), background_processes(cand)
        # in its sandbox's PID namespace an orphan comes back to the worker, or past it to the
        # sandbox's PID 1, which is in the worker's tree too: it is the candidate's, never the champion's
        assert not background_processes(champ)
    finally:
        cand.close()
        champ.close()
    assert _gone([pid])  # closing the candidate's worker ended what it left behind


@linux_only
def test_a_killed_worker_takes_its_detached_processes_with_it(tmp_path):
    cand = _worker(tmp_path, "candidate", detaching(TRIVIAL, tmp_path / "count", copies=2)).start()
    try:
        cand.built(60)
        pids = _pids(tmp_path / "count", 2)
        cand.kill()
        assert _gone(pids)
    finally:
        cand.close()


@linux_only
def test_a_workers_own_children_run_and_stop_with_it(tmp_path):
    """A child in another session stays part of the worker's computation: it runs while the worker
    is timed and stops when the worker is paused."""
    from pytest_ditar.runtime.worker_process import only_running

    counter, script = tmp_path / "count", tmp_path / "count.py"
    script.write_text("import itertools, os\nfor n in itertools.count():\n"
                      f"    open({str(counter)!r} + '.tmp', 'w').write(str(n))\n"
                      f"    os.replace({str(counter)!r} + '.tmp', {str(counter)!r})\n")
    child = TRIVIAL.replace("def build(spec):\n", "def build(spec):\n    import subprocess, sys\n"
                            f"    build.child = subprocess.Popen([sys.executable, {str(script)!r}], "
                            "start_new_session=True)\n")
    cand = _worker(tmp_path, "candidate", child).start()
    champ = _worker(tmp_path, "champion", TRIVIAL).start()
    try:
        cand.built(60)
        champ.built(60)
        _wait_for(counter)
        with only_running(champ, [cand, champ]):
            time.sleep(0.1)
            frozen = counter.read_text()
            time.sleep(0.3)
            assert counter.read_text() == frozen
        with only_running(cand, [cand, champ]):
            time.sleep(0.3)
            assert counter.read_text() != frozen  # resumed with its worker
        cand.pause()  # and stopped with it: no untimed time to work ahead in
        time.sleep(0.1)
        frozen = counter.read_text()
        time.sleep(0.3)
        assert counter.read_text() == frozen
    finally:
        cand.close()
        champ.close()


@linux_only
def test_a_candidate_that_leaves_busy_loops_behind_is_not_kept_and_nothing_survives(research):
    """The attack that was KEPT at 1.8x: the stock pipeline, plus one busy loop per core left
    behind by build(), which ran during the champion's timed rounds."""
    counter = research.root.parent / "count"  # read-only in the sandbox: the loops only spin
    source = detaching(STOCK, counter, copies=os.cpu_count() or 2)
    try:
        _, res, line = research.experiment(source, "exact", "slow the champion down from a detached process")
        assert not line.startswith("DITAR VERDICT: KEEP"), res.stdout[-3000:]
        assert "DITAR-TEST-DETACHED" in worker_logs(research.root)  # the loops were started
        left = _pids(counter, 0, wait_s=0)
        assert _gone(left), [p for p in left if _alive(p)]  # nothing the candidate started outlives the run
    finally:
        for pid in _pids(counter, 0, wait_s=0):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


# ---- the worker's working directory and environment --------------------------------------------

WHERE_AM_I = '''
def _record_surroundings():
    import json, os, sys
    import mutable
    print("DITAR-TEST-SURROUNDINGS " + json.dumps({{"cwd": os.getcwd(), "env": dict(os.environ),
                                                    "mutable": mutable.__file__, "path": sys.path}}), flush=True)
'''


def worker_logs(root: Path) -> str:
    """Every worker log the project's runs kept (runs/<run>/workers/<judge>/<worker>.log): a
    candidate's stdout, the one place outside its sandbox it can leave a note."""
    return "".join(p.read_text(errors="replace") for p in sorted(root.glob(".autoresearch/t/runs/*/workers/*/*.log")))


@linux_only
def test_the_candidate_runs_in_a_scratch_directory_without_the_state_directory_in_its_environment(
        research, monkeypatch):
    state = research.root / ".autoresearch"
    monkeypatch.setenv("SOME_TOOL_STATE", str(state / "t"))  # a judge's variable that names the state dir
    head, sep, body = STOCK.partition("def build(")
    source = head + WHERE_AM_I.format() + "\n\n" + sep + body.replace(":\n", ":\n    _record_surroundings()\n", 1)
    research.experiment(source, "exact", "look around")
    line = next(ln for ln in worker_logs(research.root).splitlines() if ln.startswith("DITAR-TEST-SURROUNDINGS "))
    seen = json.loads(line.split(" ", 1)[1])
    cwd = Path(seen["cwd"]).resolve()
    assert research.root.resolve() not in (cwd, *cwd.parents), seen["cwd"]  # not the project, nor inside it
    # only the compile cache's variables name it (read-only in the sandbox; tests/e2e/test_compile_cache.py)
    cache_vars = {"TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"}
    assert not [k for k, v in seen["env"].items() if str(state) in v and k not in cache_vars], seen["env"]
    assert seen["env"]["PWD"] == seen["cwd"] and seen["env"]["TMPDIR"] == seen["cwd"]  # its scratch, its temp
    assert Path(seen["mutable"]).resolve().parent == Path("/run/ditar/code/mutable")  # its own copy
    assert "" not in seen["path"] and seen["cwd"] not in seen["path"]  # nothing planted in its cwd shadows a module
    assert not cwd.exists()  # the scratch directory went with the run


# ---- the champion's code -------------------------------------------------------------------------

TAMPER = '''
def _slow_the_champion():
    """Put a sleep into the champion's generate() wherever its code lies (a worktree under the state
    directory, as it once did; the judge's folder of role code under /dev/shm or the temp folder,
    as now), before its worker imports it, for a few seconds; every pipeline.py but its own."""
    import glob, os, pathlib, tempfile, time
    root = pathlib.Path(__file__).resolve().parent.parent
    mine = pathlib.Path(__file__).resolve()
    call = "    def generate(self, request: Request) -> Generated:\\n"
    where = [str(root / ".autoresearch/*/worktrees/*/mutable/pipeline.py")]
    # its own judge's folder only (named by the judge's pid, an ancestor's): another test's judge on
    # this host is not what this attack is about
    pids, p = [], os.getpid()
    while p > 1 and len(pids) < 8:
        pids.append(p)
        p = int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1])
    where += [f"{d}/ditar-run-{pid}-*/code/*/mutable/pipeline.py" for d in ("/dev/shm", tempfile.gettempdir())
              for pid in pids]
    found = 0
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for p in [p for pattern in where for p in glob.glob(pattern) if pathlib.Path(p).resolve() != mine]:
            found += 1
            src = pathlib.Path(p).read_text()
            if "time.sleep(0.02)" not in src:
                try:
                    os.chmod(os.path.dirname(p), 0o755)
                    os.chmod(p, 0o644)
                    pathlib.Path(p).write_text(src.replace(call, call + "        import time; time.sleep(0.02)\\n"))
                except OSError as exc:  # its sandbox: read-only; it stays the stock pipeline
                    print(f"refused: {exc.strerror}", flush=True)
                    return
        time.sleep(0.005)
    print(f"found: {found}", flush=True)
'''


def test_a_candidate_cannot_reach_the_champions_code(research):
    """The champion's code is nowhere the candidate's sandbox shows (issue 38: written by the judge
    into a folder every sandbox hides), and the candidate is judged as the stock pipeline it
    otherwise is."""
    head, sep, body = STOCK.partition("def build(")
    source = head + TAMPER + "\n\n" + sep + body.replace(":\n", ":\n    _slow_the_champion()\n", 1)
    _, res, line = research.experiment(source, "exact", "slow the champion down through its code")
    assert not line.startswith("DITAR VERDICT: KEEP"), res.stdout[-3000:]
    assert "role code modified" not in res.stdout, res.stdout[-3000:]
    assert "found: 0" in worker_logs(research.root)


def test_with_the_sandbox_off_an_edit_of_the_champions_code_is_a_crash_naming_it(pytester, model_cache,
                                                                                tmp_path_factory):
    """Detection, the second line, where the project owner turned the sandbox off before the baseline."""
    from conftest import research_project

    proj = research_project(pytester, tmp_path_factory, config={"sandbox": "off"})
    head, sep, body = STOCK.partition("def build(")
    source = head + TAMPER + "\n\n" + sep + body.replace(":\n", ":\n    _slow_the_champion()\n", 1)
    _, res, line = proj.experiment(source, "exact", "slow the champion down through its code")
    assert line.startswith("DITAR VERDICT: CRASH"), res.stdout[-3000:]
    assert line.endswith(" sandbox=off"), line
    assert "role code modified during the run" in res.stdout and "mutable/pipeline.py" in res.stdout, \
        res.stdout[-3000:]
    assert proj.ledger()[-1]["sandbox"] == "off"


# ---- the CPU roofline -----------------------------------------------------------------------------

def test_the_host_roofline_refuses_a_time_the_host_cannot_compute_in():
    from pytest_ditar.hardware.roofline import HOST_MARGIN, host_roofline_check

    host = 50e9  # 50 GFLOP/s measured at baseline
    assert host_roofline_check(0.1, 1e9, host) is None  # 10 GFLOP/s: an honest CPU pipeline
    assert host_roofline_check(1e9 / (host * HOST_MARGIN) * 1.001, 1e9, host) is None  # just inside the margin
    problem = host_roofline_check(0.005, 1e9, host)  # 200 GFLOP/s: four times what the host can do
    assert problem and "implies 200 GFLOP/s, above the host's measured 50 GFLOP/s" in problem, problem
    assert "not positive" in host_roofline_check(0.0, 1e9, host)
    with pytest.raises(ValueError):
        host_roofline_check(0.1, 1e9, 0.0)


def test_a_cpu_baseline_stores_the_hosts_measured_flops_with_its_lanes(research):
    lanes = json.loads((research.root / ".autoresearch/t/baseline/lanes.json").read_text())
    probes = {name: lane.get("host_flops") for name, lane in lanes.items()}
    assert probes and all(p and 1e8 < p < 1e14 for p in probes.values()), probes  # 0.1 GFLOP/s .. 100 TFLOP/s
    assert len(set(probes.values())) == 1  # one probe per baseline
